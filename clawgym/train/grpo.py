"""GRPO with the task's code verifier as reward, one fresh sandbox per sample (DESIGN §2, formats.md "RL").

    run_grpo(GRPORunConfig(...), tasks, factory) -> registry row (dict)

TRL's GRPOTrainer samples `num_generations` completions per prompt (a task instruction). Each completion is
an agentic rollout in its own environment (`SandboxEnv`, via TRL's `environment_factory`): `reset` opens a
fresh sandbox holding the task's workspace, the OpenClaw tools (`read`, `write`, `edit`, `exec`, `ls`) run
inside it, and the reward function runs `clawgym.verify.verify_task` on that sandbox with the completion as
transcript, then closes it. Sandboxes of one generation batch are scored in parallel threads.

GPU recipe (documented, not run in CI): see docs in this module's `GPU_RECIPE`.
"""

from __future__ import annotations

import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from clawgym.tasks.model import Task

GPU_RECIPE = """\
GRPO on one GPU (e.g. H100/H200), from an SFT checkpoint:
  GRPORunConfig(base_model="data/checkpoints/<sft>", output_dir="data/checkpoints/<sft>-grpo",
                num_generations=8, batch_size=8, grad_accum=4, max_completion_length=2048,
                max_tool_calling_iterations=16, lr=1e-6, beta=0.0, max_steps=200, bf16=True,
                extra={"use_vllm": True, "vllm_mode": "colocate", "vllm_gpu_memory_utilization": 0.3})
  with a docker sandbox factory (clawgym.sandbox.get_factory("docker")) so 8 samples × batch run isolated;
  score_workers ≥ batch size. ClawGym used 8 samples per prompt with the code verifier as reward.
"""


@dataclass
class GRPORunConfig:
    base_model: str = "data/models/smollm2-135m-instruct"
    output_dir: str = "data/checkpoints/grpo"
    name: str | None = None
    num_generations: int = 8  # N samples per prompt
    batch_size: int = 8  # completions per device step (a multiple of num_generations)
    grad_accum: int = 1
    max_steps: int = 50
    lr: float = 1e-6
    beta: float = 0.0  # KL coefficient (0: no reference model)
    temperature: float = 1.0
    max_completion_length: int = 512
    max_tool_calling_iterations: int = 8
    seed: int = 0
    device: str = "auto"
    bf16: bool | None = None
    logging_steps: int = 1
    save_steps: int = 500
    score_workers: int = 8
    system_prompt: str | None = None  # default: the builtin agent's system prompt
    extra: dict[str, Any] = field(default_factory=dict)  # any other GRPOConfig fields


class SandboxEnv:
    """One rollout's environment: a fresh sandbox per `reset`, OpenClaw tools as methods (TRL reads their
    signatures and docstrings to build the tool schemas)."""

    registry: dict[str, Task] = {}
    factory = None
    opened: list[str] = []  # sandbox ids opened (for tests / accounting)
    _lock = threading.Lock()

    def __init__(self):
        self.sandbox = None
        self.task: Task | None = None
        self.calls: list[dict] = []

    def reset(self, task_id: str | None = None, **kwargs) -> str | None:
        self._close()
        self.calls = []
        if task_id is None:  # TRL probes a fresh instance once at init
            return None
        self.task = self.registry[task_id]
        self.sandbox = self.factory.open(self.task.files)
        with self._lock:
            type(self).opened.append(f"{task_id}:{id(self.sandbox)}")
        return None

    def _run(self, name: str, args: dict) -> str:
        from clawgym.agent.tools import execute_tool

        self.calls.append({"name": name, "arguments": args})
        if self.sandbox is None:
            return "error: no sandbox"
        from clawgym.agent.loop import Limits

        res = execute_tool(self.sandbox, name, args, max_timeout_s=Limits().tool_timeout_s)
        return ("ERROR: " if res.is_error else "") + res.content

    def read(self, path: str) -> str:
        """Read a text file of the workspace.

        Args:
            path: File path, relative to the workspace.

        Returns:
            The file's text.
        """
        return self._run("read", {"path": path})

    def write(self, path: str, content: str) -> str:
        """Create or overwrite a file in the workspace.

        Args:
            path: File path, relative to the workspace.
            content: The full text to write.

        Returns:
            A confirmation.
        """
        return self._run("write", {"path": path, "content": content})

    def edit(self, path: str, oldText: str, newText: str) -> str:  # noqa: N803 - OpenClaw's argument names
        """Replace exact text in a file of the workspace.

        Args:
            path: File path, relative to the workspace.
            oldText: The exact text to find.
            newText: The replacement text.

        Returns:
            A confirmation.
        """
        return self._run("edit", {"path": path, "oldText": oldText, "newText": newText})

    def exec(self, command: str) -> str:
        """Run a shell command in the workspace.

        Args:
            command: The bash command line.

        Returns:
            The exit code and output.
        """
        return self._run("exec", {"command": command})

    def ls(self, path: str) -> str:
        """List the files under a directory of the workspace.

        Args:
            path: Directory path, relative to the workspace ("." for all).

        Returns:
            One path per line.
        """
        return self._run("ls", {"path": path})

    def _score(self, transcript: list | None) -> float:
        """Run the task's verifier on this sandbox (the completion as transcript), then close it."""
        from clawgym.verify.runtime import verify_task

        if self.sandbox is None or self.task is None:
            return 0.0
        try:
            res = verify_task(self.task, self.sandbox, transcript=transcript or [], judge="offline")
            return float(res.score or 0.0)
        finally:
            self._close()

    def _close(self) -> None:
        sb, self.sandbox = self.sandbox, None
        if sb is not None:
            sb.close()


def _transcript(completion: Any) -> list:
    if isinstance(completion, list):
        return completion
    return [{"role": "assistant", "content": str(completion)}]


def make_reward_func(workers: int = 8, log: list | None = None):
    """A TRL reward function: verify_task in each sample's own sandbox (in parallel)."""

    def verifier_reward(prompts, completions, environments=None, task_id=None, **kwargs) -> list[float]:
        envs = environments or []
        with ThreadPoolExecutor(max_workers=max(1, min(workers, len(envs)))) as ex:
            scores = list(ex.map(lambda ec: ec[0]._score(_transcript(ec[1])), zip(envs, completions)))
        if log is not None:
            log.extend({"task_id": t, "reward": s} for t, s in zip(task_id or [None] * len(scores), scores))
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
    return Dataset.from_list([{"prompt": [{"role": "system", "content": sp}, {"role": "user", "content": t.instruction}],
                               "task_id": t.task_id} for t in tasks])


def run_grpo(cfg: GRPORunConfig, tasks: list[Task], factory) -> dict[str, Any]:
    """Train with GRPO on `tasks` (sandboxes from `factory`); save the model at cfg.output_dir; return its row."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import has_generation_markers

    t0 = time.time()
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    device = cfg.device if cfg.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    use_bf16 = cfg.bf16 if cfg.bf16 is not None else (device == "cuda" and torch.cuda.is_bf16_supported())
    tok = AutoTokenizer.from_pretrained(cfg.base_model, padding_side="left")
    if not (tok.chat_template and has_generation_markers(tok.chat_template)):
        from clawgym.train.base_model import apply_tool_chat_template

        apply_tool_chat_template(tok)
    model = AutoModelForCausalLM.from_pretrained(cfg.base_model, dtype=torch.bfloat16 if use_bf16 else torch.float32)

    env_cls = type("SandboxEnv", (SandboxEnv,), {"registry": {t.task_id: t for t in tasks}, "factory": factory,
                                                  "opened": []})
    reward_log: list[dict] = []
    args = GRPOConfig(
        output_dir=str(out / "_trainer"), num_generations=cfg.num_generations,
        per_device_train_batch_size=cfg.batch_size, gradient_accumulation_steps=cfg.grad_accum,
        max_steps=cfg.max_steps, learning_rate=cfg.lr, beta=cfg.beta, temperature=cfg.temperature,
        max_completion_length=cfg.max_completion_length, max_tool_calling_iterations=cfg.max_tool_calling_iterations,
        seed=cfg.seed, use_cpu=(device == "cpu"), bf16=use_bf16, logging_steps=cfg.logging_steps,
        save_steps=cfg.save_steps, report_to=[], disable_tqdm=True, **cfg.extra,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=make_reward_func(cfg.score_workers, reward_log), args=args,
                          train_dataset=task_prompts(tasks, cfg.system_prompt), processing_class=tok,
                          environment_factory=env_cls)
    result = trainer.train()
    trainer.save_model(str(out))
    tok.save_pretrained(str(out))
    hist = trainer.state.log_history
    curve = [{"step": h["step"], "reward": float(h["reward"]), "loss": float(h.get("loss", 0.0))}
             for h in hist if "reward" in h and "step" in h]
    hyper = {k: v for k, v in asdict(cfg).items() if k not in ("output_dir", "base_model", "name")}
    row = {
        "checkpoint": cfg.name or out.name, "path": str(out), "base": cfg.base_model, "parent": cfg.base_model,
        "algorithm": "grpo", "n_tasks": len(tasks), "steps": int(trainer.state.global_step),
        "hyperparams": hyper, "hyperparams_json": json.dumps(hyper, default=str), "reward_curve": curve,
        "n_sandboxes": len(env_cls.opened), "rewards": reward_log,
        "train_runtime_s": float((result.metrics or {}).get("train_runtime") or 0.0), "wall_s": time.time() - t0,
        "created_at": datetime.now(timezone.utc).isoformat(),
    }
    tmp = out / "clawgym_checkpoint.json.tmp"
    tmp.write_text(json.dumps(row, indent=1, default=str))
    os.replace(tmp, out / "clawgym_checkpoint.json")
    return row


__all__ = ["GRPORunConfig", "SandboxEnv", "make_reward_func", "task_prompts", "run_grpo", "GPU_RECIPE"]
