"""GRPO with the task's code verifier as reward, one fresh sandbox per sample (formats.md "RL").

    run_grpo(GRPORunConfig(..., grpo_config={"learning_rate": 1e-6, "max_steps": 50}), tasks, factory)
        -> CheckpointRecord

Trainer settings are `trl.GRPOConfig` fields by TRL's own names (`grpo_config`, over `config.GRPO_DEFAULTS`);
the rest of `GRPORunConfig` is clawgym's own (which model, where to save, scoring threads, system prompt).

TRL's GRPOTrainer samples `num_generations` completions per prompt (a task instruction). Each completion is
an agentic rollout in its own environment (`SandboxEnv`, made by `SandboxEnvFactory`: TRL's
`environment_factory`): `reset` opens a fresh sandbox holding the task's workspace, the agent's own tools
(clawgym.agent.tools: the schemas and executor of the builtin loop) run inside it, and the reward function
verifies the sandbox's workspace in a clean room (`clawgym.verify.verify_after_agent`) with the completion as
transcript, closing the sandbox. Sandboxes of one generation batch are scored in parallel threads.

GPU recipe (documented, not run in CI): see docs in this module's `GPU_RECIPE`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from clawgym.agent.tools import TOOL_SCHEMAS, execute_tool
from clawgym.tasks.model import Task
from clawgym.train.base_model import DEFAULT_BASE_DIR
from clawgym.train.config import (
    GRPO_DEFAULTS,
    bf16_optimizer,
    check_fields,
    grpo_config_class,
    precision,
    resolve_device,
    weights_dtype,
)
from clawgym.train.record import CheckpointRecord

GPU_RECIPE = """\
GRPO on one GPU (e.g. H100/H200), from an SFT checkpoint:
  GRPORunConfig(base_model="data/checkpoints/<sft>", output_dir="data/checkpoints/<sft>-grpo", score_workers=8,
                grpo_config={"num_generations": 8, "per_device_train_batch_size": 8, "gradient_accumulation_steps": 4,
                             "max_completion_length": 2048, "max_tool_calling_iterations": 16, "learning_rate": 1e-6,
                             "beta": 0.0, "max_steps": 200, "bf16": True, "use_vllm": True, "vllm_mode": "server"})
  with a docker sandbox factory (clawgym.sandbox.get_factory("docker")) so 8 samples × batch run isolated;
  vllm_mode "server": run_grpo starts the embedded engine (clawgym.serve, vLLM) on the checkpoint with vLLM's NCCL
  weight transfer and TRL pushes the weights after each step (vllm_server_mode; the trainer's Python needs
  `pip install "trl[vllm]"`); "colocate" runs vLLM inside the trainer instead (vllm_gpu_memory_utilization).
  score_workers ≥ batch size. ClawGym used 8 samples per prompt with the code verifier as reward.
"""

_GRPO_RESERVED = {"output_dir": "GRPORunConfig.output_dir; Trainer checkpoints go to <output_dir>/_trainer"}


@dataclass
class GRPORunConfig:
    """One GRPO run: base model, output folder, scoring threads, system prompt and trl.GRPOConfig
    overrides (checked against GRPOConfig's fields)."""

    base_model: str = DEFAULT_BASE_DIR  # any HF model folder: the base or a trained checkpoint (SFT, GRPO)
    output_dir: str = "data/checkpoints/grpo"
    name: str | None = None
    dataset_version: str = ""  # what the tasks were (e.g. their ids' hash / the tasks table files)
    resume: bool = True  # continue from the last Trainer checkpoint in <output_dir>/_trainer
    score_workers: int = 8  # threads scoring one generation batch's sandboxes
    system_prompt: str | None = None  # default: the builtin agent's system prompt
    grpo_config: dict[str, Any] = field(default_factory=dict)  # trl.GRPOConfig fields over GRPO_DEFAULTS

    def __post_init__(self) -> None:
        check_fields(grpo_config_class(), self.grpo_config, "GRPORunConfig.grpo_config", _GRPO_RESERVED)

    def trl_fields(self) -> dict[str, Any]:
        """The keyword arguments of trl.GRPOConfig (without output_dir): clawgym's defaults, then `grpo_config`."""
        return resolve_device({**GRPO_DEFAULTS, **self.grpo_config})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> GRPORunConfig:
        from clawgym.train.config import TrainConfigError, field_names

        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            k = unknown[0]
            hint = " (a trl.GRPOConfig field: put it in grpo_config)" if k in field_names(grpo_config_class()) else ""
            raise TrainConfigError(f"GRPORunConfig: unknown field {k!r}{hint}")
        return cls(**d)


class SandboxEnv:
    """One sample's environment (made by :class:`SandboxEnvFactory`, TRL's `environment_factory`): a fresh
    sandbox per `reset`, and the agent's own tools as methods — one per schema of clawgym.agent.tools.TOOL_SCHEMAS,
    each running `execute_tool` as the builtin loop does (its result text is the tool message). TRL reads a
    method's signature and docstring as the tool's schema; the GRPO tokenizer renders the agent's schema itself
    (`guard_control_text`: a tool carrying `tool_schema`)."""

    def __init__(self, tasks: Mapping[str, Task], factory, on_open: Callable[[str], None] | None = None):
        self.tasks = tasks
        self.factory = factory
        self.on_open = on_open
        self.sandbox = None
        self.task: Task | None = None
        self.calls: list[dict] = []
        self.infra_error: str | None = None  # why the last `_score` could not score (the sandbox failed)

    def reset(self, task_id: str | None = None, **kwargs) -> str | None:
        self._close()
        self.calls = []
        if task_id is None:  # TRL probes a fresh instance once at init
            return None
        self.task = self.tasks[task_id]
        self.sandbox = self.factory.open(self.task.files)
        if self.on_open is not None:
            self.on_open(f"{task_id}:{id(self.sandbox)}")
        return None

    def _run(self, name: str, args: dict) -> str:
        from clawgym.agent.loop import Limits

        self.calls.append({"name": name, "arguments": args})
        if self.sandbox is None:
            return "Not run: no sandbox (the environment was not reset with a task)."
        return execute_tool(self.sandbox, name, args, max_timeout_s=Limits().tool_timeout_s).content

    def _score(self, transcript: list | None) -> float | None:
        """The reward: the task's verifier in a clean room (clawgym.verify.verify_after_agent: this sandbox's
        workspace exported as data, this sandbox closed, the check run in a room of `factory.rooms()`).

        None when the sandbox machinery failed (a SandboxError: the room or the engine, never the agent's doing:
        a workspace the agent destroyed exports as what is there and scores it). An infra failure is not the
        policy's score, so it must neither reach TRL as an exception (one broken room would end the run) nor as
        0.0 (it would teach the policy to avoid whatever it did); `make_reward_func` gives it a neutral reward.
        What went wrong is kept in `infra_error`."""
        from clawgym.sandbox.base import SandboxError
        from clawgym.verify.runtime import verify_after_agent

        self.infra_error = None
        if self.sandbox is None or self.task is None:
            return 0.0
        try:
            res = verify_after_agent(self.task, self.sandbox, self.factory.rooms(), transcript=transcript or [],
                                     judge="offline")
            return float(res.score or 0.0)
        except SandboxError as e:
            self.infra_error = f"{type(e).__name__}: {e}"[:500]
            return None
        finally:
            self._close()

    def _close(self) -> None:
        sb, self.sandbox = self.sandbox, None
        if sb is not None:
            sb.close()


_JSON_TYPES: dict[str, type] = {"string": str, "number": float, "integer": int, "boolean": bool, "object": dict}


def _py_type(prop: Mapping[str, Any]) -> Any:
    """The Python type a JSON-schema property is annotated with (transformers' get_json_schema maps it back)."""
    t = prop.get("type")
    if t == "array":
        items = prop.get("items") or {}
        # a generic alias built at run time (mypy sees no type expression in it)
        return list[_py_type(items)] if items.get("type") else list  # type: ignore[misc]
    if t not in _JSON_TYPES:
        raise ValueError(f"tool schema: no Python type for JSON type {t!r}")
    return _JSON_TYPES[t]


def tool_method(schema: Mapping[str, Any]) -> Callable[..., str]:
    """An environment method for one agent tool schema ({"type": "function", "function": {name, description,
    parameters}}): its signature (required parameters first, the others default None) and Google-style
    docstring say what the schema says, `tool_schema` holds the schema itself, and a call runs the tool
    (`SandboxEnv._run`) with the arguments given (positional ones named in signature order)."""
    spec = schema["function"]
    name = spec["name"]
    props = spec.get("parameters", {}).get("properties") or {}
    required = set(spec.get("parameters", {}).get("required") or [])
    order = [p for p in props if p in required] + [p for p in props if p not in required]
    hints = {p: _py_type(props[p]) for p in props}
    par = inspect.Parameter
    sig = inspect.Signature(
        [par("self", par.POSITIONAL_OR_KEYWORD)]
        + [par(p, par.POSITIONAL_OR_KEYWORD, annotation=hints[p], default=par.empty if p in required else None)
           for p in order], return_annotation=str)
    args_doc = "".join(f"\n    {p}: {props[p].get('description') or p}" for p in props)
    doc = (spec.get("description") or name) + (f"\n\nArgs:{args_doc}" if props else "") + (
        "\n\nReturns:\n    The tool's output, or what went wrong.")

    def tool(self: SandboxEnv, *args: Any, **arguments: Any) -> str:
        if len(args) > len(order):
            raise TypeError(f"{name}() takes at most {len(order)} positional arguments")
        return self._run(name, {**dict(zip(order, args)), **arguments})

    tool.__name__ = name
    tool.__qualname__ = f"SandboxEnv.{name}"
    tool.__doc__ = doc
    tool.__signature__ = sig  # type: ignore[attr-defined]
    tool.__annotations__ = {**hints, "return": str}
    tool.tool_schema = dict(schema)  # type: ignore[attr-defined]
    return tool


for _schema in TOOL_SCHEMAS:  # the agent's one tool surface, as methods (TRL lists a class's public functions)
    _name = _schema["function"]["name"]
    assert _name not in vars(SandboxEnv) and not _name.startswith("_") and _name not in ("reset", "get_reward")
    setattr(SandboxEnv, _name, tool_method(_schema))
del _schema, _name


@dataclass
class SandboxEnvFactory:
    """TRL's `environment_factory` for one run: each call makes a :class:`SandboxEnv` over `tasks` (task_id ->
    Task) with sandboxes of `factory`; `opened` lists the sandboxes its environments opened ("task_id:id")."""

    tasks: Mapping[str, Task]
    factory: Any
    opened: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __call__(self) -> SandboxEnv:
        return SandboxEnv(self.tasks, self.factory, on_open=self._opened)

    def _opened(self, what: str) -> None:
        with self._lock:
            self.opened.append(what)


def _transcript(completion: Any) -> list:
    if isinstance(completion, list):
        return completion
    return [{"role": "assistant", "content": str(completion)}]


def neutral_rewards(scores: list[float | None], groups: list[Any]) -> list[float]:
    """`scores` with each None (a sample whose verification failed for infra reasons) replaced by the mean of the
    scored samples of its group (GRPO's group: the same prompt, here the same task_id), else 0.0 where the whole
    group failed. Its advantage is then about 0: the sample teaches nothing, where 0.0 would punish it."""
    by: dict[Any, list[float]] = {}
    for s, g in zip(scores, groups):
        if s is not None:
            by.setdefault(g, []).append(s)
    return [s if s is not None else (sum(by[g]) / len(by[g]) if by.get(g) else 0.0) for s, g in zip(scores, groups)]


def make_reward_func(workers: int = 8, log: list | None = None):
    """A TRL reward function: verify_task in each sample's own sandbox (in parallel). A sample whose sandbox
    failed gets a neutral reward (`neutral_rewards`) and is logged with `infra` set to what went wrong."""

    def verifier_reward(prompts, completions, environments=None, task_id=None, **kwargs) -> list[float]:
        envs = environments or []
        with ThreadPoolExecutor(max_workers=max(1, min(workers, len(envs)))) as ex:
            raw = list(ex.map(lambda ec: ec[0]._score(_transcript(ec[1])), zip(envs, completions)))
        ids = list(task_id or [None] * len(raw))
        scores = neutral_rewards(raw, ids)
        if log is not None:
            log.extend({"task_id": t, "reward": s, **({"infra": env.infra_error} if r is None else {})}
                       for t, s, r, env in zip(ids, scores, raw, envs))
        return scores

    return verifier_reward


def task_prompts(tasks: list[Task], system_prompt: str | None = None):
    """The GRPO dataset: one conversational prompt per task, with its task_id (forwarded to reset/reward)."""
    from datasets import Dataset

    from clawgym import DEFAULT_WORKSPACE

    try:
        from clawgym.agent.loop import SYSTEM_PROMPT
    except Exception:  # pragma: no cover
        SYSTEM_PROMPT = "You are a personal AI assistant working in the user's workspace {workspace}."
    sp = (system_prompt or SYSTEM_PROMPT).replace("{workspace}", DEFAULT_WORKSPACE)
    return Dataset.from_list([{"prompt": [{"role": "system", "content": sp},
                                          {"role": "user", "content": t.instruction}],
                               "task_id": t.task_id} for t in tasks])


_GUARD_KEYS = {"tools", "chat_template", "add_generation_prompt", "tokenize", "return_dict", "padding",
               "return_tensors", "return_assistant_tokens_mask"}
_UNGUARDED = {"documents", "continue_final_message", "truncation", "max_length", "tokenizer_kwargs",
              "sanitize_control_tokens"}  # calls with these go to the tokenizer's own method


def guard_control_text(tok):
    """Make `tok.apply_chat_template` (the call GRPOTrainer tokenizes its prompts and appended tool results with)
    encode control-token text in the content as ordinary pieces (clawgym.trajectories.sft.encode_chat): a task
    instruction or a tool result holding ``<|im_start|>assistant`` becomes plain text tokens, masked out like
    any tool result, never a fake turn. Conversations without control text take the tokenizer's own call
    unchanged. A tool carrying `tool_schema` (a SandboxEnv method) is rendered as that schema: the prompt shows
    the agent's tools exactly as the builtin loop sends them. Returns `tok` (the guard is an instance attribute:
    nothing of it is saved with the tokenizer)."""
    import inspect

    from clawgym.trajectories.sft import control_text_count, encode_chat

    orig = tok.apply_chat_template
    if getattr(orig, "_clawgym_guard", False):
        return tok
    try:
        dict_default = inspect.signature(orig).parameters["return_dict"].default
    except (KeyError, ValueError, TypeError):  # pragma: no cover - every supported transformers has it
        dict_default = True

    def apply_chat_template(conversation, *args, **kw):
        batched = isinstance(conversation, (list, tuple)) and bool(conversation) and isinstance(
            conversation[0], (list, tuple))
        convs = list(conversation) if batched else [conversation]
        tools = kw.get("tools")
        if tools:  # an environment's tool method renders as the agent's own schema (SandboxEnv: tool_schema)
            kw["tools"] = tools = [getattr(t, "tool_schema", None) or t for t in tools]
        if (args or set(kw) & _UNGUARDED or not kw.get("tokenize", True)
                or not any(control_text_count(tok, list(c), tools) for c in convs)):
            return orig(conversation, *args, **kw)
        ids, masks = [], []
        for c in convs:
            enc = encode_chat(tok, list(c), tools, add_generation_prompt=kw.get("add_generation_prompt", False),
                              chat_template=kw.get("chat_template"),
                              assistant_mask=bool(kw.get("return_assistant_tokens_mask")),
                              **{k: v for k, v in kw.items() if k not in _GUARD_KEYS})
            ids.append(enc["input_ids"])
            masks.append(enc.get("assistant_masks"))
        if not kw.get("return_dict", dict_default):
            return ids if batched else ids[0]
        out = tok.pad({"input_ids": ids if batched else ids[0]}, padding=kw.get("padding", False),
                      return_tensors=kw.get("return_tensors"))
        if kw.get("return_assistant_tokens_mask"):
            out["assistant_masks"] = masks if batched else masks[0]
        return out

    apply_chat_template._clawgym_guard = True
    tok.apply_chat_template = apply_chat_template
    return tok


def grpo_tokenizer(base_model: str):
    """The tokenizer GRPO trains with: left padding, the tool-calling chat template, the control-text guard."""
    from transformers import AutoTokenizer
    from trl.chat_template_utils import has_generation_markers

    tok = AutoTokenizer.from_pretrained(base_model, padding_side="left")
    if not (tok.chat_template and has_generation_markers(tok.chat_template)):
        from clawgym.serve.chat_encoding import apply_tool_chat_template

        apply_tool_chat_template(tok)
    return guard_control_text(tok)


def plot_rewards(curve: list[dict], path: Path, title: str = "GRPO reward") -> Path | None:
    """Plot the mean reward per step ([{"step", "reward"}]) as a PNG at `path`; None for an empty curve."""
    from clawgym.train.sft import plot_curve

    return plot_curve(curve, "reward", path, title, "mean verifier reward")


def vllm_server_mode(trl_fields: Mapping[str, Any], cuda: bool | None = None) -> bool:
    """Whether this run samples through the embedded engine in TRL's server mode (``use_vllm`` with ``vllm_mode:
    "server"`` and no ``vllm_server_base_url`` / ``vllm_server_host`` of the user's own): run_grpo then starts the
    engine with vLLM's weight transfer and TRL pushes the weights into it after every step. TRL syncs them over NCCL
    only (its VLLMClient refuses any other device), so on a machine without CUDA this is a TrainConfigError naming
    the field; there TRL samples in-process, as with use_vllm off. The trainer's own Python needs vLLM importable
    too (TRL's client imports vLLM's transfer code): ``pip install "trl[vllm]"`` beside the engine's venv."""
    from clawgym.train.config import TrainConfigError

    if not trl_fields.get("use_vllm") or trl_fields.get("vllm_mode", "colocate") != "server":
        return False
    if trl_fields.get("vllm_server_base_url") or trl_fields.get("vllm_server_host") not in (None, "0.0.0.0"):
        return False  # the user's own server
    if cuda is None:
        import torch

        cuda = torch.cuda.is_available()
    if not cuda:
        raise TrainConfigError(
            "GRPORunConfig.grpo_config: use_vllm with vllm_mode='server' syncs the trained weights into the engine "
            "over NCCL (TRL's VLLMClient), which needs a CUDA device; on a CPU leave use_vllm off (TRL samples "
            "in-process)")
    return True


def run_grpo(cfg: GRPORunConfig, tasks: list[Task], factory, on_log=None) -> CheckpointRecord:
    """Train with GRPO on `tasks` (sandboxes from `factory`); save the model and its record at cfg.output_dir.

    Resumable like SFT (Trainer checkpoints in ``<output_dir>/_trainer``). `on_log(dict)` receives every Trainer
    log entry. The record carries the reward curve (mean verifier reward per step), every sample's reward and the
    loss curve. Tokens: TRL samples the completions itself and trains on exactly those ids (tool results are
    appended as template tokens and masked out of the loss, control text in them as plain text tokens:
    `guard_control_text`), so nothing is re-tokenized."""
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from clawgym.train.sft import last_trainer_checkpoint

    t0 = time.time()
    trl_fields = cfg.trl_fields()
    server_mode = vllm_server_mode(trl_fields)  # refused here, before anything loads, where it cannot sync weights
    out = Path(cfg.output_dir)
    work = out / "_trainer"
    work.mkdir(parents=True, exist_ok=True)
    tok = grpo_tokenizer(cfg.base_model)  # control text in prompts / tool results: plain text tokens
    # bf16 (on where the hardware has it): bf16 weights for sampling and training, optimi's Kahan-summed AdamW
    dtype = weights_dtype(trl_fields)
    mik = {k: v for k, v in (trl_fields.get("model_init_kwargs") or {}).items() if k not in ("dtype", "torch_dtype")}
    model = AutoModelForCausalLM.from_pretrained(cfg.base_model, **mik, dtype=dtype)
    eos = model.generation_config.eos_token_id

    envs = SandboxEnvFactory({t.task_id: t for t in tasks}, factory)
    reward_log: list[dict] = []

    class _Forward(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kw):
            if on_log and logs:
                on_log({"step": state.global_step, **logs})

    with contextlib.ExitStack() as stack:
        run_fields = dict(trl_fields)
        engine = None
        if server_mode:  # the embedded engine for the run, with vLLM's weight transfer (TRL syncs after each step)
            from clawgym.serve import engines

            engine = stack.enter_context(engines.hold(cfg.base_model, device="cuda", weight_transfer="nccl"))
            run_fields["vllm_server_base_url"] = engine.credentials_url()  # TRL's client sends URL credentials
        args = GRPOConfig(output_dir=str(work), **run_fields)
        trainer = GRPOTrainer(model=model, reward_funcs=make_reward_func(cfg.score_workers, reward_log), args=args,
                              train_dataset=task_prompts(tasks, cfg.system_prompt), processing_class=tok,
                              environment_factory=envs, callbacks=[_Forward()])
        if engine is not None:  # the client holds the URL now; the saved arguments keep it without the token
            cast(GRPOConfig, trainer.args).vllm_server_base_url = engine.root_url  # `args`, a GRPOConfig
        # GRPOTrainer takes no optimizer_cls_and_kwargs argument; the Trainer reads the attribute in create_optimizer
        trainer.optimizer_cls_and_kwargs = bf16_optimizer(trl_fields, dtype)
        resume_from = last_trainer_checkpoint(work) if cfg.resume else None
        result = trainer.train(resume_from_checkpoint=resume_from)
        trainer.save_state()
    final: Any = trainer.model  # the trained transformers model (its attributes are dynamic to mypy)
    final.generation_config.eos_token_id = eos  # serving stops at the end-of-turn token, as the base did
    final.save_pretrained(str(out))
    tok.padding_side = "right"
    tok.save_pretrained(str(out))
    hist = trainer.state.log_history
    curve = [{"step": h["step"], "reward": float(h["reward"]), "reward_std": float(h.get("reward_std", 0.0)),
              "loss": float(h.get("loss", 0.0))} for h in hist if "reward" in h and "step" in h]
    loss_curve = [{"step": c["step"], "loss": c["loss"]} for c in curve]
    png = plot_rewards(curve, out / "reward.png", f"GRPO reward — {cfg.name or out.name}")
    hyper = {"grpo_config": trl_fields, "score_workers": cfg.score_workers, "system_prompt": cfg.system_prompt,
             "resume": cfg.resume, "dataset_version": cfg.dataset_version, "precision": precision(trl_fields),
             "tokens": {"token_exact": len(reward_log), "retokenized": 0, "tokenized_by": "trl_grpo_sampling"},
             "infra_rewards": sum(1 for r in reward_log if "infra" in r)}  # samples a failed sandbox left neutral
    rec = CheckpointRecord(
        checkpoint=cfg.name or out.name, path=str(out), base=cfg.base_model, parent=cfg.base_model,
        algorithm="grpo", data_version=cfg.dataset_version, n_tasks=len(tasks), steps=int(trainer.state.global_step),
        hyperparams=hyper, reward_curve=curve, n_sandboxes=len(envs.opened), rewards=reward_log,
        loss_curve=loss_curve, final_loss=loss_curve[-1]["loss"] if loss_curve else None, resumed_from=resume_from,
        train_runtime_s=float((result.metrics or {}).get("train_runtime") or 0.0), wall_s=time.time() - t0,
        loss_plot=str(png) if png else None,
    )
    rec.save(out)
    return rec


__all__ = ["GRPORunConfig", "SandboxEnv", "SandboxEnvFactory", "tool_method", "make_reward_func", "neutral_rewards",
           "task_prompts",
           "run_grpo", "vllm_server_mode", "plot_rewards", "GPU_RECIPE", "guard_control_text", "grpo_tokenizer"]
