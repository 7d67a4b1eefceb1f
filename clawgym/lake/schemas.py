"""One pyarrow schema per lake table, used by writers, readers, GX checks and DuckDB views.

Nested values (messages, tool calls, diffs, verifier details) are stored as JSON text in columns whose
name ends with ``_json``; DuckDB reads them with ``json_extract``. Columns named in ``PARTITIONS`` live in
hive folders (``policy=…/shard=…``) and are not stored inside the part files.

Every string is stored with the lake string encoding (``clawgym.lake.codec``): lone surrogates (non-UTF-8 file
names) and the escape character are written as ``␛XXXX``; ``codec.decode_text`` / ``codec.loads`` /
``io.read_rows`` give the original strings back.

`trajectories` keeps every attempt: a task whose rollout was infra is run again by the next materialization and
both rows stay; readers use ``records.effective_rows`` (latest non-infra row per policy, task, repeat).
"""

from __future__ import annotations

import enum

import pyarrow as pa

S, I32, I64, F64, B = pa.string(), pa.int32(), pa.int64(), pa.float64(), pa.bool_()
TS = pa.timestamp("us", tz="UTC")


def _schema(*fields: tuple) -> pa.Schema:
    return pa.schema([pa.field(n, t) for n, t in fields])


SCHEMAS: dict[str, pa.Schema] = {
    "personas": _schema(("persona_id", S), ("name", S), ("role", S), ("domain", S), ("seniority", S), ("tone", S),
                        ("persona_json", S)),
    "skills": _schema(("skill_id", S), ("name", S), ("description", S), ("n_operations", I32), ("skill_json", S)),
    "tasks": _schema(
        ("source", S),  # which asset wrote it: imported | synthetic | bench_<suite>
        ("task_id", S), ("suite", S), ("split", S), ("route", S), ("family", S), ("category", S),
        ("subcategory", S), ("persona_id", S), ("skill_ids", pa.list_(S)), ("difficulty", I32), ("seed", I64),
        ("instruction", S), ("n_files", I32), ("workspace_bytes", I64), ("verifier_kind", S),
        ("has_rubric", B), ("has_reference", B), ("task_json", pa.large_string()),
    ),
    "verifications": _schema(
        ("task_id", S), ("suite", S), ("category", S), ("route", S), ("family", S),
        ("kind", S),  # noop | oracle
        ("score", F64), ("code_score", F64), ("rubric_score", F64), ("error", S),
        ("duration_s", F64), ("details_json", S),
    ),
    "rejected_tasks": _schema(
        ("writer", S),  # which asset rejected it (RejectedBy): each writes only its own partition
        ("task_id", S), ("route", S), ("family", S), ("category", S), ("stage", S), ("reason", S),
        ("task_json", pa.large_string()),
    ),
    "task_validations": _schema(
        ("task_id", S), ("route", S), ("family", S), ("category", S), ("passed", B),
        ("oracle_score", F64), ("noop_score", F64), ("deterministic", B), ("issues_json", S),
    ),
    "trajectories": _schema(
        ("rollout_id", S), ("task_id", S), ("suite", S), ("policy", S), ("shard", I32), ("category", S),
        ("family", S), ("route", S), ("score", F64), ("failure_class", S), ("n_turns", I32),
        ("n_tool_calls", I32), ("prompt_tokens", I64), ("completion_tokens", I64), ("duration_s", F64),
        ("error", S), ("messages_json", pa.large_string()), ("tools_json", S), ("diff_json", pa.large_string()),
        ("verification_json", S), ("run_id", S), ("created_at", TS),
        ("meta_json", S),  # runtime facts about the run: OpenClaw proxy divergence/refusals, retries
    ),
    "steps": _schema(
        ("rollout_id", S), ("task_id", S), ("policy", S), ("shard", I32), ("step", I32), ("role", S),
        ("content", pa.large_string()), ("tool_name", S), ("tool_args_json", S), ("tool_result", pa.large_string()),
        ("duration_s", F64),
    ),
    "sft": _schema(
        ("sample_id", S), ("task_id", S), ("rollout_id", S), ("policy", S), ("category", S), ("score", F64),
        ("n_turns", I32), ("n_tokens", I64), ("messages_json", pa.large_string()), ("tools_json", S),
    ),
    "checkpoints": _schema(
        ("checkpoint", S), ("path", S), ("base", S), ("parent", S), ("data_version", S), ("n_samples", I64),
        ("hyperparams_json", S), ("loss_curve_json", S), ("final_loss", F64), ("run_id", S), ("created_at", TS),
        ("algorithm", S), ("reward_curve_json", S), ("final_reward", F64),  # sft | grpo; GRPO's mean reward per step
    ),
    "bench_results": _schema(
        ("model", S), ("suite", S), ("task_id", S), ("category", S), ("repeat", I32), ("score", F64),
        ("passed", B), ("failure_class", S), ("rollout_id", S), ("verification_json", S),
        ("messages_json", pa.large_string()), ("run_id", S),
    ),
    "bench_scores": _schema(
        ("model", S), ("suite", S), ("category", S),  # category "overall" = the whole suite
        ("n", I32), ("mean", F64), ("ci_low", F64), ("ci_high", F64), ("pass_at_1", F64), ("pass_at_k", F64),
        ("k", I32), ("parent", S), ("run_id", S), ("created_at", TS),
        # trust: mean/CI are over scored rollouts (ok, agent_error, limit) only; infra and unjudged are counted.
        # n_tasks = tasks attempted, n = tasks in the mean; n_rollouts/n_scored/n_infra/n_unjudged count rollouts
        ("n_tasks", I32), ("n_rollouts", I32), ("n_scored", I32), ("n_infra", I32), ("n_unjudged", I32),
        ("infra_rate", F64), ("unjudged_rate", F64),
        ("flagged", B), ("flag_reason", S),  # model-level (same on every row of a model × suite): not ranked
    ),
}

# hive partition columns per table (folder order)
PARTITIONS: dict[str, tuple[str, ...]] = {
    "tasks": ("source",),
    "rejected_tasks": ("writer",),
    "trajectories": ("policy", "shard"),
    "steps": ("policy", "shard"),
    "bench_results": ("model", "suite"),
    "bench_scores": ("model", "suite"),
}

TABLES: tuple[str, ...] = tuple(SCHEMAS)


class Table(str, enum.Enum):
    """Every lake table by name: read and write through these (or the typed accessors of
    :class:`clawgym.lake.tables.LakeTables`), never through a string literal."""

    PERSONAS = "personas"
    SKILLS = "skills"
    TASKS = "tasks"
    VERIFICATIONS = "verifications"
    REJECTED_TASKS = "rejected_tasks"
    TASK_VALIDATIONS = "task_validations"
    TRAJECTORIES = "trajectories"
    STEPS = "steps"
    SFT = "sft"
    CHECKPOINTS = "checkpoints"
    BENCH_RESULTS = "bench_results"
    BENCH_SCORES = "bench_scores"

    def __str__(self) -> str:  # f"{Table.TASKS}" == "tasks"
        return self.value

    __hash__ = str.__hash__  # a member finds the same dict entries as its name (SCHEMAS, PARTITIONS)


assert {t.value for t in Table} == set(SCHEMAS), "Table must name every schema"


class RejectedBy(str, enum.Enum):
    """Values of the `rejected_tasks` table's `writer` partition: the asset whose rejections the rows are (each
    replaces only its own partition; readers see the union)."""

    SYNTHESIS = "synthetic_tasks"  # stage = the synthesis gate that rejected the candidate
    VERIFIERS = "verifiers"  # stage = "verifiers"

    def __str__(self) -> str:
        return self.value


class TaskSource(str, enum.Enum):
    """Values of the `tasks` table's `source` partition (which asset wrote the rows)."""

    SYNTHETIC = "synthetic"
    IMPORTED = "imported"

    def __str__(self) -> str:
        return self.value


TRAIN_SOURCES: tuple[str, ...] = (TaskSource.IMPORTED.value, TaskSource.SYNTHETIC.value)


def bench_source(suite: str) -> str:
    """The `tasks.source` partition of a bench suite: bench_<suite>."""
    return f"bench_{suite}"


def schema(name: str) -> pa.Schema:
    """The Arrow schema of lake table `name`; KeyError listing the known tables otherwise."""
    try:
        return SCHEMAS[name]
    except KeyError:
        raise KeyError(f"unknown lake table {name!r}; known: {', '.join(TABLES)}") from None


def file_schema(name: str) -> pa.Schema:
    """The schema of a part file: the table schema without its hive partition columns."""
    s = schema(name)
    for col in PARTITIONS.get(name, ()):
        s = s.remove(s.get_field_index(col))
    return s


_DUCK = {
    pa.string(): "VARCHAR", pa.large_string(): "VARCHAR", I32: "INTEGER", I64: "BIGINT", F64: "DOUBLE",
    B: "BOOLEAN", TS: "TIMESTAMPTZ", pa.list_(S): "VARCHAR[]",
}


def duckdb_type(t: pa.DataType) -> str:
    """The DuckDB column type for an Arrow type (VARCHAR for any type not mapped)."""
    return _DUCK.get(t, "VARCHAR")
