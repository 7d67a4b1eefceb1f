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
