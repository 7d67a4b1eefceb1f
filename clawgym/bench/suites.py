"""Loading task suites from folders (ClawGym task dirs or PinchBench markdown files)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from clawgym.lake.io import REPO_ROOT

if TYPE_CHECKING:
    from clawgym.tasks.model import Split


def resolve_dir(path: str) -> Path:
    """A folder path; relative paths are taken from the repository root."""
    p = Path(path).expanduser()
    return (p if p.is_absolute() else REPO_ROOT / p).resolve()


def load_suite_folder(path: str, *, suite: str, split: Split = "bench", fmt: str = "auto",
                      base_images: dict[str, str] | None = None):
    """ImportReport of a folder. fmt auto: PinchBench when the folder holds *.md task files, else ClawGym.
    fmt "harbor": Harbor task folders (a task that cannot run offline here is one recorded error naming the task,
    file and line; `base_images` maps a FROM image to a local one)."""
    from clawgym.tasks.clawgym_format import import_clawgym_folder
    from clawgym.tasks.pinchbench import import_pinchbench_folder

    d = resolve_dir(path)
    if fmt == "harbor":
        from clawgym.tasks.harbor import import_harbor_folder

        return import_harbor_folder(d, suite=suite, split=split, base_images=base_images, runnable_only=True)
    if fmt == "auto":
        fmt = "pinchbench" if d.is_dir() and any(p.name.lower() not in ("readme.md", "task_template.md")
                                                  for p in d.glob("*.md")) else "clawgym"
    if fmt == "pinchbench":
        rep = import_pinchbench_folder(d, suite=suite)
        for t in rep.tasks:
            t.split = split
        return rep
    return import_clawgym_folder(d, suite=suite, split=split)



def separation(results: list[dict], strong: str, weak: str) -> dict[str, float]:
    """Per task: mean score of the strong model minus the weak one's, over their scored rows (bench_results-like
    dicts with model, task_id, score; infra rows with score None are ignored). Tasks missing either side are
    left out."""
    from collections import defaultdict

    acc: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in results:
        if r.get("score") is not None and r.get("model") in (strong, weak):
            acc[(r["model"], r["task_id"])].append(float(r["score"]))
    out = {}
    for (model, tid), v in acc.items():
        if model == strong and (weak, tid) in acc:
            w = acc[(weak, tid)]
            out[tid] = sum(v) / len(v) - sum(w) / len(w)
    return out


def select_balanced(tasks: list, n: int, sep: dict[str, float] | None = None, seed: int = 0) -> list:
    """Up to n tasks spread evenly over categories (round-robin), and within a category the tasks that separate
    a strong from a weak policy first (higher separation first; unknown = 0), ties broken by a seeded hash so the
    pick is stable but not alphabetical. Keeps every category represented before any gets a second task."""
    import hashlib
    from collections import defaultdict

    sep = sep or {}
    by_cat: dict[str, list] = defaultdict(list)
    for t in tasks:
        by_cat[t.category].append(t)

    def key(t):
        h = hashlib.sha1(f"{seed}:{t.task_id}".encode()).hexdigest()
        return (-sep.get(t.task_id, 0.0), h)

    queues = {c: sorted(ts, key=key) for c, ts in sorted(by_cat.items())}
    picked: list = []
    while len(picked) < n and any(queues.values()):
        for c in list(queues):
            if queues[c] and len(picked) < n:
                picked.append(queues[c].pop(0))
    return picked
