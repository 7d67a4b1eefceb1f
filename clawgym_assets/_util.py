"""Small helpers shared by the asset modules (metadata formatting, config errors, data-quality check results)."""

import contextlib
from collections.abc import Iterator, Mapping, Sequence

import dagster as dg

from clawgym import quality


@contextlib.contextmanager
def failure_on_value_error() -> Iterator[None]:
    """A ValueError in the block (a bad partition key or config value: its message names it) becomes dg.Failure."""
    try:
        yield
    except ValueError as e:
        raise dg.Failure(str(e)) from None


def md_counts(title: str, counts: Mapping[str, int]) -> dg.MetadataValue:
    rows = "\n".join(f"| {k or '—'} | {v} |" for k, v in counts.items())
    return dg.MetadataValue.md(f"| {title} | n |\n|---|---|\n{rows}")


def md_table(header: Sequence[str], rows: Sequence[Sequence]) -> dg.MetadataValue:
    def fmt(v):
        return f"{v:.3f}" if isinstance(v, float) else ("—" if v is None else str(v))

    body = "\n".join("| " + " | ".join(fmt(v) for v in r) + " |" for r in rows)
    return dg.MetadataValue.md("| " + " | ".join(header) + " |\n|" + "---|" * len(header) + "\n" + body)


def md_histogram(values: Sequence[float], bins: int = 10, lo: float = 0.0, hi: float = 1.0,
                 title: str = "value") -> dg.MetadataValue:
    """A text histogram (markdown table with bars)."""
    counts = [0] * bins
    for v in values:
        if v is None:
            continue
        i = int((float(v) - lo) / (hi - lo) * bins) if hi > lo else 0
        counts[min(max(i, 0), bins - 1)] += 1
    top = max(counts) if counts and max(counts) else 1
    rows = []
    for i, c in enumerate(counts):
        a, b = lo + (hi - lo) * i / bins, lo + (hi - lo) * (i + 1) / bins
        rows.append(f"| [{a:.2g}, {b:.2g}{']' if i == bins - 1 else ')'} | {c} | {'█' * round(20 * c / top)} |")
    return dg.MetadataValue.md(f"| {title} | n | |\n|---|---|---|\n" + "\n".join(rows))


def gx_result(table: str, frame, **extra) -> dg.AssetCheckResult:
    """A Great Expectations gate on one table (clawgym.quality) as an asset check result."""
    ok, details = quality.check_table(table, frame, **extra)
    return dg.AssetCheckResult(passed=ok, description=quality.summary(details),
                               metadata={"n_rows": details["n_rows"], "details": dg.MetadataValue.json(details)})
