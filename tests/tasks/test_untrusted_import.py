"""Imported tasks, names and keys are untrusted input. One test per attack found on the old code
(each of them failed there); everything in temp dirs. A "host" file is a file outside the imported folder
standing in for /etc/shadow, ~/.aws/credentials, the project's own files...

New names (clawgym.tasks.names / reader) are imported inside the tests so that the file still runs, and each
attack test fails, against the code before the fix."""

import json
import os
import shutil
from pathlib import Path

import pytest

from clawgym.tasks import TaskError, import_any
from clawgym.tasks.clawgym_format import export_clawgym_folder, import_clawgym_folder, import_clawgym_task
from clawgym.tasks.pinchbench import import_pinchbench_file, import_pinchbench_folder

REPO = Path(__file__).resolve().parents[2]
FIX = Path(os.environ.get("CLAWGYM_FIXTURES") or REPO.parent / "shared" / "fixtures")
SECRET = b"aws_secret_access_key = AKIA-HOST-SECRET\n"


@pytest.fixture
def host(tmp_path) -> Path:
    """A host folder outside every imported folder, with a secret in it."""
    h = tmp_path / "host"
    (h / ".aws").mkdir(parents=True)
    (h / ".aws" / "credentials").write_bytes(SECRET)
    return h


def clawgym_task(d: Path, task_id: str = "task_0001", files: dict | None = None) -> Path:
    d.mkdir(parents=True)
    (d / "data_entry.json").write_text(json.dumps({
        "task_id": task_id, "user_query": "Write done.txt.", "input_mount_dir": "/root/.openclaw/workspace",
        "metadata": {"category": "Systems & Automation", "grading_type": "automated"}}))
    (d / "input_files").mkdir()
    for k, v in (files if files is not None else {"notes.txt": b"hello\n"}).items():
        (d / "input_files" / k).parent.mkdir(parents=True, exist_ok=True)
        (d / "input_files" / k).write_bytes(v)
    (d / "reward").mkdir()
    (d / "reward" / "reward.sh").write_text("#!/usr/bin/env bash\necho 1.0\n")
    os.chmod(d / "reward" / "reward.sh", 0o755)
    (d / "reward" / "check.py").write_text("print('{}')\n")
    return d


def suite_with(tmp_path: Path, make_bad) -> Path:
    """A ClawGym suite folder with one good task (task_good) and one made bad by make_bad(task_dir)."""
    s = tmp_path / "suite"
    clawgym_task(s / "task_good", "task_good")
    make_bad(clawgym_task(s / "task_bad", "task_bad"))
    return s


def no_secret(tasks) -> None:
    for t in tasks:
        for f in list(t.files) + list(t.verifier.reward_files):
            assert SECRET not in f.content, f"{t.task_id}: {f.path} holds the host secret"
        assert "AKIA-HOST-SECRET" not in t.instruction


def rejected(rep, *words) -> str:
    """The one error of a report with one bad task; the good task is still imported."""
    assert [t.task_id for t in rep.tasks] == ["task_good"], rep.summary()
    assert len(rep.errors) == 1, rep.summary()
    msg = str(rep.errors[0])
    for w in words:
        assert w in msg, msg
    no_secret(rep.tasks)
    return msg


# --------------------------------------------------------------------------- ClawGym folders ----
@pytest.mark.rule("import_stays_inside")
def test_clawgym_input_files_symlink_to_host_dir(tmp_path, host):
    def bad(d):
        shutil.rmtree(d / "input_files")
        (d / "input_files").symlink_to(host / ".aws")
    rep = import_clawgym_folder(suite_with(tmp_path, bad))
    rejected(rep, "task_bad/input_files", "symlink")


@pytest.mark.rule("import_stays_inside")
def test_clawgym_reward_symlink_to_host_dir(tmp_path, host):
    def bad(d):
        (host / "reward").mkdir()
        shutil.copy(d / "reward" / "reward.sh", host / "reward" / "reward.sh")
        (host / "reward" / "check.py").write_bytes(SECRET)
        shutil.rmtree(d / "reward")
        (d / "reward").symlink_to(host / "reward")
    rep = import_clawgym_folder(suite_with(tmp_path, bad))
    rejected(rep, "task_bad/reward", "symlink")


@pytest.mark.rule("import_stays_inside")
def test_clawgym_hard_link_in_input_files(tmp_path, host):
    def bad(d):
        os.link(host / ".aws" / "credentials", d / "input_files" / "creds.txt")
    rep = import_clawgym_folder(suite_with(tmp_path, bad))
    rejected(rep, "task_bad/input_files/creds.txt", "hard link")


@pytest.mark.rule("import_stays_inside")
def test_clawgym_symlinked_data_entry(tmp_path, host):
    (host / "entry.json").write_text(json.dumps({"task_id": "task_bad", "user_query": SECRET.decode()}))

    def bad(d):
        (d / "data_entry.json").unlink()
        (d / "data_entry.json").symlink_to(host / "entry.json")
    rep = import_clawgym_folder(suite_with(tmp_path, bad))
    rejected(rep, "task_bad/data_entry.json", "symlink")


@pytest.mark.rule("import_stays_inside")
def test_clawgym_symlinked_task_folder_and_deep_symlinks(tmp_path, host):
    s = tmp_path / "suite"
    clawgym_task(s / "task_good", "task_good")
    outside = clawgym_task(host / "task_bad", "task_bad")
    (s / "task_bad").symlink_to(outside)
    rep = import_clawgym_folder(s)
    rejected(rep, "task_bad", "symlink")

    def bad(d):  # a symlinked folder two levels down
        (d / "input_files" / "sub").mkdir()
        (d / "input_files" / "sub" / "aws").symlink_to(host / ".aws")
    rep = import_clawgym_folder(suite_with(tmp_path / "b", bad))
    rejected(rep, "task_bad/input_files/sub/aws", "symlink")


@pytest.mark.rule("import_bounded")
def test_clawgym_fifo_is_refused_without_blocking(tmp_path):
    def bad(d):
        os.mkfifo(d / "input_files" / "pipe")
    rep = import_clawgym_folder(suite_with(tmp_path, bad))
    rejected(rep, "task_bad/input_files/pipe", "not a regular file")


@pytest.mark.rule("import_bounded")
def test_clawgym_sparse_256mib_file_is_not_read(tmp_path):
    def bad(d):
        with open(d / "input_files" / "huge.bin", "wb") as fh:
            fh.truncate(256 << 20)  # sparse: no disk used, 256 MiB read by the old importer
    rep = import_clawgym_folder(suite_with(tmp_path, bad))
    rejected(rep, "task_bad/input_files/huge.bin", "size cap")


@pytest.mark.rule("import_bounded")
def test_per_task_and_per_suite_caps(tmp_path):
    from clawgym.tasks import Limits

    s = tmp_path / "suite"
    for i in range(4):
        clawgym_task(s / f"task_{i}", f"task_{i}", {"a.bin": b"x" * 3000, "b.bin": b"y" * 3000})
    rep = import_clawgym_folder(s, limits=Limits(file_bytes=4000, task_bytes=5000))
    assert not rep.tasks and len(rep.errors) == 4 and "per-task size cap" in str(rep.errors[0])
    # every task is ~6.3 KB: a 14 KB suite cap takes two, and the suite goes on recording the rest
    rep = import_clawgym_folder(s, limits=Limits(suite_bytes=14000))
    assert [t.task_id for t in rep.tasks] == ["task_0", "task_1"], rep.summary()
    assert len(rep.errors) == 2 and all("per-suite size cap" in str(e) for e in rep.errors)
    assert import_clawgym_folder(s).ok  # the defaults take all of it


@pytest.mark.rule("import_stays_inside")
def test_clawgym_task_id_that_is_a_path(tmp_path):
    for i, bad_id in enumerate(["../../outside/.ssh", "/abs/.ssh", "a/b", "..", ".hidden", "-x", "a..b", ""]):
        d = clawgym_task(tmp_path / f"s{i}" / "task_x", "placeholder")
        e = json.loads((d / "data_entry.json").read_text())
        e["task_id"] = bad_id
        (d / "data_entry.json").write_text(json.dumps(e))
        with pytest.raises(TaskError) as ei:
            import_clawgym_task(d)
        assert "task_id" in str(ei.value) and "data_entry.json" in str(ei.value), (bad_id, str(ei.value))


# --------------------------------------------------------------------------------- PinchBench ----
def pinch(tmp_path: Path, front: str, name: str = "task_bad.md") -> Path:
    d = tmp_path / "pinch" / "tasks"
    d.mkdir(parents=True, exist_ok=True)
    (d / "task_good.md").write_text("---\nid: task_good\ngrading_type: llm_judge\n---\n## Prompt\nhi\n"
                                    "## LLM Judge Rubric\n### ok\n**Score 1**: yes\n**Score 0**: no\n")
    (d / name).write_text(f"---\n{front}grading_type: llm_judge\n---\n## Prompt\nhi\n"
                          "## LLM Judge Rubric\n### ok\n**Score 1**: yes\n**Score 0**: no\n")
    return d


@pytest.mark.parametrize("source", ["/etc/passwd", "/etc/shadow", "HOSTCREDS", "../" * 12 + "etc/passwd",
                                    "../../pyproject.toml", "../../host/.aws/credentials"])
@pytest.mark.rule("import_stays_inside")
def test_pinchbench_source_outside_the_task_folder(tmp_path, host, source):
    if source == "HOSTCREDS":  # an absolute path to a readable host secret
        source = str(host / ".aws" / "credentials")
    d = pinch(tmp_path, f"id: task_bad\nworkspace_files:\n  - source: '{source}'\n    dest: leak.txt\n")
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")  # "the project's own files"
    rep = import_pinchbench_folder(d)
    assert [t.task_id for t in rep.tasks] == ["task_good"], rep.summary()
    assert len(rep.errors) == 1 and "task_bad.md" in str(rep.errors[0])
    assert "workspace_files[0].source" in str(rep.errors[0]), str(rep.errors[0])
    with pytest.raises(TaskError):
        import_pinchbench_file(d / "task_bad.md")


@pytest.mark.rule("import_stays_inside")
def test_pinchbench_tasks_folder_cannot_reach_its_parent(tmp_path, host):
    """A folder named tasks/ (PinchBench's layout) reaches only <repo>/assets/ beside it: imported from
    ~/tasks, a source of .aws/credentials must not read ~/.aws/credentials."""
    d = host / "tasks"
    d.mkdir()
    (d / "task_bad.md").write_text("---\nid: task_bad\nworkspace_files:\n  - source: .aws/credentials\n"
                                   "    dest: leak.txt\ngrading_type: llm_judge\n---\n## Prompt\nhi\n"
                                   "## LLM Judge Rubric\n### ok\n**Score 1**: yes\n**Score 0**: no\n")
    rep = import_pinchbench_folder(d)
    assert not rep.tasks and "not found" in str(rep.errors[0]), rep.summary()
    (host / "assets").mkdir()
    (host / "assets" / "ok.txt").write_text("fine")
    (d / "task_bad.md").write_text((d / "task_bad.md").read_text().replace(".aws/credentials", "ok.txt"))
    assert import_pinchbench_folder(d).tasks[0].file_map() == {"leak.txt": b"fine"}


@pytest.mark.rule("import_stays_inside")
def test_pinchbench_symlink_in_assets(tmp_path, host):
    d = pinch(tmp_path, "id: task_bad\nworkspace_files:\n  - source: creds.txt\n    dest: leak.txt\n")
    (d.parent / "assets").mkdir()
    (d.parent / "assets" / "creds.txt").symlink_to(host / ".aws" / "credentials")
    rep = import_any(d.parent)
    assert [t.task_id for t in rep.tasks] == ["task_good"] and len(rep.errors) == 1, rep.summary()
    assert "symlink" in str(rep.errors[0]) and "workspace_files[0].source" in str(rep.errors[0])
    # assets/ itself a symlink to a host folder
    (d.parent / "assets" / "creds.txt").unlink()
    (d.parent / "assets").rmdir()
    (d.parent / "assets").symlink_to(host / ".aws")
    (d / "task_bad.md").write_text((d / "task_bad.md").read_text().replace("creds.txt", "credentials"))
    rep = import_any(d.parent)
    assert [t.task_id for t in rep.tasks] == ["task_good"] and "symlink" in str(rep.errors[0]), rep.summary()
    # a hard link in assets/
    (d.parent / "assets").unlink()
    (d.parent / "assets").mkdir()
    os.link(host / ".aws" / "credentials", d.parent / "assets" / "credentials")
    rep = import_any(d.parent)
    assert [t.task_id for t in rep.tasks] == ["task_good"] and "hard link" in str(rep.errors[0]), rep.summary()


@pytest.mark.rule("import_stays_inside")
def test_pinchbench_symlinked_task_file(tmp_path, host):
    d = pinch(tmp_path, "id: task_x\n")
    (host / "evil.md").write_text((d / "task_bad.md").read_text().replace("task_x", "task_bad"))
    (d / "task_bad.md").unlink()
    (d / "task_bad.md").symlink_to(host / "evil.md")
    rep = import_pinchbench_folder(d)
    assert [t.task_id for t in rep.tasks] == ["task_good"] and "symlink" in str(rep.errors[0]), rep.summary()


BOMB_LEVELS = ["a: &a [x, x, x, x, x, x, x, x, x]"] + [
    f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]" for p, c in zip("abcdefghi", "bcdefghij")]


@pytest.mark.rule("import_bounded")
def test_pinchbench_yaml_alias_bomb(tmp_path):
    # depth 6 into `name` (kept in Task.source): 6.2 MB of JSON from a few hundred bytes
    front = "id: task_bad\nbomb:\n" + "".join(f"  {ln}\n" for ln in BOMB_LEVELS[:6]) + "name: *f\n"
    d = pinch(tmp_path, front)
    rep = import_pinchbench_folder(d)
    assert [t.task_id for t in rep.tasks] == ["task_good"], rep.summary()
    assert "front matter" in str(rep.errors[0]) and "alias" in str(rep.errors[0])
    # the full bomb (depth 9 aborted the process before) is refused just as fast
    full = "id: task_bad\nbomb:\n" + "".join(f"  {ln}\n" for ln in BOMB_LEVELS) + "name: *j\n"
    assert len(full) < 1000
    (d / "task_bad.md").write_text(f"---\n{full}grading_type: llm_judge\n---\n## Prompt\nhi\n")
    with pytest.raises(TaskError, match="alias"):
        import_pinchbench_file(d / "task_bad.md")


@pytest.mark.rule("import_bounded")
def test_pinchbench_sections_parse_in_linear_time():
    """Long runs of blanks in a rubric line, a weight heading or a checks block: the old regexes backtracked
    quadratically (32k spaces: 88 s; an imported file may hold 16 MiB)."""
    import time

    from clawgym.tasks.pinchbench import extract_python, parse_rubric_section

    n = 20_000
    t0 = time.monotonic()
    rules = parse_rubric_section("### rule (weight" + " " * n + "x\n" + " " * n + "x\n- " + " " * n + "Score 1: ok\n")
    code = extract_python("```python\n" + "\n" * n + "x")
    assert time.monotonic() - t0 < 2.0
    assert len(rules) == 1 and rules[0].scores == {"1": "ok"} and code is None
    block = "```python\ndef grade(t, w):\n    return {}\n\n  ```\n"
    assert extract_python(block) == "def grade(t, w):\n    return {}\n"


@pytest.mark.rule("import_bounded")
def test_yaml_depth_node_and_size_caps(tmp_path):
    from clawgym.tasks.reader import Limits, load_yaml

    with pytest.raises(TaskError, match="nested deeper"):
        load_yaml("a: " + "[" * 200 + "]" * 200, "f.md", "front matter")
    with pytest.raises(TaskError, match="YAML nodes"):
        load_yaml("a: [" + ", ".join("1" for _ in range(200)) + "]", "f.md", "front matter", Limits(yaml_nodes=100))
    with pytest.raises(TaskError, match="YAML size cap"):
        load_yaml("a: " + "x" * 2000, "f.md", "front matter", Limits(yaml_bytes=1000))
    assert load_yaml("a: &x 1\nb: 2\n", "f.md", "front matter") == {"a": 1, "b": 2}  # anchors alone are fine


# ------------------------------------------------------------------------- writes outside data/ ----
def _materialize_import_and_workspaces(tmp_path, folder):
    import dagster as dg

    from clawgym_assets.defs.lake.resources import LakeResource
    from clawgym_assets.defs.synthesis import assets as synthesis

    data = tmp_path / "data"
    res = {"lake": LakeResource(data_dir=str(data))}
    with dg.instance_for_test() as inst:
        return data, dg.materialize(
            [synthesis.imported_tasks, synthesis.mock_workspaces], resources=res, instance=inst,
            run_config={"ops": {"imported_tasks": {"config": {"folder": str(folder), "format": "clawgym",
                                                                "suite": "imported"}}}},
            raise_on_error=False)


@pytest.mark.parametrize("kind", ["relative", "absolute"])
@pytest.mark.rule("import_stays_inside")
def test_task_id_path_through_imported_tasks_to_mock_workspaces(tmp_path, kind):
    victim = tmp_path / "outside" / ".ssh"
    bad_id = "../../outside/.ssh" if kind == "relative" else str(victim)
    s = tmp_path / "suite"
    clawgym_task(s / "task_good", "task_good")
    clawgym_task(s / "task_bad", bad_id, {"authorized_keys": b"ssh-ed25519 AAAA attacker\n"})
    data, r = _materialize_import_and_workspaces(tmp_path, s)
    assert not victim.exists(), "a task id wrote outside data/"
    assert r.success
    assert (data / "workspaces" / "task_good" / "notes.txt").read_bytes() == b"hello\n"
    assert sorted(p.name for p in (data / "workspaces").iterdir()) == ["task_good"]
    imported = [e for e in r.get_asset_materialization_events() if e.asset_key.path == ["imported_tasks"]]
    md = imported[0].materialization.metadata
    assert md["n"].value == 1 and md["errors"].value == 1


@pytest.mark.rule("import_stays_inside")
def test_task_id_path_in_lake_row_never_becomes_a_path(tmp_path):
    """Defence in depth: a tasks row with a path for a task id (written around the importers) makes
    mock_workspaces fail; nothing is written outside data/."""
    import dagster as dg

    from clawgym.lake import Table
    from clawgym.lake.records import task_row
    from clawgym.tasks import File, Task
    from clawgym_assets.defs.lake.resources import LakeResource
    from clawgym_assets.defs.synthesis import assets as synthesis

    victim = tmp_path / "outside" / ".ssh"
    t = Task.model_construct(**{**Task(task_id="x", instruction="i").__dict__, "task_id": "../../outside/.ssh",
                                "files": [File(path="authorized_keys", content=b"ssh-ed25519 AAAA attacker\n")]})
    lake = LakeResource(data_dir=str(tmp_path / "data"))
    lake.write(Table.TASKS, [task_row(t, "imported")], {"source": "imported"})
    with dg.instance_for_test() as inst:
        r = dg.materialize([synthesis.mock_workspaces], resources={"lake": lake}, instance=inst,
                           raise_on_error=False)
    assert not victim.exists(), "a lake row's task id wrote outside data/"
    assert not r.success


@pytest.mark.rule("import_stays_inside")
def test_pinchbench_id_dotdot_export_never_touches_outside(tmp_path):
    out, victim = tmp_path / "export" / "out", tmp_path / "export" / "victim"
    victim.mkdir(parents=True)
    (victim / "precious.txt").write_text("keep me")
    d = pinch(tmp_path, "id: ../victim\n")
    rep = import_pinchbench_folder(d)
    export_clawgym_folder(rep.tasks, out)
    assert (victim / "precious.txt").read_text() == "keep me"
    assert [t.task_id for t in rep.tasks] == ["task_good"] and 'id' in str(rep.errors[0]), rep.summary()
    assert sorted(p.name for p in out.iterdir()) == ["task_good"]


@pytest.mark.rule("import_stays_inside")
def test_export_folder_names_from_source_stay_inside(tmp_path):
    """A task read back from Parquet / the lake may carry any source["dirname"]: export never uses it as a
    path (falls back to the task id); a task id that is a path cannot be exported at all."""
    from clawgym.tasks import Task

    out, victim = tmp_path / "out", tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    t = import_clawgym_task(clawgym_task(tmp_path / "src" / "task_0001", "task_0001"))
    t.source["dirname"] = "../victim"
    export_clawgym_folder([t], out)
    assert (victim / "precious.txt").read_text() == "keep me" and (out / "task_0001" / "data_entry.json").is_file()
    evil = Task.model_construct(**{**t.__dict__, "task_id": "../victim", "source": {}})
    with pytest.raises(ValueError):
        export_clawgym_folder([evil], out)
    assert (victim / "precious.txt").read_text() == "keep me"


@pytest.mark.parametrize("key", ["../../escaped", "ABS"])
@pytest.mark.rule("import_stays_inside")
def test_checkpoint_partition_key_path_grpo(tmp_path, key):
    import dagster as dg

    from clawgym.lake import Table
    from clawgym.lake.records import task_row
    from clawgym_assets.defs.lake.resources import LakeResource
    from clawgym_assets.defs.rollouts.resources import ModelEndpointsResource, SandboxResource
    from clawgym_assets.defs.training import assets as training
    from clawgym_assets.defs.training.resources import TrainerResource

    if key == "ABS":
        key = str(tmp_path / "abs" / "ckpt")
    data = tmp_path / "data"
    lake = LakeResource(data_dir=str(data))
    t = import_clawgym_task(clawgym_task(tmp_path / "clawgym_train" / "task_0001", "task_0001"))
    assert t.split == "train"
    lake.write(Table.TASKS, [task_row(t, "imported")], {"source": "imported"})
    res = {"lake": lake, "endpoints": ModelEndpointsResource(lake=lake), "sandbox": SandboxResource(backend="local"),
           "trainer": TrainerResource(python="/bin/false"), "pipes_subprocess_client": dg.PipesSubprocessClient()}
    with dg.instance_for_test() as inst:
        inst.add_dynamic_partitions("checkpoint", [key])
        r = dg.materialize([training.checkpoints], partition_key=key, resources=res, instance=inst,
                           run_config={"ops": {"checkpoints": {"config": {"method": "grpo"}}}},
                           raise_on_error=False)
    written = [p for p in tmp_path.rglob("tasks.parquet") if "_grpo" in p.parts]
    assert not any(data / "checkpoints" not in p.parents for p in written), written
    assert not r.success
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "abs").exists()


# ------------------------------------------------------------------------------------- Parquet ----
@pytest.mark.rule("import_bounded")
def test_parquet_bad_rows_rejected_rest_imported(tmp_path):
    import pyarrow.parquet as pq

    from clawgym.tasks.parquet_io import tasks_to_table, write_tasks_parquet

    good = import_clawgym_task(clawgym_task(tmp_path / "s" / "task_good", "task_good"))
    p = write_tasks_parquet([good], tmp_path / "pq" / "tasks.parquet")
    table = pq.read_table(p)
    rows = table.to_pylist()
    rows.append({**rows[0], "task_id": "../../outside/.ssh"})
    pq.write_table(table.from_pylist(rows, schema=table.schema), p)
    rep = import_any(tmp_path / "pq")
    assert [t.task_id for t in rep.tasks] == ["task_good"], rep.summary()
    assert len(rep.errors) == 1 and "task_id" in str(rep.errors[0]), rep.summary()
    # a symlinked Parquet file in an imported folder is not read
    (tmp_path / "pq2").mkdir()
    (tmp_path / "pq2" / "x.parquet").symlink_to(p)
    rep = import_any(tmp_path / "pq2")
    assert not rep.tasks and "symlink" in str(rep.errors[0])
    assert tasks_to_table  # imported for its side of the contract


@pytest.mark.rule("import_bounded")
def test_parquet_file_over_caps(tmp_path):
    from clawgym.tasks import Limits
    from clawgym.tasks.parquet_io import read_tasks_parquet_report, write_tasks_parquet

    t = import_clawgym_task(clawgym_task(tmp_path / "s" / "task_good", "task_good", {"big.bin": b"z" * 5000}))
    p = write_tasks_parquet([t], tmp_path / "t.parquet")
    rep = read_tasks_parquet_report(p, limits=Limits(file_bytes=1000))
    assert not rep.tasks and "per-file size cap" in str(rep.errors[0])
    rep = read_tasks_parquet_report(p, limits=Limits(suite_bytes=1000))
    assert not rep.tasks and "per-suite size cap" in str(rep.errors[0])
    assert read_tasks_parquet_report(p).tasks == [t]


# --------------------------------------------------------------------------------------- names ----
@pytest.mark.rule("import_stays_inside")
def test_names_and_safe_join(tmp_path):
    from clawgym.tasks.names import check_name, is_name, safe_join, to_name

    for ok in ["task_0042", "csv_sum-00001", "llm-persona-0-00003-1a2b3c4d", "gpt-4o-mini", "m@v1", "a.b", "A" * 128]:
        assert is_name(ok), ok
    for bad in ["", ".", "..", "../x", "/abs", "a/b", "a\\b", ".hidden", "-rf", "a..b", "x y", "A" * 129, "é", None, 3]:
        assert not is_name(bad), bad
        with pytest.raises(ValueError):
            check_name(bad, "task_id")
    assert to_name("My Suite (v2)", "s") == "My_Suite__v2_" and to_name("..", "dflt") == "dflt"
    assert safe_join(tmp_path, "a", "b/c.txt") == tmp_path / "a" / "b" / "c.txt"
    for parts in [("..",), ("a", "../../x"), ("/etc/passwd",), ("a//b",), ("./a",), ("",)]:
        with pytest.raises(ValueError):
            safe_join(tmp_path, *parts)
    (tmp_path / "link").symlink_to(tmp_path.parent)
    with pytest.raises(ValueError, match="symlink"):
        safe_join(tmp_path, "link", "x")


@pytest.mark.rule("import_stays_inside")
def test_task_model_refuses_path_names():
    from pydantic import ValidationError

    from clawgym.tasks import Task

    for field in ("task_id", "suite", "family"):
        for bad in ("../x", "/abs", "a/b"):
            with pytest.raises(ValidationError):
                Task(**{"task_id": "t", "instruction": "i", field: bad})
    assert Task(task_id="t", instruction="i").family == ""


@pytest.mark.rule("import_stays_inside")
def test_existing_ids_still_pass():
    """Fixture ids, the example suite, every registered family's procedural ids."""
    from clawgym.synth.families import all_families
    from clawgym.tasks.names import is_name

    for f in all_families():
        assert is_name(f.name) and is_name(f"{f.name}-00042"), f.name
    rep = import_any(REPO / "data" / "seeds" / "example_suite")
    assert rep.ok and len(rep.tasks) == 4
    sample = FIX / "clawgym_train_sample"
    if sample.is_dir():
        rep = import_any(sample)
        assert rep.ok and len(rep.tasks) == 37, rep.summary()


# ---- what a hostile review of the importers found (each failed on the code before its fix) ------------------
@pytest.mark.rule("import_stays_inside")
def test_review_bundle_tasks_symlink_is_not_followed(tmp_path):
    from clawgym.tasks import import_any

    outside = tmp_path / "private" / "tasks"
    outside.mkdir(parents=True)
    (outside / "secret.md").write_text("---\nid: secret\ngrading_type: llm_judge\n---\n## Prompt\nSECRET PROMPT\n"
                                       "## LLM Judge Rubric\n- [ ] x\n")
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "tasks").symlink_to(outside)
    rep = import_any(bundle)
    assert not rep.tasks and rep.errors
    assert all("SECRET" not in t.instruction for t in rep.tasks)


@pytest.mark.rule("imported_fields_are_data")
def test_review_file_modes_and_timeouts_and_workspace_are_clean():
    import math

    from clawgym.tasks import File, Task, Verifier

    assert File(path="a", content=b"", mode=0o6777).mode == 0o755
    assert File(path="a", content=b"", mode=-1).mode == 0o644
    assert File(path="a", content=b"", mode=0o666).mode == 0o644
    for bad in (math.inf, math.nan, -5.0, 1e300, 0.0):
        with pytest.raises(ValueError, match="timeout"):
            Verifier(kind="grade", code="x", timeout_s=bad)
        with pytest.raises(ValueError, match="timeout"):
            Task(task_id="t", instruction="i", timeout_s=bad)
    for bad in ("/ws\nRUN curl x", "/app/..", "/a b", "/", "rel/ws", '/a"b'):
        with pytest.raises(ValueError, match="workspace_dir"):
            Task(task_id="t", instruction="i", workspace_dir=bad)
    assert Task(task_id="t", instruction="i", workspace_dir="/app/").workspace_dir == "/app"
    with pytest.raises(ValueError, match="a file and a folder"):
        Task(task_id="t", instruction="i", files=[File(path="a", content=b"1"), File(path="a/b", content=b"2")])
    with pytest.raises(ValueError, match="twice"):
        Task(task_id="t", instruction="i", files=[File(path="a", content=b"1"), File(path="a", content=b"2")])


@pytest.mark.rule("import_bounded")
def test_review_parser_breakers_are_one_error_not_a_crash(tmp_path):
    from clawgym.tasks import import_any

    (tmp_path / "big.md").write_text("---\nid: big\ntimeout_seconds: " + "9" * 5000 + "\n---\n## Prompt\nhi\n")
    rep = import_any(tmp_path / "big.md")
    assert not rep.tasks and len(rep.errors) == 1


@pytest.mark.rule("import_stays_inside")
def test_review_pinchbench_export_never_writes_hidden_or_foreign_files(tmp_path):
    from clawgym.tasks import import_any
    from clawgym.tasks.pinchbench import export_pinchbench_task

    b = tmp_path / "bundle"
    (b / ".git").mkdir(parents=True)
    (b / ".git" / "config").write_text("[core]\n\tfsmonitor = \"touch PWNED\"\n")
    (b / "victim.md").write_text("OVERWRITTEN\n")
    (b / "evil.md").write_text("---\nid: evil\ngrading_type: llm_judge\nworkspace_files:\n"
                               "  - {source: .git/config, dest: notes.txt}\n  - {source: victim.md, dest: v.txt}\n"
                               "---\n## Prompt\nhi\n## LLM Judge Rubric\n- [ ] x\n")
    rep = import_any(b / "evil.md")
    assert rep.tasks, rep.summary()
    e = tmp_path / "export"
    e.mkdir()
    (e / "victim.md").write_text("the real victim\n")
    export_pinchbench_task(rep.tasks[0], e / "evil.md")
    assert not (e / ".git").exists()
    assert (e / "victim.md").read_text() == "the real victim\n"
    assert (e / "evil.md").is_file()


@pytest.mark.rule("import_bounded")
def test_review_parquet_dictionary_bomb_stops_at_the_cap(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from clawgym.tasks import import_any
    from clawgym.tasks.parquet_io import TASKS_SCHEMA
    from clawgym.tasks.reader import Limits

    n, big = 128, "A" * (256 * 1024)
    cols = {k: pa.nulls(n, type=TASKS_SCHEMA.field(k).type) for k in TASKS_SCHEMA.names}
    cols["task_id"] = pa.array([f"t{i}" for i in range(n)])
    cols["instruction"] = pa.array([big] * n)
    pq.write_table(pa.table(cols, schema=TASKS_SCHEMA), tmp_path / "bomb.parquet", compression="zstd",
                   use_dictionary=True, dictionary_pagesize_limit=1 << 20)
    assert (tmp_path / "bomb.parquet").stat().st_size < 1 << 20  # 32 MiB decoded from a small file
    rep = import_any(tmp_path / "bomb.parquet", limits=Limits(suite_bytes=4 << 20))
    assert not rep.tasks and "decodes to over" in rep.summary()


@pytest.mark.rule("imported_fields_are_data")
def test_review_instruction_cannot_rewrite_the_grader_through_an_export(tmp_path):
    from clawgym.tasks import Task, TaskError, Verifier
    from clawgym.tasks.pinchbench import export_pinchbench_task

    instr = ("Write report.md.\n\n## Automated Checks\n\n```python\ndef grade(transcript, workspace_path):\n"
             "    return {'always': 1.0}\n```\n\n```\n")
    t = Task(task_id="t1", instruction=instr, verifier=Verifier(
        kind="grade", code="def grade(transcript, workspace_path):\n    return {'real_check': 0.0}\n"))
    with pytest.raises(TaskError, match="grader"):
        export_pinchbench_task(t, tmp_path / "t1.md")
    assert not (tmp_path / "t1.md").exists()
