"""After the gates: `dedupe` (workspace fingerprint for procedural tasks; all-MiniLM-L6-v2 cosine >= 0.90 within
a category over LLM tasks + one representative per procedural family) and `split_by_family` (held-out
families = the bench split)."""

from __future__ import annotations

import functools
import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from clawgym.tasks.model import CATEGORIES, Task


@dataclass
class Rejected:
    """A synthesized task left out of the splits: which stage dropped it (gates | dedupe) and why."""

    task_id: str
    stage: str  # "gates" | "dedupe"
    reason: str
    family: str = ""
    category: str = ""


def workspace_fingerprint(task: Task) -> str:
    """sha256 over the task's workspace files (path and content, sorted by path)."""
    h = hashlib.sha256()
    for f in sorted(task.files, key=lambda f: f.path):
        h.update(f.path.encode() + b"\0" + f.content + b"\0")
    return h.hexdigest()


def _rep_text(t: Task) -> str:
    """Text a task is compared by: its instruction; for a procedural family, the family's persona-free
    seed-0 instruction (stable, so the embedding of a family is the same in every run)."""
    if t.route == "procedural" and t.family:
        try:
            from clawgym.synth.families.base import get_family

            return _family_text(t.family, id(get_family(t.family)))
        except KeyError:
            pass
    return t.instruction


@functools.lru_cache(maxsize=4096)
def _family_text(name: str, _fid: int) -> str:
    from clawgym.synth.families.base import get_family

    return get_family(name).generate(0).instruction


def _text_family(t: Task) -> str:
    """The family whose instructions share one template: composed families (clawgym.synth.compose) all speak in
    the same numbered steps, differing in which operations they compose, so they are one text family here (each
    would otherwise read as a near-duplicate of the first)."""
    from clawgym.synth.compose import PREFIX

    fam = t.family or ""
    return PREFIX if fam.startswith(PREFIX) else fam


def dedupe(tasks: list[Task], threshold: float = 0.90, embed: Callable[[list[str]], Any] | None = None
           ) -> tuple[list[Task], list[Rejected]]:
    """Procedural tasks: exact dedupe on the workspace fingerprint (same-family instructions share a template,
    so text similarity would collapse each family). Then, within each category, a cosine pass (MiniLM,
    >= threshold) over non-procedural tasks plus one representative per procedural family: an LLM/skill task
    too close to an earlier kept text is rejected; a family whose representative is too close to an earlier
    family's is rejected as a whole."""
    import numpy as np

    kept: list[Task] = []
    rejected: list[Rejected] = []
    seen: dict[str, str] = {}
    for t in tasks:
        if t.route == "procedural":
            fp = workspace_fingerprint(t)
            if fp in seen:
                rejected.append(Rejected(t.task_id, "dedupe", f"same workspace as {seen[fp]}", t.family, t.category))
                continue
            seen[fp] = t.task_id
        kept.append(t)
    texts_needed = any(t.route != "procedural" for t in kept) or len({t.family for t in kept}) > 1
    if not texts_needed:
        return kept, rejected
    if embed is None:
        from clawgym.synth.embed import minilm_embedder

        embed = minilm_embedder()
    drop_ids: set[str] = set()
    drop_fams: dict[str, str] = {}
    for cat in sorted({t.category for t in kept}):
        reps: list[Task] = []
        fams: set[str] = set()
        for t in kept:
            if t.category != cat:
                continue
            if t.route == "procedural":
                if _text_family(t) in fams:
                    continue
                fams.add(_text_family(t))
            reps.append(t)
        if len(reps) < 2:
            continue
        emb = np.asarray(embed([_rep_text(t) for t in reps]))
        keep_idx: list[int] = []
        for i, t in enumerate(reps):
            if keep_idx:
                sims = emb[keep_idx] @ emb[i]
                j = int(np.argmax(sims))
                if sims[j] >= threshold:
                    other = reps[keep_idx[j]]
                    why = f"cosine {float(sims[j]):.3f} >= {threshold} with {other.task_id}"
                    if t.route == "procedural":
                        drop_fams[_text_family(t)] = why
                    else:
                        drop_ids.add(t.task_id)
                        rejected.append(Rejected(t.task_id, "dedupe", why, t.family, t.category))
                    continue
            keep_idx.append(i)
    out = []
    for t in kept:
        if t.task_id in drop_ids:
            continue
        if t.route == "procedural" and _text_family(t) in drop_fams:
            rejected.append(Rejected(t.task_id, "dedupe", f"family {t.family}: {drop_fams[_text_family(t)]}",
                                     t.family, t.category))
            continue
        out.append(t)
    return out, rejected


def split_by_family(tasks: list[Task], held_out_per_category: int = 1, seed: int = 0) -> list[Task]:
    """Hold out `held_out_per_category` whole families per category as the bench split (split="bench");
    all other tasks are train. Deterministic in seed. Returns new Task objects."""
    rng = random.Random(seed)
    held: set[str] = set()
    for cat in CATEGORIES:
        fams = sorted({t.family for t in tasks if t.category == cat and t.family})
        if len(fams) > held_out_per_category:  # never hold out a category's only family
            held.update(rng.sample(fams, held_out_per_category))
    return [t.model_copy(update={"split": "bench" if t.family in held else "train"}) for t in tasks]


__all__ = ["Rejected", "workspace_fingerprint", "dedupe", "split_by_family"]
