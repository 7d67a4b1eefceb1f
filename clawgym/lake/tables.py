"""Typed access to the lake's tables: one method per table (and per task source), so no caller reads a table
by a string name. :class:`Lake` binds them to a lake folder; ``clawgym_assets.defs.lake.resources.LakeResource``
mixes in the same :class:`LakeTables` methods over its own ``read``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from clawgym.lake import io
from clawgym.lake.schemas import TRAIN_SOURCES, Table, TaskSource, bench_source


def _parts(**kw: Any) -> dict[str, Any] | None:
    d = {k: v for k, v in kw.items() if v is not None}
    return d or None


class LakeTables:
    """Readers of every table. Subclasses provide ``read(table, partitions=None) -> pa.Table``."""

    def read(self, table: Table | str, partitions: Mapping[str, Any] | None = None) -> pa.Table:  # pragma: no cover
        raise NotImplementedError

    # tasks ------------------------------------------------------------------------------------------------
    def tasks(self, source: str | TaskSource | None = None) -> pa.Table:
        """The `tasks` table, one source partition (synthetic, imported, bench_<suite>) or all."""
        return self.read(Table.TASKS, _parts(source=None if source is None else str(source)))

    def task_objects(self, sources: Iterable[str | TaskSource] = TRAIN_SOURCES) -> list:
        """Task objects of the given sources, in source order."""
        from clawgym.lake.records import tasks_from_table

        out: list = []
        for s in sources:
            out += tasks_from_table(self.tasks(s))
        return out

    def bench_tasks(self, suite: str) -> pa.Table:
        """The tasks of one bench suite (`tasks` partition bench_<suite>)."""
        return self.tasks(bench_source(suite))

    def bench_task_objects(self, suites: Iterable[str]) -> list:
        return self.task_objects(bench_source(s) for s in suites)

    def rejected_tasks(self, writer: str | None = None) -> pa.Table:
        """Every rejection (the union of the writers' partitions), or those of one writer (RejectedBy)."""
        return self.read(Table.REJECTED_TASKS, _parts(writer=None if writer is None else str(writer)))

    def rejected_task_ids(self) -> set:
        return set(self.rejected_tasks().column("task_id").to_pylist())

    def personas(self) -> pa.Table:
        return self.read(Table.PERSONAS)

    def skills(self) -> pa.Table:
        return self.read(Table.SKILLS)

    def verifications(self) -> pa.Table:
        return self.read(Table.VERIFICATIONS)

    def task_validations(self) -> pa.Table:
        return self.read(Table.TASK_VALIDATIONS)

    # rollouts ---------------------------------------------------------------------------------------------
    def trajectories(self, policy: str | None = None, shard: int | None = None) -> pa.Table:
        return self.read(Table.TRAJECTORIES, _parts(policy=policy, shard=shard))

    def steps(self, policy: str | None = None, shard: int | None = None) -> pa.Table:
        return self.read(Table.STEPS, _parts(policy=policy, shard=shard))

    def sft(self) -> pa.Table:
        return self.read(Table.SFT)

    # models and bench -------------------------------------------------------------------------------------
    def checkpoints(self) -> pa.Table:
        return self.read(Table.CHECKPOINTS)

    def checkpoint_registry(self) -> dict[str, dict]:
        """checkpoint name -> its registry row."""
        return {r["checkpoint"]: r for r in self.checkpoints().to_pylist()}

    def bench_results(self, model: str | None = None, suite: str | None = None) -> pa.Table:
        return self.read(Table.BENCH_RESULTS, _parts(model=model, suite=suite))

    def bench_scores(self, model: str | None = None, suite: str | None = None) -> pa.Table:
        return self.read(Table.BENCH_SCORES, _parts(model=model, suite=suite))


class Lake(LakeTables):
    """A lake folder (``<data>/lake``) with typed readers and the writers of :mod:`clawgym.lake.io`; `root` may
    be an object-store lake (``s3://…`` or a :class:`clawgym.lake.store.RemoteLake`)."""

    def __init__(self, root: str | Path | io.RemoteLake | None = None):
        self.root = io.lake_root(root)

    @classmethod
    def at(cls, data_dir: str | Path | None = None) -> Lake:
        """The lake of a data root (``<data_dir>/lake``; default <repo>/data/lake)."""
        return cls(io.data_root(data_dir) / "lake")

    def read(self, table: Table | str, partitions: Mapping[str, Any] | None = None) -> pa.Table:
        return io.read_table(table, partitions, root=self.root)

    def write(self, table: Table | str, rows, partitions: Mapping[str, Any] | None = None,
              mode: str = "overwrite") -> Path | str:
        return io.write_table(table, rows, partitions, mode=mode, root=self.root)

    def append(self, table: Table | str, rows, partitions: Mapping[str, Any] | None = None) -> Path | str:
        return io.append_rows(table, rows, partitions, root=self.root)
