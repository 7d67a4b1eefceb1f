"""Leaderboard: all scored models side by side per category, a bar plot, deltas vs parent."""

from __future__ import annotations

import base64
import io
from typing import Mapping, Sequence

from clawgym.bench.stats import OVERALL


def pivot(score_rows: Sequence[Mapping], suite: str | None = None) -> tuple[list[str], list[str], dict]:
    """bench_scores rows -> (models, categories, {(model, category): row}). Overall comes last."""
    rows = [r for r in score_rows if suite is None or r.get("suite") == suite]
    models = sorted({r["model"] for r in rows})
    cats = sorted({r["category"] for r in rows if r["category"] != OVERALL})
    if any(r["category"] == OVERALL for r in rows):
        cats.append(OVERALL)
    return models, cats, {(r["model"], r["category"]): r for r in rows}


def markdown_table(score_rows: Sequence[Mapping], suite: str | None = None) -> str:
    models, cats, cell = pivot(score_rows, suite)
    if not models:
        return "_no scores yet_"
    head = "| model | " + " | ".join(cats) + " |\n|---|" + "---|" * len(cats) + "\n"
    lines = []
    for m in sorted(models, key=lambda m: -(cell.get((m, OVERALL)) or {}).get("mean", -1)):
        vals = []
        for c in cats:
            r = cell.get((m, c))
            vals.append("" if r is None else f"{r['mean']:.1f} [{r['ci_low']:.1f}, {r['ci_high']:.1f}]")
        lines.append(f"| {m} | " + " | ".join(vals) + " |")
    return head + "\n".join(lines)


def plot_png(score_rows: Sequence[Mapping], suite: str | None = None, title: str = "bench scores") -> bytes:
    """Grouped bar chart (one group per category, one bar per model) with CI error bars, as PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    models, cats, cell = pivot(score_rows, suite)
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(cats) * max(1, len(models)) / 2 + 3), 4), dpi=80)
    width = 0.8 / max(1, len(models))
    x = np.arange(len(cats))
    for i, m in enumerate(models):
        means = [cell[(m, c)]["mean"] if (m, c) in cell else 0.0 for c in cats]
        lo = [max(0.0, means[j] - cell[(m, c)]["ci_low"]) if (m, c) in cell else 0 for j, c in enumerate(cats)]
        hi = [max(0.0, cell[(m, c)]["ci_high"] - means[j]) if (m, c) in cell else 0 for j, c in enumerate(cats)]
        ax.bar(x + i * width, means, width, yerr=[lo, hi], label=m, capsize=2)
    ax.set_xticks(x + width * (len(models) - 1) / 2, [c.replace("_", "\n") for c in cats], fontsize=7)
    ax.set_ylim(0, 105)
    ax.set_ylabel("score (0–100)")
    ax.set_title(title)
    if models:
        ax.legend(fontsize=7)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def png_markdown(png: bytes, alt: str = "plot") -> str:
    return f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode()})"


def leaderboard_rows(score_rows: Sequence[Mapping], result_rows: Sequence[Mapping],
                     registry: Mapping[str, Mapping] | None = None, *, n_boot: int = 2000, seed: int = 0) -> list[dict]:
    """One row per model: overall score, parent (from the score rows or the checkpoints registry), and the
    paired-bootstrap delta vs parent over common tasks (regression = CI entirely below 0)."""
    from clawgym.bench.stats import compare, task_means

    registry = registry or {}
    overall = {r["model"]: r for r in score_rows if r["category"] == OVERALL}
    per_model: dict[str, list] = {}
    for r in result_rows:
        per_model.setdefault(r["model"], []).append(r)
    out = []
    for m in sorted(overall, key=lambda m: -overall[m]["mean"]):
        parent = overall[m].get("parent") or (registry.get(m) or {}).get("parent")
        row = {"model": m, "overall": overall[m]["mean"], "ci_low": overall[m]["ci_low"],
               "ci_high": overall[m]["ci_high"], "parent": parent, "delta": None, "delta_ci_low": None,
               "delta_ci_high": None, "regression": False}
        if parent and parent in per_model and m in per_model:
            c = compare(task_means(per_model[m]), task_means(per_model[parent]), n_boot=n_boot, seed=seed)
            if c.n_common:
                row.update(delta=c.delta, delta_ci_low=c.ci_low, delta_ci_high=c.ci_high,
                           regression=c.significant_regression)
        out.append(row)
    return out
