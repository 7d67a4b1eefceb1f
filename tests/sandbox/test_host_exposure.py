"""Host exposure: `clawgym sql` sees the lake and nothing else, what clawgym writes under the data root
is owner-only (group-readable with the shared-group setting), and the local servers answer only bearers of
their per-process token (docs/NOTES.md "Host exposure")."""

import os
import stat
import sys

import duckdb
import httpx
import pytest
from typer.testing import CliRunner

from clawgym import lake as lk
from clawgym.agent import servers
from clawgym.cli import app

runner = CliRunner()


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


@pytest.fixture()
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("CLAWGYM_DATA", str(tmp_path / "data"))
    monkeypatch.delenv("CLAWGYM_LAKE_URI", raising=False)
    monkeypatch.delenv("CLAWGYM_SHARED_GROUP", raising=False)
    lk.append_rows("trajectories", [{"rollout_id": "r1", "task_id": "t", "category": "cat_a", "score": 0.5}],
                   {"policy": "oracle", "shard": 0}, root=tmp_path / "data" / "lake")
    return tmp_path


# ---- clawgym sql: the lake and nothing else -------------------------------------------------------------------
def test_sql_cannot_read_host_files(env):
    for q in ("SELECT * FROM read_text('/etc/passwd')",
              "SELECT * FROM read_csv('/etc/passwd')",
              "SELECT * FROM glob('/etc/*')",
              f"SELECT * FROM read_text('{env}/data/lake/../../../../../../etc/passwd')",
              f"SELECT count(*) FROM read_parquet('{env}/data/clawgym.duckdb.nope')"):
        r = runner.invoke(app, ["sql", q])
        assert r.exit_code == 1, (q, r.output)
        assert "error" in r.output and "root:" not in r.output, (q, r.output)
    r = runner.invoke(app, ["sql", "SELECT * FROM read_text('/etc/passwd')"])
    assert "lake" in r.output and "disabled" in r.output  # says why: a lake query reads the lake's tables only


def test_sql_cannot_write_files_or_reopen_access(env):
    out = env / "x.csv"
    lake_dir = env / "data" / "lake"
    before = sorted(p for p in lake_dir.rglob("*"))
    for q in (f"COPY (SELECT 1) TO '{out}'",
              f"COPY (SELECT 1 AS a) TO '{lake_dir}/trajectories/policy=oracle/shard=0/evil.parquet'",
              f"EXPLAIN ANALYZE COPY (SELECT 1) TO '{lake_dir}/y.csv'",
              f"EXPORT DATABASE '{env}/exp'",
              f"ATTACH '{env}/other.duckdb' AS o",
              "SET enable_external_access = true",
              "SET allowed_directories = ['/']",
              "INSTALL httpfs",
              f"SELECT 1; COPY (SELECT 1) TO '{out}'"):
        r = runner.invoke(app, ["sql", q])
        assert r.exit_code == 1 and "error" in r.output, (q, r.output)
    assert not out.exists() and not (env / "exp").exists() and not (env / "other.duckdb").exists()
    assert sorted(p for p in lake_dir.rglob("*")) == before
    r = runner.invoke(app, ["sql", "COPY (SELECT 1) TO '/tmp/x.csv'"])
    assert r.exit_code == 1 and "COPY" in r.output


def test_sql_over_the_lake_still_works(env):
    r = runner.invoke(app, ["sql", "SELECT category, avg(score) AS s FROM trajectories GROUP BY 1"])
    assert r.exit_code == 0, r.output
    assert "cat_a" in r.output and "1 row(s)" in r.output
    for q in ("DESCRIBE trajectories", "SHOW TABLES", "SUMMARIZE trajectories", "FROM trajectories",
              "EXPLAIN SELECT count(*) FROM trajectories", "EXPLAIN ANALYZE SELECT count(*) FROM steps",
              "SELECT count(*) FROM read_parquet('" + str(env / "data" / "lake" / "trajectories") + "/**/*.parquet')"):
        r = runner.invoke(app, ["sql", q])
        assert r.exit_code == 0, (q, r.output)
    # the catalog file itself stays an ordinary DuckDB database: `duckdb data/clawgym.duckdb` reads the views
    con = duckdb.connect(str(env / "data" / "clawgym.duckdb"), read_only=True)
    try:
        assert con.execute("SELECT task_id, score FROM trajectories").fetchall() == [("t", 0.5)]
    finally:
        con.close()


def test_restricted_connection_reads_registered_datasets_only(tmp_path):
    """The object-store path: datasets registered in the connection (as catalog.connect does for s3://), no file."""
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"a": [1, 2]}), tmp_path / "p.parquet")
    con = duckdb.connect()
    con.register("__lake_t", ds.dataset(str(tmp_path / "p.parquet")))
    con.execute('CREATE TEMP VIEW t AS SELECT * FROM "__lake_t"')
    lk.restrict(con)
    assert con.execute("SELECT sum(a) FROM t").fetchall() == [(3,)]
    with pytest.raises(duckdb.PermissionException):
        con.execute(f"SELECT * FROM read_parquet('{tmp_path}/p.parquet')")
    with pytest.raises(duckdb.Error):
        con.execute("SET enable_external_access = true")
    con.close()


def test_check_read_only():
    lk.check_read_only("SELECT 1; DESCRIBE SELECT 1; FROM (VALUES (1)); EXPLAIN ANALYZE SELECT 1")
    for q in ("COPY (SELECT 1) TO 'x'", "PRAGMA enable_profiling", "CALL pragma_version()", "SET threads = 1",
              "PREPARE p AS SELECT 1", "LOAD httpfs", "CREATE TABLE x AS SELECT 1",
              "EXPLAIN ANALYZE /**/ COPY x TO 'y'"):
        with pytest.raises(lk.LakeQueryError):
            lk.check_read_only(q)


# ---- modes --------------------------------------------------------------------------------------------------
def _private(p) -> bool:
    return stat.S_IMODE(os.stat(p).st_mode) & 0o077 == 0


def test_lake_catalog_and_cache_files_are_owner_only(tmp_path):
    from clawgym.synth.llm_cache import ResponseCache

    old = os.umask(0o022)  # a caller that set nothing: the lake writers still make owner-only files
    try:
        root = tmp_path / "data" / "lake"
        part = lk.write_table("trajectories", [{"rollout_id": "r", "task_id": "t"}], {"policy": "p", "shard": 0},
                              root=root)
        db = lk.refresh_catalog(tmp_path / "data" / "clawgym.duckdb", root=root)
        assert _private(part) and _private(db)
        for d in (root, root / "trajectories", part.parent):
            assert stat.S_IMODE(os.stat(d).st_mode) == 0o700, d
        cache = ResponseCache(tmp_path / "data" / "cache")
        cache.put("ab" * 32, {"response": {}})
        assert _private(cache.path("ab" * 32))
        # everything else below the data root (caches, checkpoints, logs, secrets: whatever their own modes)
        # is behind the data root, which the entry points make owner-only (here an existing 0755 one)
        os.chmod(tmp_path / "data", 0o755)
        lk.modes.protect(tmp_path / "data")
        assert stat.S_IMODE(os.stat(tmp_path / "data").st_mode) == 0o700
        assert _umask() == 0o022  # the process umask is left alone (sandboxes make host folders with it)
    finally:
        os.umask(old)


def test_shared_group_setting_opens_them_to_the_group(tmp_path, monkeypatch):
    from clawgym_assets.defs.lake.resources import LakeResource

    monkeypatch.setenv("CLAWGYM_SHARED_GROUP", "1")
    res = LakeResource.from_env()
    assert res.shared_group and lk.modes.shared_from_env(os.environ)
    with lk.modes.configured(res.shared_group):
        root = tmp_path / "data" / "lake"
        part = lk.write_table("tasks", [{"task_id": "t"}], {"source": "synthetic"}, root=root)
        db = lk.refresh_catalog(tmp_path / "data" / "clawgym.duckdb", root=root)
        lk.modes.protect(tmp_path / "data")
        for f in (part, db):
            assert stat.S_IMODE(os.stat(f).st_mode) == 0o640, f
        for d in (tmp_path / "data", root, part.parent):
            assert stat.S_IMODE(os.stat(d).st_mode) == 0o750, d
    assert not lk.modes.is_shared()
    monkeypatch.setenv("CLAWGYM_SHARED_GROUP", "0")
    assert not LakeResource.from_env().shared_group


def test_entry_points_protect_the_data_root(tmp_path, monkeypatch):
    import dagster as dg

    from clawgym_assets.defs.lake.resources import LakeResource

    monkeypatch.setenv("CLAWGYM_DATA", str(tmp_path / "data"))
    monkeypatch.delenv("CLAWGYM_SHARED_GROUP", raising=False)
    (tmp_path / "data").mkdir(mode=0o755)
    os.chmod(tmp_path / "data", 0o755)
    r = runner.invoke(app, ["sql", "SELECT count(*) FROM tasks"])  # the CLI
    assert r.exit_code == 0, r.output
    assert _private(tmp_path / "data") and _private(tmp_path / "data" / "clawgym.duckdb")
    seen = {}

    @dg.asset
    def probe(lake: LakeResource):
        seen["shared"] = lk.modes.is_shared()

    os.chmod(tmp_path / "data", 0o755)
    d2 = tmp_path / "team"
    assert dg.materialize([probe], resources={"lake": LakeResource(data_dir=str(tmp_path / "data"))}).success
    assert _private(tmp_path / "data") and seen == {"shared": False}
    assert dg.materialize([probe], resources={"lake": LakeResource(data_dir=str(d2), shared_group=True)}).success
    assert stat.S_IMODE(os.stat(d2).st_mode) == 0o750 and seen == {"shared": True}
    assert not lk.modes.is_shared()  # put back after the run


# ---- local servers take the per-process token ---------------------------------------------------------------
def _chat(url: str, token: str | None) -> httpx.Response:
    h = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return httpx.post(url + "/chat/completions", headers=h, timeout=60,
                      json={"model": "noop", "messages": [{"role": "user", "content": "hi"}]})


def test_policy_server_needs_the_token():
    with servers.PolicyServer() as srv:
        assert srv.token == servers.server_token() == os.environ[servers.TOKEN_ENV] and len(srv.token) >= 32
        assert _chat(srv.base_url, None).status_code == 401
        assert _chat(srv.base_url, "wrong-" + srv.token).status_code == 401
        assert httpx.get(srv.base_url + "/models", timeout=10).status_code == 401
        r = _chat(srv.base_url, srv.token)
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"]
        assert httpx.get(srv.base_url.rsplit("/v1", 1)[0] + "/health", timeout=10).status_code == 200


def test_our_clients_send_it_and_it_is_redacted():
    from clawgym.agent.policies import ChatClient, get_policy, open_endpoint
    from clawgym.agent.secrets import redact

    with open_endpoint(get_policy("noop")) as ep:
        assert ep.api_key == servers.server_token()
        out = ChatClient(ep).complete(messages=[{"role": "user", "content": "hi"}])
        assert out["choices"][0]["message"]["content"]
    tok = servers.server_token()
    assert tok not in redact(f"key={tok} / Authorization: Bearer {tok}")


def test_bearer_auth_middleware_in_process():
    import asyncio

    async def ok(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def call(path, headers):
        sent = []

        async def send(m):
            sent.append(m)

        await servers.BearerAuth(ok, "s3cret-token-0123456789")({"type": "http", "path": path, "headers": headers},
                                                          None, send)
        return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])

    assert asyncio.run(call("/v1/chat/completions", []))[0] == 401
    assert asyncio.run(call("/v1/chat/completions", [(b"authorization", b"Bearer nope")]))[0] == 401
    status, body = asyncio.run(call("/v1/chat/completions", [(b"authorization", b"Bearer s3cret-token-0123456789")]))
    assert status == 200 and body == b"ok"
    assert asyncio.run(call("/health", []))[0] == 200
    assert b"s3cret" not in asyncio.run(call("/x", [(b"authorization", b"Bearer s3cret-token-wrong")]))[1]


def test_model_server_command_line_never_holds_the_token(tmp_path):
    from clawgym.serve import launcher as serve

    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    srv = serve.ModelServer(model, port=1, device="cpu", python=sys.executable)
    cmd = srv.command()
    assert srv.token == servers.server_token() and srv.token not in " ".join(cmd)
    assert "--middleware" in cmd  # the engine's own process checks it (clawgym_engine_auth)
    from clawgym.agent.policies import SERVER_TOKEN_ENV

    assert serve.AUTH_ENV == servers.TOKEN_ENV == SERVER_TOKEN_ENV


def test_bench_add_refuses_names_that_are_paths(tmp_path, monkeypatch):
    monkeypatch.setenv("CLAWGYM_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    for bad in ("..", "../../escaped", "a..b", ".hidden", "x/y"):
        r = runner.invoke(app, ["bench", "add", bad, "--kind", "checkpoint"])
        assert r.exit_code == 2 and "letters, digits" in r.output, (bad, r.output)
