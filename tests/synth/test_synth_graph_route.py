"""`synthetic_tasks` through the one synthesis pipeline (clawgym.synth.pipeline.synthesize), materialized in-process
with route llm / both / procedural. The LLM route talks, with the REAL openai client, to a local scripted
OpenAI-compatible FastAPI server registered in ModelEndpointsResource under three names (generator, reviewer,
auditor: different models, to check each role goes to its endpoint).

Scripted candidates (taxonomy restricted to analysis_reasoning, n_llm=5, skill_fraction=0.2 -> 4 personas + 1 skill):
persona 0 -> task A (accepted), persona 1 -> task B (accepted), persona 2 -> task C (the auditor reports a factual
error: rejected at audit), persona 3 -> task A again (rejected by the MiniLM dedupe), the skill -> a verifier that
passes on placeholder files (rejected at the scaffold gate after its repair).
"""

import json
import os
import shutil
import socket
import threading
import time

import dagster as dg
import pytest

openai = pytest.importorskip("openai")
fastapi = pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")


from test_synth_llm import USAGE, make_app  # noqa: E402  (the same scripted-server app)

from clawgym import lake as lk  # noqa: E402
from clawgym.agent.servers import completion_json  # noqa: E402

BACKEND = os.environ.get("CLAWGYM_TEST_SANDBOX") or ("bwrap" if shutil.which("bwrap") else "local")
CATEGORY = "analysis_reasoning"
N_PERSONAS = 6


def _code(out: str, key: str, want) -> str:
    return (f"import json, os\n\ndef grade(transcript, workspace_path):\n    try:\n"
            f"        v = json.load(open(os.path.join(workspace_path, {out!r})))[{key!r}]\n"
            f"    except Exception:\n        return {{'value': 0.0}}\n"
            f"    return {{'value': 1.0 if v == {want!r} else 0.0}}\n")


WEAK = ("import os\n\ndef grade(transcript, workspace_path):\n"
        "    return {'value': 1.0 if os.path.exists(os.path.join(workspace_path, 'output/total.json')) else 0.0}\n")

TASKS = {
    "A": {"instruction": "Add up the numbers in input/nums.csv and write output/total.json as {\"total\": <sum>}.",
          "files": [("input/nums.csv", "n\n10\n12\n20\n")], "out": "output/total.json", "key": "total", "want": 42},
    "B": {"instruction": "Our deploy log is noisy. Count how many lines of logs/deploy.log start with ERROR and "
                         "report it in output/errors.json under the key errors, so on-call knows the damage.",
          "files": [("logs/deploy.log", "INFO start\nERROR disk\nWARN slow\nERROR net\nINFO done\n")],
          "out": "output/errors.json", "key": "errors", "want": 2},
    "C": {"instruction": "Find the maximum temperature reading in sensors/temps.txt (one reading per line) and "
                         "save it as output/max.json with key max.",
          "files": [("sensors/temps.txt", "12\n31\n7\n")], "out": "output/max.json", "key": "max", "want": 31},
}


def spec(name: str, weak: bool = False) -> dict:
    t = TASKS[name]
    return {"instruction": t["instruction"], "subcategory": "data analysis and calculation", "difficulty": 2,
            "workspace_files": [{"path": p, "content": c} for p, c in t["files"]],
            "output_paths": [t["out"]], "verifier_code": WEAK if weak else _code(t["out"], t["key"], t["want"]),
            "rubric": [], "reference_outputs": [{"path": t["out"], "content": json.dumps({t["key"]: t["want"]})}]}


class Script:
    def __init__(self, persona_ids: list[str]):
        self.plan = dict(zip(persona_ids, ["A", "B", "C", "A"]))
        self.requests: list[dict] = []
        self.lock = threading.Lock()

    def reply(self, body: dict):
        with self.lock:
            self.requests.append(body)
        name = body["response_format"]["json_schema"]["name"]
        text = "\n".join(m["content"] for m in body["messages"])
        if name == "task_spec":
            pid = next((p for p in self.plan if p in text), None)
            out = spec(self.plan[pid]) if pid else spec("A", weak=True)  # skill-grounded: a weak verifier
            if pid is None and "failed validation" in text:
                out = spec("A", weak=True)
        elif name == "task_review":
            out = {"pass": True, "coverage_pass": True, "issues": [], "missing_task_requirements": [],
                   "weak_or_incorrect_checks": [], "repair_guidance": ""}
        elif name == "task_audit":
            bad = "maximum temperature" in text
            out = {"pass": not bad, "factual_errors": ["31 is not the maximum of 12, 31, 7"] if bad else [],
                   "answer_leak": False, "leaked_text": ""}
        else:
            return 400, {"error": {"message": f"unknown schema {name}"}}
        return 200, completion_json({"role": "assistant", "content": json.dumps(out)}, body.get("model", "m"), USAGE)


@pytest.fixture(scope="module")
def server():
    from clawgym.synth.personas import expand_personas

    script = Script([p.persona_id for p in expand_personas(limit=N_PERSONAS, seed=0)][:4])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(make_app(script), host="127.0.0.1", port=port, log_level="warning"))
    th = threading.Thread(target=srv.run, daemon=True)
    th.start()
    for _ in range(200):
        if srv.started:
            break
        time.sleep(0.05)
    assert srv.started, "scripted OpenAI-compatible server did not start"
    yield f"http://127.0.0.1:{port}/v1", script
    srv.should_exit = True
    th.join(10)


from test_dagster_graph import FAMILIES  # noqa: E402  (tests/ is on sys.path: prepend import mode)


def _materialize(data, url, cfg: dict, raise_on_error: bool = True):
    from clawgym_assets.defs.lake.resources import LakeResource
    from clawgym_assets.defs.rollouts.resources import ModelEndpointsResource, OpenClawResource, SandboxResource
    from clawgym_assets.defs.synthesis import assets as synthesis

    lake = LakeResource(data_dir=str(data))
    eps = [{"name": n, "base_url": url, "model": f"{n}-model", "api_key_env": "CLAWGYM_TEST_SYNTH_KEY"}
           for n in ("gen-ep", "review-ep", "audit-ep")]
    res = {"lake": lake, "sandbox": SandboxResource(backend=BACKEND), "openclaw": OpenClawResource(),
           "endpoints": ModelEndpointsResource(lake=lake, endpoints_json=json.dumps(eps))}
    with dg.instance_for_test() as inst:
        r = dg.materialize([synthesis.personas, synthesis.skills, synthesis.synthetic_tasks], resources=res,
                           instance=inst, raise_on_error=raise_on_error,
                           run_config={"ops": {"personas": {"config": {"n": N_PERSONAS}},
                                               "synthetic_tasks": {"config": cfg}}})
    md = r.asset_materializations_for_node("synthetic_tasks")[0].metadata if r.success else None
    return r, md


LLM_CFG = {"n_llm": 5, "skill_fraction": 0.2, "categories": [CATEGORY], "generator": "gen-ep",
           "reviewer": "review-ep", "auditor": "audit-ep", "max_repairs": 1}


@pytest.fixture(scope="module")
def runs(server, tmp_path_factory):
    url, script = server
    out = {}
    for route in ("procedural", "llm", "both"):
        data = tmp_path_factory.mktemp(f"data-{route}")
        cfg = {"route": route, "n": 12, "families": FAMILIES, **(LLM_CFG if route != "procedural" else {})}
        n0 = len(script.requests)
        r, md = _materialize(data, url, cfg)
        assert r.success
        root = data / "lake"
        out[route] = {"data": data, "md": md, "requests": script.requests[n0:],
                      "tasks": lk.read_table("tasks", {"source": "synthetic"}, root=root).to_pylist(),
                      "rejected": lk.read_rows("rejected_tasks", root=root)}
    return out


def _llm_checks(run):
    tasks = [t for t in run["tasks"] if t["route"] != "procedural"]
    personas = [p.persona_id for p in __import__("clawgym.synth.personas", fromlist=["x"]).expand_personas(
        limit=N_PERSONAS, seed=0)]
    # accepted LLM tasks reach the lake: personas 0 and 1 (A, B); C fails the audit, the second A is a duplicate
    assert sorted(t["persona_id"] for t in tasks) == sorted(personas[:2])
    assert {t["route"] for t in tasks} == {"persona"} and {t["category"] for t in tasks} == {CATEGORY}
    assert {t["split"] for t in tasks} == {"train"} and {t["suite"] for t in tasks} == {"llm"}
    assert all(t["has_reference"] for t in tasks)
    # every rejection is in the table with its gate and reason
    rej = {(r["route"], r["stage"]): r for r in run["rejected"]}
    assert set(rej) == {("persona", "audit"), ("persona", "dedupe"), ("skill", "scaffold")}, run["rejected"]
    assert "factual error" in rej[("persona", "audit")]["reason"]
    assert "cosine" in rej[("persona", "dedupe")]["reason"]
    assert "placeholder" in rej[("skill", "scaffold")]["reason"]
    assert all(r["category"] == CATEGORY for r in rej.values())
    # ... and DuckDB can query it
    _, rows = lk.query("SELECT route, stage, count(*) FROM rejected_tasks GROUP BY 1, 2 ORDER BY 1, 2",
                       run["data"] / "clawgym.duckdb")
    assert rows == [("persona", "audit", 1), ("persona", "dedupe", 1), ("skill", "scaffold", 1)]
    # per-gate acceptance counts per route and category
    gc = run["md"]["gate_counts"].value
    p, s = gc["persona"][CATEGORY], gc["skill"][CATEGORY]
    assert p["candidates"] == 4 and p["accepted"] == 2 and p["rejected"] == {"audit": 1, "dedupe": 1}
    assert [p["passed"][g] for g in ("schema", "compile", "noop", "scaffold", "oracle", "review", "audit",
                                     "dedupe")] == [4, 4, 4, 4, 4, 4, 3, 2]
    assert s == {"candidates": 1, "rejected": {"scaffold": 1}, "accepted": 0, "passed": s["passed"]}
    assert s["passed"]["noop"] == 1 and s["passed"]["scaffold"] == 0
    assert "passed audit" in run["md"]["gates"].value and "scaffold" in run["md"]["rejected_by_gate"].value
    # each role went to its own named endpoint
    models = {(r["response_format"]["json_schema"]["name"], r["model"]) for r in run["requests"]}
    assert models == {("task_spec", "gen-ep-model"), ("task_review", "review-ep-model"),
                      ("task_audit", "audit-ep-model")}


def test_route_llm(runs):
    run = runs["llm"]
    assert all(t["route"] != "procedural" for t in run["tasks"])
    assert run["md"]["route"].value == "llm" and run["md"]["n"].value == 2
    _llm_checks(run)


def test_route_both_keeps_procedural_tasks_and_split(runs):
    run = runs["both"]
    _llm_checks(run)
    proc = sorted((t["task_id"], t["split"]) for t in run["tasks"] if t["route"] == "procedural")
    assert proc == sorted((t["task_id"], t["split"]) for t in runs["procedural"]["tasks"])
    assert run["md"]["gate_counts"].value["procedural"]
    assert run["md"]["n"].value == len(proc) + 2
    # diversity per route x category: the two accepted LLM tasks and the procedural ones, each group's spread
    div = {(d["route"], d["category"]): d for d in run["md"]["diversity_json"].value}
    assert div[("persona", CATEGORY)]["n"] == 2 and 0 < div[("persona", CATEGORY)]["spread"] <= 2
    assert div[("procedural", "all")]["n"] == len(proc) and div[("procedural", "all")]["spread"] > 0
    assert "spread" in run["md"]["diversity"].value


def test_route_procedural_unchanged(runs):
    """The same tasks and split as generate_procedural + split_by_family (the asset's former own path); every
    task passed the gates here, the procedural gate counts are in the metadata, nothing was rejected."""
    from clawgym.synth.families import generate_procedural
    from clawgym.synth.gates import split_by_family
    from clawgym.synth.personas import expand_personas

    run = runs["procedural"]
    assert not run["requests"]  # no LLM calls
    want = split_by_family(generate_procedural(12, seed=0, families=FAMILIES,
                                               personas=expand_personas(limit=N_PERSONAS, seed=0)),
                           held_out_per_category=1, seed=0)
    assert sorted((t["task_id"], t["split"]) for t in run["tasks"]) == sorted((t.task_id, t.split) for t in want)
    assert {t["split"] for t in run["tasks"]} == {"train", "bench"}
    assert not run["rejected"]
    gc = run["md"]["gate_counts"].value["procedural"]
    assert sum(d["candidates"] for d in gc.values()) == 12 and sum(d["accepted"] for d in gc.values()) == 12
    assert all(d["passed"]["oracle"] == d["candidates"] for d in gc.values())


def test_unknown_route_and_endpoint_fail_clearly(server, tmp_path):
    url, _ = server
    r, _ = _materialize(tmp_path / "a", url, {"route": "magic"}, raise_on_error=False)
    assert not r.success
    assert "route" in str(r.get_step_failure_events()[0].event_specific_data.error.message)
    r, _ = _materialize(tmp_path / "b", url, {"route": "llm", "generator": "nope"}, raise_on_error=False)
    msg = str(r.get_step_failure_events()[0].event_specific_data.error.message)
    assert not r.success and "generator" in msg and "nope" in msg


def test_llm_candidates_backfill_fills_the_caches(server, tmp_path):
    """A backfill of `llm_candidates` over its 16 shards makes every candidate once; `synthetic_tasks` with the same
    LLM config then makes no request and gates nothing, and accepts the same tasks as a whole run."""
    from clawgym_assets.defs.lake.resources import LakeResource
    from clawgym_assets.defs.rollouts.resources import ModelEndpointsResource, OpenClawResource, SandboxResource
    from clawgym_assets.defs.synthesis import assets as synthesis
    from clawgym_assets.partitions import llm_shard_partitions

    url, script = server
    data = tmp_path / "data"
    lake = LakeResource(data_dir=str(data))
    eps = [{"name": n, "base_url": url, "model": f"{n}-model"} for n in ("gen-ep", "review-ep", "audit-ep")]
    res = {"lake": lake, "sandbox": SandboxResource(backend=BACKEND), "openclaw": OpenClawResource(),
           "endpoints": ModelEndpointsResource(lake=lake, endpoints_json=json.dumps(eps))}
    assets = [synthesis.personas, synthesis.skills, synthesis.llm_candidates, synthesis.synthetic_tasks]
    llm_cfg = {k: v for k, v in LLM_CFG.items()}
    with dg.instance_for_test() as inst:
        assert dg.materialize(assets, selection=["personas", "skills"], resources=res, instance=inst,
                              run_config={"ops": {"personas": {"config": {"n": N_PERSONAS}}}}).success
        n0 = len(script.requests)
        made, slots = {}, 0
        for key in llm_shard_partitions.get_partition_keys():
            r = dg.materialize(assets, selection=["llm_candidates"], partition_key=key, resources=res,
                               instance=inst, run_config={"ops": {"llm_candidates": {"config": llm_cfg}}})
            assert r.success
            m = r.asset_materializations_for_node("llm_candidates")[0].metadata
            made[key] = m["n_candidates"].value
            # requests sent + answered from the cache (the duplicate task's review was asked by an earlier shard)
            slots += m.get("llm_requests", dg.IntMetadataValue(0)).value + \
                m.get("llm_cache_hits", dg.IntMetadataValue(0)).value
        # 5 candidates: persona 0-3 in shards 00-03, the skill candidate 0 in shard 00; the other shards are empty
        assert made == {k: {"00": 2, "01": 1, "02": 1, "03": 1}.get(k, 0) for k in made}
        backfill_requests = len(script.requests) - n0
        assert backfill_requests > 0
        r = dg.materialize(assets, selection=["synthetic_tasks"], resources=res, instance=inst,
                           run_config={"ops": {"synthetic_tasks": {"config": {"route": "llm", **llm_cfg}}}})
        assert r.success
        md = r.asset_materializations_for_node("synthetic_tasks")[0].metadata
    assert len(script.requests) - n0 == backfill_requests  # synthetic_tasks made no request
    assert md["llm_requests"].value == 0 and md["llm_cache_hits"].value == slots >= backfill_requests
    assert md["llm"].value["gates"]["gated"] == 0 and md["llm"].value["gates"]["cache_hits"] >= 1
    tasks = lk.read_table("tasks", {"source": "synthetic"}, root=data / "lake").to_pylist()
    personas = [p.persona_id for p in __import__("clawgym.synth.personas", fromlist=["x"]).expand_personas(
        limit=N_PERSONAS, seed=0)]
    assert sorted(t["persona_id"] for t in tasks) == sorted(personas[:2])  # as the whole run (_llm_checks)
