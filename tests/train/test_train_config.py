"""Training settings by TRL's / peft's own names (checked against their dataclasses) and the one checkpoint
registry record (its lake row matches the `checkpoints` schema). No training here: fast."""

import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def test_sft_fields_build_trl_sftconfig_with_clawgym_defaults(tmp_path):
    from trl import SFTConfig

    from clawgym.train.sft import SFTRunConfig

    fields = SFTRunConfig().trl_fields()
    args = SFTConfig(output_dir=str(tmp_path), **fields)
    # clawgym's defaults, where TRL's own differ (lr 2e-5, batch 8, max_length 1024, seed 42, linear schedule …)
    assert ((args.learning_rate, args.per_device_train_batch_size, args.max_length, args.max_steps)
            == (1e-5, 1, 4096, 100))
    assert (args.seed, args.data_seed, args.lr_scheduler_type.value, args.save_total_limit) == (0, 0, "constant", 1)
    assert args.assistant_only_loss is True and args.activation_checkpointing is False
    from clawgym.train.config import cpu_bf16_supported

    # no GPU here: bf16 exactly where the CPU computes it natively (AVX512-BF16 / AMX), else off (TRL alone would
    # turn it on everywhere, emulated and slower on an AVX2 CPU)
    assert args.bf16 is cpu_bf16_supported()
    # TRL's names pass straight through; data_seed follows the seed unless set
    f = SFTRunConfig(sft_config={"learning_rate": 3e-4, "seed": 7, "warmup_steps": 2}).trl_fields()
    assert (f["learning_rate"], f["seed"], f["data_seed"], f["warmup_steps"]) == (3e-4, 7, 7, 2)
    assert SFTRunConfig(sft_config={"seed": 7, "data_seed": 1}).trl_fields()["data_seed"] == 1


def test_unknown_or_reserved_fields_are_one_error_naming_the_field():
    from clawgym.train.config import TrainConfigError
    from clawgym.train.grpo import GRPORunConfig
    from clawgym.train.sft import SFTRunConfig

    with pytest.raises(TrainConfigError, match=r"sft_config: unknown field 'lr'.*trl\.SFTConfig"):
        SFTRunConfig(sft_config={"lr": 1e-4})
    with pytest.raises(TrainConfigError, match=r"unknown field 'learning_rat'.*did you mean 'learning_rate'"):
        SFTRunConfig(sft_config={"learning_rat": 1e-4})
    with pytest.raises(TrainConfigError, match=r"'output_dir' is set by clawgym"):
        SFTRunConfig(sft_config={"output_dir": "/tmp/x"})
    with pytest.raises(TrainConfigError, match=r"lora_config: unknown field 'lora_r'.*peft\.LoraConfig"):
        SFTRunConfig(lora=True, lora_config={"lora_r": 4})
    with pytest.raises(TrainConfigError, match=r"grpo_config: unknown field 'batch_size'.*trl\.GRPOConfig"):
        GRPORunConfig(grpo_config={"batch_size": 2})
    # a TRL field at the top level of a serialized run (the Pipes extras) says where it belongs
    with pytest.raises(TrainConfigError,
                       match=r"unknown field 'max_length' \(a trl\.SFTConfig field: put it in sft_config\)"):
        SFTRunConfig.from_dict({"max_length": 512})
    run = SFTRunConfig(name="a", sft_config={"max_steps": 3}, lora=True, lora_config={"r": 4})
    assert SFTRunConfig.from_dict(json.loads(json.dumps(run.to_dict()))) == run


def test_lora_and_grpo_fields(tmp_path):
    from peft import LoraConfig
    from trl import GRPOConfig

    from clawgym.train.grpo import GRPORunConfig
    from clawgym.train.sft import SFTRunConfig

    assert SFTRunConfig().peft_fields() is None  # full fine-tuning
    lora = LoraConfig(**SFTRunConfig(lora=True, lora_config={"r": 4}).peft_fields())
    assert (lora.r, lora.lora_alpha, lora.lora_dropout, lora.target_modules) == (4, 32, 0.05, "all-linear")
    g = GRPOConfig(output_dir=str(tmp_path), **GRPORunConfig(grpo_config={"max_steps": 3}).trl_fields())
    assert (g.max_steps, g.num_generations, g.per_device_train_batch_size, g.learning_rate) == (3, 8, 8, 1e-6)
    from clawgym.train.config import cpu_bf16_supported

    assert (g.max_tool_calling_iterations, g.logging_steps, g.seed, g.bf16) == (8, 1, 0, cpu_bf16_supported())


def test_checkpoint_record_row_matches_lake_schema(tmp_path):
    from clawgym import lake
    from clawgym.lake.schemas import schema
    from clawgym.train.record import RECORD_FILE, CheckpointRecord, read_registry_row

    rec = CheckpointRecord(checkpoint="ck-1", path=str(tmp_path), base="b", parent="smollm2-base", data_version="v1",
                           n_samples=3, hyperparams={"sft_config": {"learning_rate": 1e-5}},
                           loss_curve=[{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.5}], final_loss=1.5, steps=2,
                           run_id="r1")
    row = rec.to_row()
    assert list(row) == schema("checkpoints").names
    rec.save()
    assert (tmp_path / RECORD_FILE).exists() and CheckpointRecord.load(tmp_path) == rec
    assert read_registry_row(tmp_path)["hyperparams_json"] == json.dumps(rec.hyperparams)
    assert CheckpointRecord.load(tmp_path / "nothing") is None
    lake.write_table("checkpoints", [row], root=tmp_path / "lake")
    back = lake.read_table("checkpoints", root=tmp_path / "lake").to_pylist()[0]
    assert back["checkpoint"] == "ck-1" and back["n_samples"] == 3 and back["final_loss"] == 1.5
    assert json.loads(back["hyperparams_json"]) == rec.hyperparams
    assert json.loads(back["loss_curve_json"]) == rec.loss_curve
    assert back["created_at"].isoformat() == rec.created_at
    (tmp_path / RECORD_FILE).write_text(json.dumps({**rec.to_dict(), "bogus": 1}))
    with pytest.raises(ValueError, match=r"clawgym_checkpoint\.json: .*bogus"):
        CheckpointRecord.load(tmp_path)
    assert rec.model_copy(update={"parent": None}).to_row()["parent"] is None
    # a record file with a wrong-typed field is one error naming the file and the field
    (tmp_path / RECORD_FILE).write_text(json.dumps({**rec.to_dict(), "n_samples": "three"}))
    with pytest.raises(ValueError, match=r"clawgym_checkpoint\.json: (?s:.*)n_samples"):
        CheckpointRecord.load(tmp_path)


def test_trainer_resource_speaks_trl_names():
    from clawgym.train.config import TrainConfigError
    from clawgym_assets.defs.training.resources import TrainerResource

    run = TrainerResource(max_steps=2, learning_rate=3e-4, sft_config={"warmup_steps": 1}, lora=True,
                          lora_config={"r": 8}).sft_run(name="ck", base_model="b", dataset_path="d", output_dir="o")
    f = run.trl_fields()
    assert ((f["max_steps"], f["learning_rate"], f["warmup_steps"], f["max_length"], f["use_cpu"])
            == (2, 3e-4, 1, 4096, True))  # the resource default (long rows keep their stop token)
    assert run.peft_fields()["r"] == 8 and run.name == "ck" and run.output_dir == "o"
    with pytest.raises(TrainConfigError, match=r"TrainerResource: .*unknown field 'lr'"):
        TrainerResource(sft_config={"lr": 1.0}).sft_run(output_dir="o")
    with pytest.raises(TrainConfigError, match=r"'max_steps' is set by the resource's own field"):
        TrainerResource(sft_config={"max_steps": 9}).sft_run(output_dir="o")
    with pytest.raises(TrainConfigError, match=r"unknown field 'rank'.*peft\.LoraConfig"):
        TrainerResource(lora=True, lora_config={"rank": 8}).sft_run(output_dir="o")
