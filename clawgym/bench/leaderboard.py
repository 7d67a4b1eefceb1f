"""Leaderboard: all scored models side by side per category, a bar plot, deltas vs parent.

A model whose bench_scores rows are flagged (infra rate above the bound, no scored rollout, …) is listed with
its reason but not ranked. Means, CIs and deltas are over scored rollouts only; deltas compare two models on
the tasks scored for both (``delta_n_common``)."""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping, Sequence

from clawgym.bench.stats import OVERALL


def pivot(score_rows: Sequence[Mapping], suite: str | None = None) -> tuple[list[str], list[str], dict]:
    """bench_scores rows -> (models, categories, {(model, category): row}). Overall comes last."""
    rows = [r for r in score_rows if suite is None or r.get("suite") == suite]
    models = sorted({r["model"] for r in rows})
    cats = sorted({r["category"] for r in rows if r["category"] != OVERALL})
    if any(r["category"] == OVERALL for r in rows):
        cats.append(OVERALL)
    return models, cats, {(r["model"], r["category"]): r for r in rows}


def is_flagged(row: Mapping | None, max_infra_rate: float | None = None) -> bool:
    """A bench_scores row's model × suite is not ranked: flagged when scored, or its infra rate is above
    `max_infra_rate` (a stricter bound applied at read time), or it has no mean."""
    if not row:
        return False
    if row.get("flagged") or row.get("mean") is None:
        return True
    rate = row.get("infra_rate")
    return max_infra_rate is not None and rate is not None and rate > max_infra_rate + 1e-12


def _reason(row: Mapping, max_infra_rate: float | None = None) -> str:
    if row.get("flag_reason"):
        return str(row["flag_reason"])
    if row.get("mean") is None:
        return "no scored rollouts"
    return f"infra_rate {100 * (row.get('infra_rate') or 0):.1f}% > {100 * (max_infra_rate or 0):.1f}%"


def _order(models: Sequence[str], cell: Mapping, max_infra_rate: float | None = None) -> list[str]:
    """Ranked models by overall mean (best first), then the flagged ones."""
    def key(m):
        r = cell.get((m, OVERALL)) or {}
        return (is_flagged(r, max_infra_rate) if r else True, -(r.get("mean") if r.get("mean") is not None else -1), m)
    return sorted(models, key=key)


def markdown_table(score_rows: Sequence[Mapping], suite: str | None = None,
                   max_infra_rate: float | None = None) -> str:
    """Models × categories (mean [CI]); ranked models first, flagged ones after with ⚑ and their reason. When the
    rows carry trust counts: scored / infra / unjudged rollouts and the infra rate of the suite."""
    models, cats, cell = pivot(score_rows, suite)
    if not models:
        return "_no scores yet_"
    trust = any(r.get("n_rollouts") is not None for r in score_rows)
    extra = ["rank", "n_scored", "n_infra", "n_unjudged", "infra_rate", "flag"] if trust else []
    head = "| model | " + " | ".join([*cats, *extra]) + " |\n|---|" + "---|" * (len(cats) + len(extra)) + "\n"
    lines = []
    rank = 0
    for m in _order(models, cell, max_infra_rate):
        vals = []
        for c in cats:
            r = cell.get((m, c))
            vals.append("" if r is None or r.get("mean") is None
                        else f"{r['mean']:.1f} [{r['ci_low']:.1f}, {r['ci_high']:.1f}]")
        ov = cell.get((m, OVERALL)) or {}
        flagged = is_flagged(ov, max_infra_rate) if ov else True
        if trust:
            rank += 0 if flagged else 1
            rate = ov.get("infra_rate")
            vals += ["—" if flagged else str(rank), str(ov.get("n_scored", "")), str(ov.get("n_infra", "")),
                     str(ov.get("n_unjudged", "")), "" if rate is None else f"{100 * rate:.1f}%",
                     f"⚑ {_reason(ov, max_infra_rate)}" if flagged and ov else ""]
        lines.append(f"| {m}{' ⚑' if flagged and trust else ''} | " + " | ".join(vals) + " |")
    return head + "\n".join(lines)


def plot_png(score_rows: Sequence[Mapping], suite: str | None = None, title: str = "bench scores") -> bytes:
    """Grouped bar chart (one group per category, one bar per model) with CI error bars, as PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    models, cats, cell = pivot([r for r in score_rows if r.get("mean") is not None], suite)
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(cats) * max(1, len(models)) / 2 + 3), 4), dpi=80)
    width = 0.8 / max(1, len(models))
    x = np.arange(len(cats))
    for i, m in enumerate(models):
        means = [cell[(m, c)]["mean"] if (m, c) in cell else 0.0 for c in cats]
        lo = [max(0.0, means[j] - cell[(m, c)]["ci_low"]) if (m, c) in cell else 0 for j, c in enumerate(cats)]
        hi = [max(0.0, cell[(m, c)]["ci_high"] - means[j]) if (m, c) in cell else 0 for j, c in enumerate(cats)]
        flagged = is_flagged(cell.get((m, OVERALL)))
        ax.bar(x + i * width, means, width, yerr=[lo, hi], label=f"{m} (flagged)" if flagged else m, capsize=2,
               hatch="//" if flagged else None, alpha=0.5 if flagged else 1.0)
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
    """A markdown image that embeds `png` inline as a base64 data URI."""
    return f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode()})"


def leaderboard_rows(score_rows: Sequence[Mapping], result_rows: Sequence[Mapping],
                     registry: Mapping[str, Mapping] | None = None, *, n_boot: int = 2000, seed: int = 0,
                     max_infra_rate: float | None = None) -> list[dict]:
    """One row per model: rank (None when flagged), overall score over scored tasks, trust counts (n_tasks, n,
    n_scored, n_infra, n_unjudged, infra_rate, flagged, flag_reason), parent (from the score rows or the
    checkpoints registry), and the paired-bootstrap delta vs parent over the tasks scored for both
    (delta_n_common; regression = CI entirely below 0). Ranked models come first, best first; flagged after."""
    from clawgym.bench.stats import compare, task_means
    from clawgym.lake.records import BENCH_RESULT_KEY, effective_rows

    registry = registry or {}
    overall = {r["model"]: r for r in score_rows if r["category"] == OVERALL}
    per_model: dict[str, list] = {}
    for r in effective_rows(result_rows, BENCH_RESULT_KEY):
        per_model.setdefault(r["model"], []).append(r)
    out = []
    rank = 0
    for m in _order(list(overall), {(k, OVERALL): v for k, v in overall.items()}, max_infra_rate):
        o = overall[m]
        flagged = is_flagged(o, max_infra_rate)
        rank += 0 if flagged else 1
        parent = o.get("parent") or (registry.get(m) or {}).get("parent")
        row = {"model": m, "rank": None if flagged else rank, "overall": o.get("mean"), "ci_low": o.get("ci_low"),
               "ci_high": o.get("ci_high"), "n_tasks": o.get("n_tasks"), "n": o.get("n"),
               "n_scored": o.get("n_scored"), "n_infra": o.get("n_infra"), "n_unjudged": o.get("n_unjudged"),
               "infra_rate": o.get("infra_rate"), "flagged": flagged,
               "flag_reason": _reason(o, max_infra_rate) if flagged else "", "parent": parent, "delta": None,
               "delta_ci_low": None, "delta_ci_high": None, "delta_n_common": 0, "regression": False}
        if parent and parent in per_model and m in per_model:
            c = compare(task_means(per_model[m]), task_means(per_model[parent]), n_boot=n_boot, seed=seed)
            if c.n_common:
                row.update(delta=c.delta, delta_ci_low=c.ci_low, delta_ci_high=c.ci_high, delta_n_common=c.n_common,
                           regression=c.significant_regression)
        out.append(row)
    return out
