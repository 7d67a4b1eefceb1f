"""Diversity of a task set: how spread out the tasks of each (route, category) are in MiniLM embedding space.

Per group: `n` tasks (embedded: at most `max_per_group`, a seeded sample), `spread` = mean pairwise cosine
distance (1 - mean cosine over distinct pairs, from the normalized embeddings' sum: O(n) not O(n^2)),
`centroid_dist` = mean cosine distance to the group's centroid, and `families` (distinct families; procedural
tasks of one family share a template, so their instructions differ only in names and numbers). Texts are the
task instructions (the whole request an agent sees). Library code: the embedder is a parameter
(clawgym.synth.embed.minilm_embedder)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import numpy as np

from clawgym.tasks.model import Task


def spread(emb: np.ndarray) -> tuple[float, float]:
    """(mean pairwise cosine distance, mean cosine distance to the centroid) of row vectors."""
    n = len(emb)
    if n < 2:
        return 0.0, 0.0
    e = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
    s = e.sum(axis=0)
    mean_cos = (float(s @ s) - n) / (n * (n - 1))
    c = s / max(float(np.linalg.norm(s)), 1e-12)
    return 1.0 - mean_cos, float(1.0 - (e @ c).mean())


def diversity(tasks: list[Task], embed: Callable[[list[str]], Any], max_per_group: int = 300,
              seed: int = 0) -> list[dict[str, Any]]:
    """One row per (route, category): route, category, n, embedded, families, spread, centroid_dist; plus an
    `all` row per route. Rows sorted by route then category."""
    groups: dict[tuple[str, str], list[Task]] = {}
    for t in tasks:
        route: str = t.route or "procedural"
        groups.setdefault((route, t.category), []).append(t)
        groups.setdefault((route, "all"), []).append(t)
    rows = []
    for (route, cat), ts in sorted(groups.items()):
        sample = ts if len(ts) <= max_per_group else random.Random(f"{seed}:{route}:{cat}").sample(ts, max_per_group)
        emb = np.asarray(embed([t.instruction for t in sample]), dtype=np.float32) if len(sample) > 1 else None
        sp, cd = spread(emb) if emb is not None else (0.0, 0.0)
        rows.append({"route": route, "category": cat, "n": len(ts), "embedded": len(sample),
                     "families": len({t.family for t in ts}), "spread": round(sp, 4), "centroid_dist": round(cd, 4)})
    return rows


__all__ = ["diversity", "spread"]
