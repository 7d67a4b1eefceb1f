"""Data-quality gates with Great Expectations 1.x called directly (ephemeral context, dataframe batch).

`validate_frame(df, ...)` -> (passed, details). Used by the blocking Dagster asset checks; no Dagster here.
`check_table(name, df)` applies the expectations declared for a lake table in TABLE_EXPECTATIONS.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Mapping, Sequence
from typing import Any

_LOCK = threading.Lock()
_CTX = None
_COUNTER = itertools.count()

# per lake table: what must hold. between values are inclusive; `nullable_between` allows nulls.
TABLE_EXPECTATIONS: dict[str, dict[str, Any]] = {
    "tasks": {"unique": ["task_id"], "not_null": ["task_id", "instruction", "category", "suite", "route"]},
    "verifications": {"not_null": ["task_id", "kind", "score"], "between": {"score": (0.0, 1.0)},
                      "unique_combo": ["task_id", "kind"]},
    "task_validations": {"unique": ["task_id"], "not_null": ["task_id", "passed"]},
    "trajectories": {"unique": ["rollout_id"], "not_null": ["rollout_id", "task_id", "policy", "failure_class"],
                     "between": {"score": (0.0, 1.0)},
                     "in_set": {"failure_class": ["ok", "agent_error", "limit", "infra", "unjudged"]}},
    "sft": {"unique": ["sample_id"], "not_null": ["sample_id", "messages_json"]},
    "bench_results": {"not_null": ["task_id", "failure_class"], "between": {"score": (0.0, 1.0)},
                      "unique_combo": ["model", "suite", "task_id", "repeat"]},
    "bench_scores": {"not_null": ["category", "mean"], "between": {"mean": (0.0, 100.0)}},
}


def _context():
    global _CTX
    if _CTX is None:
        import great_expectations as gx
        from great_expectations.data_context.types.base import DataContextConfig, InMemoryStoreBackendDefaults

        # analytics off through the context's own config (no environment variable set or read)
        ctx = gx.get_context(mode="ephemeral", project_config=DataContextConfig(
            analytics_enabled=False, store_backend_defaults=InMemoryStoreBackendDefaults()))
        try:  # no tqdm bars in run logs
            from great_expectations.data_context.types.base import ProgressBarsConfig

            ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
        except Exception:  # pragma: no cover - older/newer GX layouts
            pass
        _CTX = ctx
    return _CTX


def _to_pandas(df):
    if hasattr(df, "to_pandas"):  # polars / pyarrow
        return df.to_pandas()
    return df


def validate_frame(df, *, unique: Sequence[str] = (), not_null: Sequence[str] = (),
                   between: Mapping[str, tuple[float, float]] | None = None,
                   in_set: Mapping[str, Sequence[Any]] | None = None, unique_combo: Sequence[str] = (),
                   min_rows: int | None = None, name: str = "table") -> tuple[bool, dict]:
    """Validate a pandas/polars/pyarrow frame. Returns (passed, details) where details has n_rows and one
    entry per expectation: type, column(s), success, unexpected_count, a few unexpected examples."""
    import great_expectations as gx

    pdf = _to_pandas(df)
    exps: list[gx.expectations.Expectation] = []
    for c in unique:
        exps.append(gx.expectations.ExpectColumnValuesToBeUnique(column=c))
    for c in not_null:
        exps.append(gx.expectations.ExpectColumnValuesToNotBeNull(column=c))
    for c, (lo, hi) in (between or {}).items():
        exps.append(gx.expectations.ExpectColumnValuesToBeBetween(column=c, min_value=lo, max_value=hi))
    for c, vals in (in_set or {}).items():
        exps.append(gx.expectations.ExpectColumnValuesToBeInSet(column=c, value_set=list(vals)))
    if unique_combo:
        exps.append(gx.expectations.ExpectCompoundColumnsToBeUnique(column_list=list(unique_combo)))
    if min_rows is not None:
        exps.append(gx.expectations.ExpectTableRowCountToBeBetween(min_value=min_rows))
    details: dict[str, Any] = {"table": name, "n_rows": int(len(pdf)), "expectations": []}
    missing = sorted({c for c in [*unique, *not_null, *(between or {}), *(in_set or {}), *unique_combo]
                      if c not in pdf.columns})
    if missing:
        details["missing_columns"] = missing
        return False, details
    with _LOCK:
        ctx = _context()
        i = next(_COUNTER)
        ds = ctx.data_sources.add_pandas(f"clawgym_{name}_{i}")
        bd = ds.add_dataframe_asset(f"{name}_{i}").add_batch_definition_whole_dataframe("all")
        batch = bd.get_batch(batch_parameters={"dataframe": pdf})
        suite = gx.ExpectationSuite(name=f"{name}_{i}")
        for e in exps:
            suite.add_expectation(e)
        res = batch.validate(suite)
        try:
            ctx.data_sources.delete(ds.name)
        except Exception:  # pragma: no cover
            pass
    for r in res.results:
        cfg = r.expectation_config
        kw = dict(cfg.kwargs)
        details["expectations"].append({
            "type": cfg.type,
            "column": kw.get("column") or kw.get("column_list"),
            "success": bool(r.success),
            "unexpected_count": (r.result or {}).get("unexpected_count"),
            "examples": [str(v) for v in ((r.result or {}).get("partial_unexpected_list") or [])[:5]],
        })
    return bool(res.success), details


def check_table(name: str, df, **extra) -> tuple[bool, dict]:
    """Apply TABLE_EXPECTATIONS[name] (plus any extra keyword expectations) to a frame of that table
    (`name`: a clawgym.lake.Table or its name)."""
    name = str(name)
    spec = {**TABLE_EXPECTATIONS.get(name, {}), **extra}
    return validate_frame(df, name=name, **spec)


def summary(details: Mapping) -> str:
    """One line per failed expectation, for check descriptions and logs."""
    if details.get("missing_columns"):
        return f"missing columns: {', '.join(details['missing_columns'])}"
    bad = [e for e in details.get("expectations", []) if not e["success"]]
    if not bad:
        return f"all {len(details.get('expectations', []))} expectations passed on {details.get('n_rows')} rows"
    return "; ".join(f"{e['type']}({e['column']}): {e['unexpected_count']} unexpected e.g. {e['examples'][:3]}"
                     for e in bad)
