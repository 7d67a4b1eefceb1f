"""The demo's experiment (Dagster-free): what the main job (`bash scripts/run_demo.sh` ->
clawgym_assets.demo.run_demo) synthesizes, teaches and benches, and its learning report.

`DemoPlan`: a few procedural training families with short program solutions (the program teacher: one exec of the
family's program, recorded with each task as Task.program_reference), training compositions of the shared
operations (clawgym.synth.compose, each task with its composed program), held-out families and held-out
compositions, new seeds of the training families on the bench, and the SFT settings (TRL SFTConfig fields).
`learning_rows`: the paired comparison of a checkpoint with its parent on the three parts of that bench (held-in =
new seeds of the training families, held-out compositions = new compositions of seen operations, held-out families
= families never trained on), with bootstrap 95% CIs (clawgym.bench.stats.compare).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

HELD_IN = "held-in: new seeds of the training families"
HELD_OUT_COMPOSITIONS = "held-out compositions of seen operations"
HELD_OUT = "held-out families"
GROUPS = (HELD_IN, HELD_OUT_COMPOSITIONS, HELD_OUT)


def bench_group(family: str | None, train_families: Iterable[str]) -> str:
    """Which half of a learning comparison a bench task is in: a training family's (new seeds: held-in), a
    composed family that was never trained on (a new composition of the shared operations), or another family."""
    from clawgym.synth.compose import is_composed

    if family in set(train_families):
        return HELD_IN
    return HELD_OUT_COMPOSITIONS if is_composed(family) else HELD_OUT


@dataclass(frozen=True)
class DemoPlan:
    """The demo's experiment. Training families: short program solutions (≤ 700 chars, ≈ 300 tokens as a tool
    call) that benchmarks/lift.py showed a 135M student learns in a few exposures; one training seed each (the
    program does not depend on the seed, and every seed of these families has the same instruction)."""

    train_families: tuple[str, ...] = ("action_item_tracker", "backup_retention", "glossary_rename")
    heldout_families: tuple[str, ...] = ("calendar_conflicts", "disk_usage_report")
    # composed families (clawgym.synth.compose): this many training compositions (one seed each, trained on) and
    # held-out compositions (one seed each, on the bench), drawn from the split the composer fixes. The demo trains
    # on none: its 30 steps teach the three programs above (10 exposures each); 8 compositions beside them left
    # every program unlearned in 45 steps, and 32 compositions in 64 steps gave programs with slips (0 of 8 new
    # seeds). Transfer to held-out compositions takes the lift's 300 compositions (benchmarks/lift.py, ≈ 41 min
    # of SFT), beyond the demo's 20 minutes; the demo's bench still carries the held-out-composition row.
    train_compositions: int = 0
    heldout_compositions: int = 4
    train_seeds: int = 1  # seeds 0.. of every family (the held-out families' go to the bench)
    bench_new_seeds: int = 3  # seeds 1000.. of every family on the bench
    # trl.SFTConfig fields of the demo checkpoint (full fine-tuning of the embedded SmolLM2-135M)
    sft: dict[str, Any] = field(default_factory=lambda: {
        "max_steps": 30, "num_train_epochs": 100.0, "learning_rate": 2e-4, "lr_scheduler_type": "cosine",
        "warmup_steps": 2, "save_steps": 10_000, "logging_steps": 1})
    # bench limits (the same for every model): a program of ≈ 300 tokens fits one completion
    max_turns: int = 3
    max_completion_tokens: int = 512
    workers: int = 6  # bench rollouts in flight per model (the model server batches them)

    def __post_init__(self):
        both = set(self.train_families) & set(self.heldout_families)
        if both:
            raise ValueError(f"DemoPlan: {sorted(both)} are both training and held-out families")
        if not self.train_families or self.train_seeds < 1 or self.bench_new_seeds < 1:
            raise ValueError("DemoPlan: needs training families, train_seeds >= 1 and bench_new_seeds >= 1")
        if self.train_compositions < 0 or self.heldout_compositions < 0:
            raise ValueError("DemoPlan: train_compositions and heldout_compositions must be >= 0")

    def compositions(self) -> tuple[list[str], list[str]]:
        """(training, held-out) composed families of the plan."""
        from clawgym.synth.compose import sample_compositions, split_compositions

        train, held = split_compositions()
        return (sample_compositions(train, self.train_compositions, "demo-train"),
                sample_compositions(held, self.heldout_compositions, "demo-heldout"))

    @property
    def families(self) -> list[str]:
        train_c, held_c = self.compositions()
        return [*self.train_families, *train_c, *self.heldout_families, *held_c]

    @property
    def trained_families(self) -> list[str]:
        """Every family the SFT set draws from: the hand-written training families and the training compositions."""
        return [*self.train_families, *self.compositions()[0]]

    def synth_config(self) -> dict:
        """The synthetic_tasks run config (SyntheticTasksConfig fields). New seeds go to the hand-written
        families only: the composed held-out bench is the held-out compositions' own tasks."""
        _, held_c = self.compositions()
        return {"n": len(self.families) * self.train_seeds, "families": self.families,
                "heldout_families": [*self.heldout_families, *held_c], "bench_new_seeds": self.bench_new_seeds,
                "new_seed_families": [*self.train_families, *self.heldout_families]}

    def n_bench(self) -> tuple[int, int, int]:
        """(held-in, held-out compositions, held-out families) bench tasks."""
        return (len(self.train_families) * self.bench_new_seeds, self.heldout_compositions * self.train_seeds,
                len(self.heldout_families) * (self.train_seeds + self.bench_new_seeds))

    def to_dict(self) -> dict:
        return asdict(self)


def learning_rows(results: Iterable[Mapping], family_of: Mapping[str, str], train_families: Iterable[str],
                  model: str, parent: str, n_boot: int = 2000, seed: int = 0) -> list[dict]:
    """`model` vs `parent` on the bench's held-in rows (tasks whose family, by `family_of` task_id -> family, is a
    training family: new seeds), held-out compositions (composed families never trained on) and held-out families
    (every other task), paired over tasks both scored (infra and unjudged left out): one dict per group (all
    three, n = 0 where the bench has none) with n, the two means (0-100), the delta and its bootstrap 95% CI."""
    from clawgym.stats import compare, task_means

    rows = list(results)
    train = set(train_families)
    out = []
    for group in GROUPS:
        sel = [r for r in rows if bench_group(family_of.get(str(r.get("task_id"))), train) == group]
        cur = task_means(r for r in sel if r.get("model") == model)
        par = task_means(r for r in sel if r.get("model") == parent)
        c = compare(cur, par, n_boot=n_boot, seed=seed)
        common = sorted(set(cur) & set(par))
        out.append({"group": group, "n": c.n_common, "model": model, "parent": parent,
                    "parent_mean": 100 * sum(par[t] for t in common) / len(common) if common else None,
                    "model_mean": 100 * sum(cur[t] for t in common) / len(common) if common else None,
                    "delta": c.delta if common else None, "ci_low": c.ci_low if common else None,
                    "ci_high": c.ci_high if common else None})
    return out


__all__ = ["DemoPlan", "GROUPS", "HELD_IN", "HELD_OUT", "HELD_OUT_COMPOSITIONS", "bench_group", "learning_rows"]
