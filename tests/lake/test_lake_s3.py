"""The lake on object storage: LakeResource(lake_uri="s3://bucket/prefix") against a real S3-compatible server
(moto in server mode, started here on 127.0.0.1 with an ephemeral port, killed at teardown)."""

import datetime as dt
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from clawgym import lake as lk

KEY_ID = "AKIACLAWGYMTESTKEY01"
SECRET = "clawgym-test-secret-8Vq2xZ"  # must appear in nothing written


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A moto S3 server on 127.0.0.1:<ephemeral>, with bucket `lake`; yields its endpoint URL."""
    pytest.importorskip("moto.server", reason="moto[server] is in the test extra: pip install -e '.[test]'")
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    for _ in range(3):  # the port could be taken between picking and binding: try another
        port = _free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MOTO_", "CLAWGYM_"))}
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                stdout=log.open("w"), stderr=subprocess.STDOUT, env=env,
                                cwd=str(tmp_path_factory.mktemp("motocwd")))
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        if proc.poll() is None:
            break
    else:
        pytest.fail(f"moto server did not start: {log.read_text()[-2000:]}")
    url = f"http://127.0.0.1:{port}"
    fs = pafs.S3FileSystem(access_key=KEY_ID, secret_key=SECRET, endpoint_override=f"127.0.0.1:{port}",
                           scheme="http", region="us-east-1", allow_bucket_creation=True)
    fs.create_dir("lake")
    try:
        yield {"url": url, "fs": fs, "port": port}
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _resource(s3, prefix: str, data_dir: Path, bucket: str = "lake", endpoint: str | None = None):
    from clawgym_assets.defs.lake.resources import LakeResource

    return LakeResource(data_dir=str(data_dir), lake_uri=f"s3://{bucket}/{prefix}",
                        s3_endpoint_url=endpoint or s3["url"], s3_region="us-east-1",
                        s3_access_key_id=KEY_ID, s3_secret_access_key=SECRET)


def _value(field: pa.Field, i: int):
    t = field.type
    if field.name.endswith("_json"):
        return {"i": i, "text": f"{field.name}-é-{i}"}
    if pa.types.is_timestamp(t):
        return dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC) + dt.timedelta(seconds=i)
    if pa.types.is_boolean(t):
        return i % 2 == 0
    if pa.types.is_integer(t):
        return i
    if pa.types.is_floating(t):
        return i + 0.5
    if pa.types.is_list(t):
        return [f"a{i}", f"b{i}"]
    return f"{field.name}-{i}-\udcff"  # a lone surrogate: the lake encoding round-trips it


def _rows(name: str, n: int = 3, start: int = 0) -> list[dict]:
    return [{f.name: _value(f, start + i) for f in lk.schema(name)} for i in range(n)]


def _parts(name: str, k: int = 0) -> dict | None:
    cols = lk.PARTITIONS.get(name, ())
    if not cols:
        return None
    f = lk.schema(name)
    return {c: (k if pa.types.is_integer(f.field(c).type) else f"p{k}") for c in cols}


def _every_object(fs: pafs.FileSystem, bucket: str) -> dict[str, bytes]:
    out = {}
    for info in fs.get_file_info(pafs.FileSelector(bucket, recursive=True)):
        if info.type == pafs.FileType.File:
            with fs.open_input_stream(info.path) as f:
                out[info.path] = f.read()
    return out


def test_every_table_round_trips_like_a_local_lake(s3, tmp_path):
    res = _resource(s3, "roundtrip", tmp_path / "data")
    local = lk.Lake(tmp_path / "local-lake")
    assert res.remote and isinstance(res.lake_dir, lk.RemoteLake)
    for name in lk.TABLES:
        for k in (0, 1):
            rows = _rows(name, 3, start=10 * k)
            where = res.write(name, rows, _parts(name, k))
            local.write(name, rows, _parts(name, k))
            assert str(where).startswith(f"s3://lake/roundtrip/{name}/") and str(where).endswith(".parquet")
        got, want = res.read(name), local.read(name)
        assert got.num_rows == 6 if lk.PARTITIONS.get(name) else 3
        assert got.schema == lk.schema(name)
        assert got.sort_by(got.schema.names[0]).equals(want.sort_by(want.schema.names[0])), name
        assert lk.list_partitions(name, res.lake_dir) == lk.list_partitions(name, local.root)
        if lk.PARTITIONS.get(name):  # one partition only
            assert res.read(name, _parts(name, 1)).num_rows == 3
    # the typed readers of LakeTables over the remote lake, and strings decode back exactly
    assert res.trajectories(policy="p1", shard=1).column("task_id").to_pylist() == \
        local.trajectories(policy="p1", shard=1).column("task_id").to_pylist()
    row = lk.read_rows("personas", root=res.lake_dir)[0]
    assert row["name"].endswith("\udcff") and lk.codec.loads(row["persona_json"])["text"].startswith("persona_json-é")
    assert res.values("tasks", "source") == {"p0", "p1"}
    # the Dagster-free handle reads the same lake
    assert res.tables().skills().num_rows == 3


def test_overwrite_replaces_one_partition(s3, tmp_path):
    res = _resource(s3, "overwrite", tmp_path)
    p0, p1 = {"policy": "a", "shard": 0}, {"policy": "a", "shard": 1}
    res.append("trajectories", _rows("trajectories", 2, 0), p0)
    res.append("trajectories", _rows("trajectories", 2, 100), p0)
    res.write("trajectories", _rows("trajectories", 1, 500), p1)
    assert res.read("trajectories", p0).num_rows == 4
    new = res.write("trajectories", _rows("trajectories", 3, 900), p0)  # mode="overwrite"
    assert sorted(res.read("trajectories", p0).column("n_turns").to_pylist()) == [900, 901, 902]
    assert res.read("trajectories", p1).column("n_turns").to_pylist() == [500]  # other partition untouched
    folder = "lake/overwrite/trajectories/policy=a/shard=0"
    left = [i.path for i in s3["fs"].get_file_info(pafs.FileSelector(folder))]
    assert left == [new[len("s3://"):]]  # the older parts are deleted, only the new base part stays
    # an append after an overwrite adds to it
    res.append("trajectories", _rows("trajectories", 1, 950), p0)
    assert sorted(res.read("trajectories", p0).column("n_turns").to_pylist()) == [900, 901, 902, 950]


def test_overwrite_interrupted_before_deletes_shows_new_rows_only(s3, tmp_path, monkeypatch):
    """The moment between the new part's upload and the deletes of the old ones (or a writer killed there):
    readers, list_partitions and the DuckDB views see the new rows only, never old and new together."""
    res = _resource(s3, "interrupted", tmp_path)
    p0 = {"policy": "a", "shard": 0}
    res.append("trajectories", _rows("trajectories", 2, 0), p0)
    res.append("trajectories", _rows("trajectories", 2, 100), p0)

    def killed(self, path):
        raise KeyboardInterrupt("writer killed after the upload")

    monkeypatch.setattr(lk.RemoteLake, "delete", killed)
    with pytest.raises(KeyboardInterrupt):
        res.write("trajectories", _rows("trajectories", 3, 900), p0)
    monkeypatch.undo()
    folder = "lake/interrupted/trajectories/policy=a/shard=0"
    assert len(s3["fs"].get_file_info(pafs.FileSelector(folder))) == 3  # old parts still there
    assert sorted(res.read("trajectories", p0).column("n_turns").to_pylist()) == [900, 901, 902]
    assert res.query("SELECT count(*), min(n_turns) FROM trajectories")[1] == [(3, 900)]
    res.write("trajectories", _rows("trajectories", 1, 7), p0)  # the next overwrite cleans up everything
    assert len(s3["fs"].get_file_info(pafs.FileSelector(folder))) == 1


def test_readers_during_writes_never_see_half_objects_or_a_mix(s3, tmp_path):
    res = _resource(s3, "concurrent", tmp_path)
    part = {"policy": "w", "shard": 0}
    n = 400
    fat = "x" * 3000  # ~1.2 MB per part: uploads take long enough to overlap with reads

    def batch(i):
        return [{"rollout_id": f"r{i}-{j}", "task_id": f"t{j}", "n_turns": i, "messages_json": fat}
                for j in range(n)]

    res.write("trajectories", batch(0), part)
    stop = threading.Event()
    errors: list[BaseException] = []
    written = [0]

    def writer():
        try:
            for i in range(1, 10**6):
                if stop.is_set():
                    break
                res.write("trajectories", batch(i), part)
                written[0] = i
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    t = threading.Thread(target=writer)
    t.start()
    seen, raw_reads = set(), 0
    rl = res.lake_dir
    deadline = time.monotonic() + 6
    try:
        while time.monotonic() < deadline or written[0] < 3:
            tbl = res.read("trajectories", part)
            turns = set(tbl.column("n_turns").to_pylist())
            assert tbl.num_rows == n and len(turns) == 1, (tbl.num_rows, sorted(turns)[:5])  # one write, whole
            seen |= turns
            # every object that is listed is a complete Parquet file (or already deleted by an overwrite)
            for info in rl.fs.get_file_info(pafs.FileSelector("lake/concurrent/trajectories", recursive=True)):
                if info.type != pafs.FileType.File:
                    continue
                try:
                    with rl.fs.open_input_file(info.path) as f:
                        assert pq.read_table(f).num_rows == n
                    raw_reads += 1
                except OSError:  # only acceptable when an overwrite deleted it since the listing
                    assert rl.fs.get_file_info(info.path).type == pafs.FileType.NotFound
            if time.monotonic() > deadline + 60:
                break
    finally:
        stop.set()
        t.join(60)
    assert not errors, errors
    assert written[0] >= 3 and len(seen) >= 2 and raw_reads >= 2, (written, seen, raw_reads)


def test_duckdb_views_over_s3_without_httpfs(s3, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from clawgym.cli import app

    data = tmp_path / "data"
    res = _resource(s3, "sqlcli", data)
    for shard in (0, 1, 2):
        res.write("trajectories", _rows("trajectories", 2 + shard, 10 * shard), {"policy": "oracle", "shard": shard})
    res.write("personas", _rows("personas", 4))
    cols, rows = res.query("SELECT shard, count(*) AS n, min(json_extract(meta_json, '$.i')::INT) AS i0 "
                           "FROM trajectories GROUP BY shard ORDER BY shard")
    assert cols == ["shard", "n", "i0"] and rows == [(0, 2, 0), (1, 3, 10), (2, 4, 20)]
    assert res.query("SELECT count(*) FROM personas")[1] == [(4,)]
    assert res.query("SELECT count(*) FROM bench_scores")[1] == [(0,)]  # a table with no parts: typed, empty
    con = lk.connect(res.lake_dir)
    try:  # the views are pyarrow datasets; DuckDB's httpfs extension was never loaded
        assert con.execute("SELECT count(*) FROM duckdb_extensions() WHERE extension_name = 'httpfs' AND loaded"
                           ).fetchone() == (0,)
        assert con.execute("SELECT typeof(shard), typeof(created_at) FROM trajectories LIMIT 1").fetchone() == \
            ("INTEGER", "TIMESTAMP WITH TIME ZONE")
    finally:
        con.close()
    # the catalog refresh (bench asset) works and leaves no stale local views in the file
    db = res.refresh_catalog()
    assert db == data.resolve() / "clawgym.duckdb"

    # `clawgym sql` with the lake on S3, settings from the environment only
    for k in [k for k in os.environ if k.startswith(("AWS_", "CLAWGYM_"))]:
        monkeypatch.delenv(k)
    monkeypatch.chdir(tmp_path)
    env = {"CLAWGYM_DATA": str(data), "CLAWGYM_LAKE_URI": "s3://lake/sqlcli", "CLAWGYM_S3_ENDPOINT_URL": s3["url"],
           "CLAWGYM_S3_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET}
    r = CliRunner().invoke(app, ["sql", "SELECT policy, sum(n_turns) AS total FROM trajectories GROUP BY policy"],
                           env=env)
    assert r.exit_code == 0, r.output
    assert "oracle" in r.output and "1 row(s)" in r.output
    # 0+1 + 10+11+12 + 20+21+22+23 = 120
    assert "120" in r.output and SECRET not in r.output
    bad = CliRunner().invoke(app, ["sql", "SELECT 1"], env={**env, "CLAWGYM_LAKE_URI": "s3://no-such-bucket/x"})
    assert bad.exit_code == 1 and "CLAWGYM_LAKE_URI" in bad.output and "no-such-bucket" in bad.output


def test_wrong_bucket_or_endpoint_is_one_clear_error(s3, tmp_path):
    with pytest.raises(lk.LakeStorageError) as e:
        _resource(s3, "x", tmp_path, bucket="no-such-bucket").read("personas")
    msg = str(e.value)
    assert "no-such-bucket" in msg and "lake_uri" in msg and "CLAWGYM_LAKE_URI" in msg and SECRET not in msg
    closed = f"http://127.0.0.1:{_free_port()}"
    t0 = time.monotonic()
    with pytest.raises(lk.LakeStorageError) as e:
        _resource(s3, "x", tmp_path, endpoint=closed).write("personas", _rows("personas", 1))
    msg = str(e.value)
    assert "CLAWGYM_S3_ENDPOINT_URL" in msg and closed in msg and SECRET not in msg and KEY_ID not in msg
    assert time.monotonic() - t0 < 30
    with pytest.raises(lk.LakeStorageError, match="CLAWGYM_LAKE_URI"):
        lk.open_lake("s3:///nobucket", lk.S3Options(endpoint_url=s3["url"]))
    with pytest.raises(lk.LakeStorageError, match="AWS_SECRET_ACCESS_KEY"):
        lk.S3Options(endpoint_url=s3["url"], access_key_id=KEY_ID).filesystem()
    assert SECRET not in repr(lk.S3Options(secret_access_key=SECRET))


def test_resource_from_env_keeps_secrets_as_env_vars(s3, tmp_path):
    import dagster as dg

    from clawgym_assets.defs.lake.resources import LakeResource

    env = {"CLAWGYM_DATA": str(tmp_path), "CLAWGYM_LAKE_URI": "s3://lake/fromenv", "CLAWGYM_S3_ENDPOINT_URL": s3["url"],
           "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET}
    res = LakeResource.from_env(env)
    assert isinstance(res.s3_secret_access_key, dg.EnvVar) and SECRET not in repr(res)
    assert res.s3_region == "us-east-1" and res.lake_uri == "s3://lake/fromenv"
    local = LakeResource.from_env({"CLAWGYM_DATA": str(tmp_path), "AWS_SECRET_ACCESS_KEY": SECRET})
    assert not local.remote and local.s3_secret_access_key == ""  # no URI: the local folder as before
    assert LakeResource.from_env({"CLAWGYM_DATA": str(tmp_path)}).lake_dir == tmp_path.resolve() / "lake"


def test_secrets_absent_from_everything_written(s3, tmp_path):
    """The dagster path too: an asset writes through the resource whose credentials are dg.EnvVar."""
    import dagster as dg

    from clawgym_assets.defs.lake.resources import LakeResource

    data = tmp_path / "data"

    @dg.asset
    def tiny(lake: LakeResource) -> dg.MaterializeResult:
        p = lake.write("skills", _rows("skills", 2))
        return dg.MaterializeResult(metadata={"path": str(p), "rows": lake.skills().num_rows})

    old = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    os.environ.update({"AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET})
    try:
        env = {"CLAWGYM_DATA": str(data), "CLAWGYM_LAKE_URI": "s3://lake/secrets", "CLAWGYM_S3_ENDPOINT_URL": s3["url"],
               "CLAWGYM_S3_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET}
        res = LakeResource.from_env(env)
        home = tmp_path / "dagster_home"
        home.mkdir()
        with dg.instance_for_test(temp_dir=str(home)) as inst:
            r = dg.materialize([tiny], resources={"lake": res}, instance=inst)
            assert r.success
            mat = r.asset_materializations_for_node("tiny")[0]
            assert mat.metadata["rows"].value == 2 and mat.metadata["path"].value.startswith("s3://lake/secrets/")
            events = "\n".join(repr(e) for e in inst.all_logs(r.run_id))
            assert SECRET not in events and KEY_ID not in events
            run_cfg = repr(inst.get_run_by_id(r.run_id))
            assert SECRET not in run_cfg and KEY_ID not in run_cfg
        res.refresh_catalog()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    blobs = _every_object(s3["fs"], "lake")
    assert any(k.startswith("lake/secrets/skills/") for k in blobs)
    for p in [*data.rglob("*"), *home.rglob("*")]:
        if p.is_file():
            blobs[str(p)] = p.read_bytes()
    for where, blob in blobs.items():
        assert SECRET.encode() not in blob and KEY_ID.encode() not in blob, where
        meta = pq.read_metadata(pa.BufferReader(blob)).metadata if where.endswith(".parquet") else None
        assert not meta or all(SECRET.encode() not in v for v in meta.values())


def test_local_lake_unchanged(tmp_path):
    """No lake_uri: the same folder layout, Paths and files as before."""
    from clawgym_assets.defs.lake.resources import LakeResource

    res = LakeResource(data_dir=str(tmp_path))
    assert not res.remote and res.lake_dir == tmp_path.resolve() / "lake"
    p = res.write("trajectories", _rows("trajectories", 1), {"policy": "a", "shard": 0})
    assert isinstance(p, Path) and p.parent == tmp_path.resolve() / "lake" / "trajectories" / "policy=a" / "shard=0"
    assert not p.name.endswith(".base.parquet")
    assert res.query("SELECT count(*) FROM trajectories")[1] == [(1,)]


@pytest.mark.timeout(600)
def test_demo_data_stages_on_s3(s3, tmp_path):
    """The README demo's data stages with the lake on S3 (personas, skills, synthetic_tasks, mock_workspaces,
    verifiers, bench_tasks, trajectories for the oracle on one shard), then SQL over the result."""
    import dagster as dg

    from clawgym_assets.definitions import CHECKS
    from clawgym_assets.defs.bench import assets as bench
    from clawgym_assets.defs.rollouts import assets as rollouts
    from clawgym_assets.defs.rollouts.resources import (
        JudgeResource,
        ModelEndpointsResource,
        OpenClawResource,
        SandboxResource,
    )
    from clawgym_assets.defs.synthesis import assets as synthesis

    data = tmp_path / "data"
    lake = _resource(s3, "demo", data)
    res = {"lake": lake, "sandbox": SandboxResource(backend="bwrap" if shutil.which("bwrap") else "local"),
           "endpoints": ModelEndpointsResource(lake=lake), "judge": JudgeResource(), "openclaw": OpenClawResource()}
    assets = [synthesis.personas, synthesis.skills, synthesis.synthetic_tasks, synthesis.mock_workspaces,
              synthesis.verifiers, bench.bench_tasks, bench.bench_scores, bench.leaderboard, rollouts.trajectories,
              rollouts.steps, *CHECKS]
    with dg.instance_for_test() as inst:
        r1 = dg.materialize(assets, selection=["personas", "skills", "synthetic_tasks", "mock_workspaces",
                                               "verifiers"], resources=res, instance=inst,
                            run_config={"ops": {"synthetic_tasks": {"config": {"n": 6}}}})
        assert r1.success
        assert dg.materialize(assets, selection=["bench_tasks"], partition_key="procedural", resources=res,
                              instance=inst).success
        inst.add_dynamic_partitions("policy", ["oracle"])
        key = dg.MultiPartitionKey({"policy": "oracle", "shard": "0"})
        r3 = dg.materialize(assets, selection=["trajectories", "steps"], partition_key=key, resources=res,
                            instance=inst)
        assert r3.success
        inst.add_dynamic_partitions("model", ["oracle", "noop"])
        for m in ("oracle", "noop"):  # bench scores of the model-free policies, then the leaderboard
            assert dg.materialize(assets, selection=["bench_scores"], partition_key=m, resources=res, instance=inst,
                                  run_config={"ops": {"bench_scores": {"config": {"repeats": 1}}}}).success
        assert dg.materialize(assets, selection=["leaderboard"], resources=res, instance=inst).success
    assert not (data / "lake").exists()  # the tables went to S3 only
    objs = [i.path for i in s3["fs"].get_file_info(pafs.FileSelector("lake/demo", recursive=True))
            if i.type == pafs.FileType.File]
    for t in ("personas", "skills", "tasks", "verifications", "trajectories"):
        assert any(o.startswith(f"lake/demo/{t}/") for o in objs), t
    _, rows = lake.query("SELECT failure_class, count(*), avg(score) FROM trajectories GROUP BY ALL")
    assert rows and all(fc != "infra" for fc, _, _ in rows)
    n_tasks = lake.query("SELECT count(*) FROM tasks WHERE source = 'synthetic'")[1][0][0]
    assert n_tasks >= 1
    _, scores = lake.query("SELECT model, round(mean) FROM bench_scores WHERE category = 'overall' ORDER BY 1")
    assert scores == [("noop", 0.0), ("oracle", 100.0)], scores
    # `clawgym bench leaderboard` reads the same S3 lake when $CLAWGYM_LAKE_URI says so
    from typer.testing import CliRunner

    from clawgym.cli import app

    env = {"CLAWGYM_DATA": str(data), "CLAWGYM_LAKE_URI": "s3://lake/demo", "CLAWGYM_S3_ENDPOINT_URL": s3["url"],
           "CLAWGYM_S3_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET}
    r = CliRunner().invoke(app, ["bench", "leaderboard", "--suite", "procedural"], env=env)
    assert r.exit_code == 0 and "oracle" in r.output and "noop" in r.output, r.output


def test_checkpoints_read_the_sft_table_from_s3_as_local_files(s3, tmp_path):
    """The trainer reads local Parquet: an S3 lake's sft files are downloaded byte for byte, once per version."""
    import pyarrow.parquet as pq

    from clawgym_assets.defs.training.assets import sft_table_files

    data = tmp_path / "data"
    lake = _resource(s3, "train", data)
    assert sft_table_files(lake)[1] == []
    lake.write("sft", _rows("sft", 4))
    d, files = sft_table_files(lake)
    assert files and d.is_dir() and str(d).startswith(str(data)) and sorted(p.name for p in d.iterdir()) == files
    remote = {i.base_name: i.path for i in s3["fs"].get_file_info(pafs.FileSelector("lake/train/sft"))}
    for f in files:
        with s3["fs"].open_input_stream(remote[f]) as src:
            assert (d / f).read_bytes() == src.read()
    assert pq.read_table(d).num_rows == 4
    assert sft_table_files(lake) == (d, files)  # same version: the same snapshot
    lake.write("sft", _rows("sft", 2, start=10))
    d2, files2 = sft_table_files(lake)
    assert d2 != d and pq.read_table(d2).num_rows == 2


def test_new_checkpoint_sensor_reads_the_registry_on_s3(s3, tmp_path):
    from clawgym_assets.defs.bench.automation import discover_checkpoints

    data = tmp_path / "data"
    lake = _resource(s3, "registry", data)
    assert discover_checkpoints(data, lake) == []
    rows = [{**r, "checkpoint": f"ck-{i}"} for i, r in enumerate(_rows("checkpoints", 2))]
    lake.write("checkpoints", rows)
    assert discover_checkpoints(data, lake) == ["ck-0", "ck-1"]
    assert discover_checkpoints(data) == []  # the local lake of `data` has no registry
