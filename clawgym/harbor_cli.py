"""`clawgym export harbor`: tasks as a Harbor dataset folder (issue 23; the command is mounted by clawgym.cli).

Sources: the accepted synthetic tasks of the lake (`synthetic`: the `tasks` table's synthetic partition less
`rejected_tasks`), a bench suite of the lake (`bench:<suite>`), or any importable path (`--from`: a ClawGym
folder, PinchBench folder, Parquet file, Harbor folder). The folder runs in Harbor unchanged:
`harbor run -p <out> -a oracle` (see docs/HARBOR.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from clawgym.tasks.harbor import DEFAULT_BASE_IMAGE

export_app = typer.Typer(help="Export tasks to other formats.", no_args_is_help=True)


def lake_tasks(lake, source: str, split: str = "") -> list:
    """Tasks of the lake for an export: `synthetic` (accepted: rejected ones left out) or `bench:<suite>`."""
    from clawgym.lake import TaskSource
    from clawgym.lake.records import tasks_from_table

    if source == "synthetic":
        rejected = lake.rejected_task_ids()
        tasks = [t for t in tasks_from_table(lake.tasks(TaskSource.SYNTHETIC)) if t.task_id not in rejected]
    elif source.startswith("bench:"):
        tasks = tasks_from_table(lake.bench_tasks(source.split(":", 1)[1]))
    else:
        raise ValueError(f"unknown source {source!r} (synthetic | bench:<suite>)")
    return [t for t in tasks if not split or t.split == split]


@export_app.command("harbor")
def export_harbor(out: Path = typer.Argument(..., help="the dataset folder to write (one task folder per task)"),
                  source: str = typer.Option("synthetic", help="synthetic | bench:<suite> (from the lake)"),
                  from_path: Optional[Path] = typer.Option(None, "--from", help="import tasks from this path instead"),
                  split: str = typer.Option("", help="only tasks of this split (train | bench)"),
                  base_image: str = typer.Option(DEFAULT_BASE_IMAGE, help="the Dockerfiles' FROM image"),
                  shared_verifier: bool = typer.Option(False, help="verify in the agent's container (Harbor's "
                                                       "shared mode) instead of a separate clean one"),
                  limit: int = typer.Option(0, help="at most this many tasks (0 = all)")):
    """Write tasks as a Harbor dataset folder: `harbor run -p OUT -a oracle` runs them."""
    from rich.console import Console

    from clawgym.tasks import import_any
    from clawgym.tasks.harbor import export_harbor_dataset

    console = Console(width=200)
    if from_path is not None:
        rep = import_any(from_path)
        for e in rep.errors:
            console.print(f"[yellow]import error:[/] {e}")
        tasks = [t for t in rep.tasks if not split or t.split == split]
    else:
        from clawgym.cli import _lake_root
        from clawgym.lake import Lake

        tasks = lake_tasks(Lake(_lake_root()), source, split)
    if limit:
        tasks = tasks[:limit]
    if not tasks:
        console.print("no tasks to export")
        raise typer.Exit(1)
    paths = export_harbor_dataset(tasks, out, base_image=base_image, separate=not shared_verifier)
    console.print(f"{len(paths)} Harbor tasks written to {out} — run them with: harbor run -p {out} -a oracle")
