"""RL in the graph: the `checkpoints` asset with ``method: grpo`` trains a tiny model with TRL's GRPOTrainer through
the Pipes subprocess, rewards from real verifier runs (one fresh sandbox per sample, from the SandboxResource's
backend), started from a named checkpoint; the registry row carries the algorithm and the reward curve, and the
checkpoint is registered as a model (benchable like any other) and loads as a servable HF folder."""

import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from test_train_grpo import GRADE  # noqa: E402 - the verifier of the library GRPO test


def _backend() -> str:
    from clawgym.sandbox import get_factory

    try:  # an isolating backend when this machine has one, else the local one
        f = get_factory("bwrap")
        with f.open([]) as sb:
            assert sb.exec("true").ok
        return "bwrap"
    except Exception:
        return "local"


def test_grpo_checkpoint_through_the_graph(tmp_path):
    import dagster as dg
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from clawgym import lake as lk
    from clawgym.lake.records import task_row
    from clawgym.tasks.model import File, Task, Verifier
    from clawgym.train.base_model import make_tiny_model
    from clawgym.train.record import read_registry_row
    from clawgym_assets.defs.lake.resources import LakeResource
    from clawgym_assets.defs.rollouts.resources import ModelEndpointsResource, SandboxResource
    from clawgym_assets.defs.training import assets as training
    from clawgym_assets.defs.training.resources import TrainerResource

    data = tmp_path / "data"
    ckpts = data / "checkpoints"
    # "started from any checkpoint": the start is a named checkpoint folder (here an untrained tiny model)
    start = make_tiny_model(ckpts / "tiny-start", hidden_size=32, num_layers=1)
    tasks = [Task(task_id=f"sum-{i}", split="train", family="sum",
                  instruction=f"Write the sum of the numbers in input/data.txt to output/answer.txt ({i})",
                  files=[File(path="input/data.txt", content=b"1 2 3\n")], verifier=Verifier(kind="grade", code=GRADE))
             for i in range(3)]
    lake = LakeResource(data_dir=str(data))
    lake.write("tasks", [task_row(t, "synthetic") for t in tasks], {"source": "synthetic"})
    res = {"lake": lake, "pipes_subprocess_client": dg.PipesSubprocessClient(),
           "endpoints": ModelEndpointsResource(lake=lake, checkpoints_dir=str(ckpts), base_model_dir=str(start)),
           "trainer": TrainerResource(), "sandbox": SandboxResource(backend=_backend())}
    grpo = {"num_generations": 2, "per_device_train_batch_size": 2, "max_steps": 2, "learning_rate": 1e-4,
            "max_completion_length": 12, "max_tool_calling_iterations": 1, "seed": 0, "logging_steps": 1}
    assets = [training.checkpoints, dg.AssetSpec("sft_dataset"), dg.AssetSpec("base_model")]
    with dg.instance_for_test() as inst:
        inst.add_dynamic_partitions("checkpoint", ["grpo-tiny"])
        with pytest.raises(dg.Failure, match="unknown field 'lr'"):  # TRL's own names, checked before training
            dg.materialize(assets, selection=["checkpoints"], partition_key="grpo-tiny", instance=inst, resources=res,
                           run_config={"ops": {"checkpoints": {"config": {"method": "grpo",
                                                                          "grpo_config": {"lr": 0.1}}}}})
        r = dg.materialize(assets, selection=["checkpoints"], partition_key="grpo-tiny", instance=inst, resources=res,
                           run_config={"ops": {"checkpoints": {"config": {
                               "method": "grpo", "base": "tiny-start", "parent": "tiny-start", "grpo_config": grpo,
                               "grpo_tasks": 2, "score_workers": 2}}}})
        assert r.success
        assert inst.has_dynamic_partition("model", "grpo-tiny")  # a bench_scores partition, like any checkpoint
    md = r.asset_materializations_for_node("checkpoints")[0].metadata
    assert md["algorithm"].value == "grpo" and md["method"].value == "grpo" and md["steps"].value == 2
    assert md["n_tasks"].value == 2 and md["n_sandboxes"].value == 4  # one sandbox per sample: 2 steps x 2
    points = md["reward_curve"].value["points"]
    # the random model writes no answer: each sample's verifier gives exactly 2 of 3 checks
    assert [p["step"] for p in points] == [1, 2] and all(p["reward"] == pytest.approx(2 / 3) for p in points)

    out = ckpts / "grpo-tiny"
    row = read_registry_row(out)
    assert row["algorithm"] == "grpo" and row["base"] == str(start) and row["parent"] == "tiny-start"
    assert {x["task_id"] for x in row["rewards"]} == {"sum-0", "sum-1"}  # the first 2 training tasks
    assert row["hyperparams"]["grpo_config"]["num_generations"] == 2
    assert row["hyperparams"]["tokens"]["retokenized"] == 0
    assert (out / "reward.png").stat().st_size > 1000
    (reg,) = lk.read_table("checkpoints", root=data / "lake").to_pylist()
    assert (reg["checkpoint"], reg["algorithm"], reg["parent"]) == ("grpo-tiny", "grpo", "tiny-start")
    assert [p["reward"] for p in json.loads(reg["reward_curve_json"])] == pytest.approx([2 / 3, 2 / 3])
    assert reg["final_reward"] == pytest.approx(2 / 3) and reg["run_id"] == r.run_id
    # a servable folder: weights, the tool chat template, generation stops at <|im_end|>
    tok = AutoTokenizer.from_pretrained(str(out))
    model = AutoModelForCausalLM.from_pretrained(str(out))
    assert "<tool_call>" in tok.chat_template and tok.response_template
    assert model.generation_config.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")
