"""`clawgym …`: query the lake, register bench partitions, print the leaderboard, clean sandboxes, run the demo.

Dagster is imported lazily inside the commands that need an instance (the library itself never imports it).
"""

from __future__ import annotations

import os
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from clawgym.lake import Lake, data_root, modes
from clawgym.lake.catalog import default_db_path
from clawgym.lake.io import REPO_ROOT
from clawgym.tasks.harbor import DEFAULT_BASE_IMAGE

app = typer.Typer(help="clawgym: a Dagster-native factory for personal-agent data, training and evaluation.",
                  no_args_is_help=True, add_completion=False)
bench_app = typer.Typer(help="Bench partitions and the leaderboard.", no_args_is_help=True)
sandbox_app = typer.Typer(help="Sandbox maintenance.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")
app.add_typer(sandbox_app, name="sandbox")
export_app = typer.Typer(help="Export tasks to other formats.", no_args_is_help=True)
app.add_typer(export_app, name="export")
console = Console(width=200)

PARTITION_KINDS = {"model": "model", "policy": "policy", "checkpoint": "checkpoint"}


@app.callback()
def _entry(ctx: typer.Context) -> None:
    # an entry point: the data root and what the command writes in it (lake, catalog, caches, checkpoints, logs)
    # are owner-only, or group-readable with $CLAWGYM_SHARED_GROUP=1 (clawgym.lake.modes)
    shared = modes.shared_from_env(os.environ)
    ctx.with_resource(modes.configured(shared))
    modes.protect(_data_dir(), shared)


def _fmt(v) -> str:
    if v is None:
        return "∅"
    if isinstance(v, float):
        return f"{v:.4g}"
    s = str(v)
    return s if len(s) <= 80 else s[:77] + "…"


def _data_dir() -> Path:
    """The data root: $CLAWGYM_DATA, else <repo>/data (the CLI is an entry point: it reads the environment)."""
    return data_root(os.environ.get("CLAWGYM_DATA") or None)


def _lake_dir() -> Path:
    return _data_dir() / "lake"


def _lake_root():
    """The lake the commands read: <data>/lake, or the object-store lake of $CLAWGYM_LAKE_URI (s3://…), whose
    endpoint and credentials the LakeResource takes from the environment."""
    if os.environ.get("CLAWGYM_LAKE_URI"):
        from clawgym_assets.defs.lake.resources import LakeResource

        return LakeResource.from_env().lake_dir
    return _lake_dir()


def _instance():
    from dagster import DagsterInstance

    os.environ.setdefault("DAGSTER_HOME", str(REPO_ROOT))
    Path(os.environ["DAGSTER_HOME"]).mkdir(parents=True, exist_ok=True)
    return DagsterInstance.get()


@app.command()
def sql(query: str = typer.Argument(..., help="SQL over the lake's views, e.g. SELECT * FROM bench_scores"),
        db: Path | None = typer.Option(None, help="DuckDB catalog file (default <data>/clawgym.duckdb)"),
        limit: int = typer.Option(200, help="print at most this many rows")):
    """Run a read query against the DuckDB catalog (views are refreshed first) and print a table. It sees the
    lake's tables and nothing else: no other file, no COPY / ATTACH / SET (clawgym.lake.catalog.query)."""
    from clawgym.lake.catalog import query as run

    try:
        cols, rows = run(query, db or default_db_path(_data_dir()), root=_lake_root())
    except Exception as e:  # duckdb errors: show the message, not a traceback
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(1) from e
    t = Table(*cols, show_lines=False)
    for r in rows[:limit]:
        t.add_row(*[_fmt(v) for v in r])
    console.print(t)
    console.print(f"{len(rows)} row(s)")


@bench_app.command("add")
def bench_add(name: str = typer.Argument(..., help="model / checkpoint / policy name"),
              kind: str = typer.Option("model", help="which dynamic partitions: model (bench_scores), "
                                                     "policy (trajectories) or checkpoint (checkpoints)")):
    """Register a dynamic partition in the Dagster instance ($DAGSTER_HOME, default the repo root), so
    `dagster asset materialize --select bench_scores --partition NAME -m clawgym_assets.definitions` works."""
    from clawgym.tasks.names import NAME_RULE, is_name

    if kind not in PARTITION_KINDS:
        console.print(f"[red]error:[/red] --kind must be one of {', '.join(PARTITION_KINDS)}")
        raise typer.Exit(2)
    if not is_name(name):  # the one name rule of partition keys (clawgym.tasks.names): no '..', no '/'
        console.print(f"[red]error:[/red] name {name!r}: {NAME_RULE}")
        raise typer.Exit(2)
    inst = _instance()
    pdef = PARTITION_KINDS[kind]
    if inst.has_dynamic_partition(pdef, name):
        console.print(f"{kind} partition {name!r} already registered")
        return
    inst.add_dynamic_partitions(pdef, [name])
    console.print(f"registered {kind} partition {name!r} in {os.environ['DAGSTER_HOME']}")


@bench_app.command("list")
def bench_list(kind: str = typer.Option("model", help="model | policy | checkpoint")):
    """The registered dynamic partitions of one kind."""
    for k in _instance().get_dynamic_partitions(PARTITION_KINDS.get(kind, kind)):
        console.print(k)


@bench_app.command("leaderboard")
def bench_leaderboard(suite: str = typer.Option("procedural", help="bench suite"),
                      categories: bool = typer.Option(True, help="show per-category columns")):
    """All scored models side by side (0–100, 95% CI), with the delta vs parent checkpoint."""
    from clawgym.bench.leaderboard import leaderboard_rows, pivot
    from clawgym.bench.stats import OVERALL
    lake = Lake(_lake_root())
    scores = lake.bench_scores(suite=suite).to_pylist()
    if not scores:
        console.print(f"no bench scores for suite {suite!r} yet")
        raise typer.Exit(1)
    results = lake.bench_results(suite=suite).to_pylist()
    reg = lake.checkpoint_registry()
    board = leaderboard_rows(scores, results, reg)
    _, cats, cell = pivot(scores, suite)
    cats = [c for c in cats if c != OVERALL] if categories else []
    t = Table("rank", "model", "overall", "95% CI", *[c.replace("_", " ") for c in cats], "scored", "infra",
              "unjudged", "parent", "Δ vs parent", title=f"clawgym leaderboard — suite {suite}")

    def num(x, fmt="{:.1f}"):
        return "" if x is None else fmt.format(x)

    for b in board:
        delta = "" if b.get("delta") is None else \
            f"{b['delta']:+.1f} [{b['delta_ci_low']:.1f}, {b['delta_ci_high']:.1f}]" + (" ⚠" if b["regression"] else "")
        rank = "⚑ " + str(b.get("flag_reason") or "flagged") if b.get("flagged") else num(b.get("rank"), "{}")
        rate = b.get("infra_rate")
        t.add_row(rank, b["model"], num(b.get("overall")), f"[{num(b.get('ci_low'))}, {num(b.get('ci_high'))}]",
                  *[("" if (b["model"], c) not in cell else num(cell[(b["model"], c)]["mean"])) for c in cats],
                  num(b.get("n_scored"), "{}"), "" if rate is None else f"{b.get('n_infra') or 0} ({100 * rate:.1f}%)",
                  num(b.get("n_unjudged"), "{}"), b.get("parent") or "", delta)
    console.print(t)
    console.print("Means and CIs are over scored tasks only (ok / agent_error / limit); infra and unjudged tasks are "
                  "counted, never scored. A model whose infra rate exceeds the bound is flagged (⚑) and not ranked.")


@sandbox_app.command("cleanup")
def sandbox_cleanup(all_: bool = typer.Option(False, "--all", help="also things whose maker is still alive"),
                    dry_run: bool = typer.Option(False, help="only list what would be removed"),
                    state_root: str = typer.Option("", envvar="CLAWGYM_SANDBOX_TMP",
                                                   help="the folder sandbox state dirs are made in (default: the "
                                                        "system temp dir)")):
    """Find and remove what crashed sandbox runs left behind (containers, mounts, dirs, processes, cgroups)."""
    from clawgym.sandbox.host.cleanup import remove_leftovers

    lo = remove_leftovers(orphans_only=not all_, dry_run=dry_run, state_root=state_root)
    console.print(("would remove: " if dry_run else "removed: ") + lo.summary() if lo else "nothing to clean up")


@app.command()
def demo(sft_steps: int = typer.Option(0, help="SFT steps for the demo checkpoint (0 = the plan's)"),
         bench_seeds: int = typer.Option(0, help="new seeds per family on the bench (0 = the plan's)"),
         models: bool = typer.Option(True, help="include the embedded SmolLM2 policies (base + SFT)"),
         checkpoint: str = typer.Option("sft-demo", help="name of the demo checkpoint")):
    """Materialize the whole graph at demo scale on embedded defaults (clawgym.train.demo_plan.DemoPlan: the program
    teacher on a few training families, SFT, bench on held-in and held-out families) and print the leaderboard and
    what training changed."""
    import dataclasses

    os.environ.setdefault("DAGSTER_HOME", str(REPO_ROOT))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from clawgym.train.demo_plan import DemoPlan
    from clawgym_assets.demo import learning_report, run_demo
    from clawgym_assets.resources import default_resources
    from clawgym_assets.settings import GraphSettings

    plan = DemoPlan()
    if sft_steps:
        plan = dataclasses.replace(plan, sft={**plan.sft, "max_steps": sft_steps})
    if bench_seeds:
        plan = dataclasses.replace(plan, bench_new_seeds=bench_seeds)
    res = default_resources()
    failed = run_demo(plan, models=models, checkpoint=checkpoint, log=console.print,
                      settings=GraphSettings.from_env(), resources=res)
    bench_leaderboard(suite="procedural", categories=True)
    if models and checkpoint not in failed:
        rows = learning_report(plan, model=checkpoint, resources=res)
        t = Table("bench rows", "n", rows[0]["parent"], checkpoint, "Δ (paired)", "95% CI",
                  title=f"what training changed: {checkpoint} vs its parent, paired per task")
        for r in rows:
            if not r["n"]:
                t.add_row(r["group"], "0", "", "", "", "")
                continue
            t.add_row(r["group"], str(r["n"]), f"{r['parent_mean']:.1f}", f"{r['model_mean']:.1f}",
                      f"{r['delta']:+.1f}", f"[{r['ci_low']:+.1f}, {r['ci_high']:+.1f}]")
        console.print(t)
    if failed:
        console.print(f"[red]demo finished with failed stages: {', '.join(failed)}[/red]")
        raise typer.Exit(1)


@export_app.command("harbor")
def export_harbor(out: Path = typer.Argument(..., help="the dataset folder to write (one task folder per task)"),
                  source: str = typer.Option("synthetic", help="synthetic | bench:<suite> (from the lake)"),
                  from_path: Path | None = typer.Option(None, "--from", help="import tasks from this path instead"),
                  split: str = typer.Option("", help="only tasks of this split (train | bench)"),
                  base_image: str = typer.Option(DEFAULT_BASE_IMAGE, help="the Dockerfiles' FROM image"),
                  shared_verifier: bool = typer.Option(False, help="verify in the agent's container (Harbor's "
                                                       "shared mode) instead of a separate clean one"),
                  limit: int = typer.Option(0, help="at most this many tasks (0 = all)")):
    """Write tasks as a Harbor dataset folder: `harbor run -p OUT -a oracle` runs them (sources: the lake's accepted
    synthetic tasks, a bench suite of the lake, or any importable path; docs/HARBOR.md)."""
    from clawgym.tasks import import_any
    from clawgym.tasks.harbor_export import export_harbor_dataset

    if from_path is not None:
        rep = import_any(from_path)
        for e in rep.errors:
            console.print(f"[yellow]import error:[/] {e}")
        tasks = [t for t in rep.tasks if not split or t.split == split]
    else:
        from clawgym.lake.records import lake_tasks

        tasks = lake_tasks(Lake(_lake_root()), source, split)
    if limit:
        tasks = tasks[:limit]
    if not tasks:
        console.print("no tasks to export")
        raise typer.Exit(1)
    paths = export_harbor_dataset(tasks, out, base_image=base_image, separate=not shared_verifier)
    console.print(f"{len(paths)} Harbor tasks written to {out} — run them with: harbor run -p {out} -a oracle")


if __name__ == "__main__":  # pragma: no cover
    app()
