"""checkpoints path: a CPU SFT run (TRL SFTTrainer) of a tiny model with the real tokenizer, resumed out of
process through Dagster Pipes, then served OpenAI-compatibly; it answers with a parseable tool call."""

import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

TOOLS = [{"type": "function", "function": {
    "name": "write", "description": "Create or overwrite a file in the workspace.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                   "required": ["path", "content"]}}}]
PROMPT = "Write hi to out.txt"
CONV = [
    {"role": "user", "content": PROMPT},
    {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "id": "c1",
         "function": {"name": "write", "arguments": {"path": "out.txt", "content": "hi"}}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "Wrote 2 bytes to out.txt"},
    {"role": "assistant", "content": "Done."},
]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from clawgym.train.base_model import make_tiny_model
    from clawgym.trajectories.sft import save_hf_dataset

    d = tmp_path_factory.mktemp("sft")
    base = make_tiny_model(d / "tiny", hidden_size=64, num_layers=2)
    ds = save_hf_dataset([{"messages": CONV, "tools": TOOLS, "sample_id": "s1", "task_id": "t1", "category": "c",
                           "n_tokens": 0}], d / "ds")
    return {"dir": d, "base": str(base), "ds": str(ds)}


def _cfg(setup, **kw):
    from clawgym.train.sft import SFTRunConfig

    sft = dict(learning_rate=5e-3, max_length=1024, save_steps=15, logging_steps=5, seed=0)
    sft.update(kw.pop("sft_config", {}))
    base = dict(base_model=setup["base"], dataset_path=setup["ds"], output_dir=str(setup["dir"] / "ckpt-tiny"),
                dataset_version="v-test", sft_config=sft)
    base.update(kw)
    return SFTRunConfig(**base)


def test_sft_then_resume_through_pipes_then_serve(setup):
    import dagster as dg

    from clawgym.train.sft import read_registry_row, run_sft

    # 1) in-process: the first 15 steps (a Trainer checkpoint is saved at step 15)
    rec1 = run_sft(_cfg(setup, sft_config={"max_steps": 15}))
    out = setup["dir"] / "ckpt-tiny"
    assert rec1.steps == 15 and (out / "_trainer" / "checkpoint-15").is_dir()
    assert rec1.loss_curve[-1]["loss"] < rec1.loss_curve[0]["loss"]
    assert rec1.hyperparams["sft_config"]["learning_rate"] == 5e-3  # TRL's names in the record too

    # 2) the real `checkpoints` asset: TrainerResource (TRL's field names) -> Pipes subprocess -> the lake's
    # registry row. Resumes from step 15 (same output folder, same rows from the lake's sft table) to 90 (the tiny
    # model writes the closing </tool_call> that the engine's parser needs only after ~90 steps; at 45 it writes
    # <tool_call> again).
    from clawgym import lake as lk
    from clawgym.trajectories.sft import write_sft_parquet
    from clawgym_assets.defs.lake.resources import LakeResource
    from clawgym_assets.defs.rollouts.resources import ModelEndpointsResource, SandboxResource
    from clawgym_assets.defs.training import assets as training
    from clawgym_assets.defs.training.resources import TrainerResource

    data = setup["dir"] / "data"
    write_sft_parquet([{"sample_id": "s1", "task_id": "t1", "messages_json": json.dumps(CONV),
                        "tools_json": json.dumps(TOOLS), "n_tokens": 100, "category": "c"}], root=data / "lake")
    lake = LakeResource(data_dir=str(data))
    nested = {"lake": lake} if "lake" in ModelEndpointsResource.model_fields else {}
    res = {"lake": lake, "pipes_subprocess_client": dg.PipesSubprocessClient(), "sandbox": SandboxResource(),
           "endpoints": ModelEndpointsResource(**nested, checkpoints_dir=str(setup["dir"]),
                                               base_model_dir=setup["base"]),
           "trainer": TrainerResource(max_steps=90, learning_rate=5e-3, max_length=1024,
                                      sft_config={"save_steps": 15, "logging_steps": 5, "seed": 0})}
    assets = [training.checkpoints, dg.AssetSpec("sft_dataset"), dg.AssetSpec("base_model")]
    # instance_for_test kept open for the whole materialize: an ephemeral() instance created after other
    # Dagster tests in the same session can fail with "Attempted to resolve undefined DagsterInstance weakref"
    with dg.instance_for_test() as inst:
        inst.add_dynamic_partitions("checkpoint", ["ckpt-tiny"])
        bad = dict(res, trainer=TrainerResource(sft_config={"lr": 0.1}))  # not a trl.SFTConfig field
        with pytest.raises(dg.Failure, match="unknown field 'lr'"):
            dg.materialize(assets, selection=["checkpoints"], partition_key="ckpt-tiny", instance=inst, resources=bad)
        r = dg.materialize(assets, selection=["checkpoints"], partition_key="ckpt-tiny", instance=inst, resources=res,
                           run_config={"ops": {"checkpoints": {"config": {"parent": "smollm2-base"}}}})
        assert r.success
        assert inst.has_dynamic_partition("model", "ckpt-tiny")
    md = r.asset_materializations_for_node("checkpoints")[0].metadata
    assert md["steps"].value == 90
    assert md["checkpoint"].value == "ckpt-tiny"  # the partition key names the checkpoint
    assert md["resumed_from"].value.endswith("checkpoint-15")
    assert md["tokens_per_s"].value > 0 and md["n_samples"].value == 1
    assert md["hyperparams"].value["sft_config"]["learning_rate"] == 5e-3
    # the curve spans the whole run: steps 5..15 restored from the checkpoint, 20..90 from the resumed run
    assert [p["step"] for p in md["loss_curve"].value["points"]] == list(range(5, 95, 5))
    row = read_registry_row(out)
    sft_files = sorted(p.name for p in (data / "lake" / "sft").glob("*.parquet"))
    assert row["steps"] == 90 and row["data_version"] == ",".join(sft_files) and row["base"] == setup["base"]
    assert (out / "loss.png").stat().st_size > 1000
    assert row["final_loss"] < 0.5, row["loss_curve"]
    # the lake's registry row: the same record (lake schema), parent and run id added by the asset
    (reg,) = lk.read_table("checkpoints", root=data / "lake").to_pylist()
    assert ((reg["checkpoint"], reg["path"], reg["parent"], reg["n_samples"])
            == ("ckpt-tiny", str(out), "smollm2-base", 1))
    assert reg["run_id"] == r.run_id and reg["final_loss"] == pytest.approx(row["final_loss"])
    hp = json.loads(reg["hyperparams_json"])
    assert hp["sft_config"]["max_steps"] == 90 and hp["sft_config"]["save_steps"] == 15 and hp["lora"] is False
    assert [p["step"] for p in json.loads(reg["loss_curve_json"])] == list(range(5, 95, 5))

    # 3) the checkpoint loads and serves; its answer is a parseable OpenAI tool call
    import openai
    from transformers import AutoModelForCausalLM

    from clawgym.serve import ModelServer

    AutoModelForCausalLM.from_pretrained(str(out))
    srv = ModelServer(out)
    with srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key=srv.token or "none")
        r = client.chat.completions.create(model=srv.model_name, messages=[{"role": "user", "content": PROMPT}],
                                           tools=TOOLS, max_tokens=48, temperature=0)
        pid = srv.pid
    calls = r.choices[0].message.tool_calls
    assert calls, r.choices[0].message
    assert calls[0].function.name == "write"
    assert json.loads(calls[0].function.arguments) == {"path": "out.txt", "content": "hi"}
    with pytest.raises(ProcessLookupError):  # no leaked server
        os.kill(pid, 0)


def test_lora_from_lake_parquet(setup, tmp_path):
    """LoRA (peft) on the lake's sft parquet: the adapter is merged, the saved folder is a plain HF model
    whose weights moved away from the base."""
    import torch
    from transformers import AutoModelForCausalLM

    from clawgym.train.sft import run_sft
    from clawgym.trajectories.sft import write_sft_parquet

    write_sft_parquet([{"sample_id": "s1", "task_id": "t1", "messages_json": json.dumps(CONV),
                        "tools_json": json.dumps(TOOLS), "n_tokens": 100, "category": "c"}], root=tmp_path / "lake")
    out = tmp_path / "lora"
    rec = run_sft(_cfg(setup, dataset_path=str(tmp_path / "lake" / "sft"), output_dir=str(out), resume=False,
                       lora=True, lora_config={"r": 4, "lora_alpha": 8},
                       sft_config={"max_steps": 3, "learning_rate": 5e-2, "logging_steps": 1}))
    assert rec.steps == 3 and rec.n_samples == 1
    assert rec.hyperparams["lora"] is True and rec.hyperparams["lora_config"]["r"] == 4
    assert rec.hyperparams["lora_config"]["lora_dropout"] == 0.05  # clawgym's LoRA defaults under peft's names
    assert not (out / "adapter_config.json").exists()  # merged into the weights
    base = AutoModelForCausalLM.from_pretrained(setup["base"])
    tuned = AutoModelForCausalLM.from_pretrained(str(out))
    bw, tw = dict(base.named_parameters()), dict(tuned.named_parameters())
    assert set(bw) == set(tw)
    # compared in the saved dtype (bf16 where this CPU trains in bf16: every weight is the base's rounded once)
    changed = [k for k in bw if not torch.equal(bw[k].to(tw[k].dtype), tw[k])]
    assert changed and all("proj" in k for k in changed)  # only the LoRA-targeted linear layers moved
