"""LLM route: the REAL openai client against a local OpenAI-compatible FastAPI server (scripted replies).

Scripted personas: case-good (accepted), case-repair (reviewer fails round 0, repaired spec passes),
case-scaffold (verifier passes on placeholders: rejected by the scaffold gate after 3 repairs),
case-audit (auditor reports a factual error: rejected). The very first request gets HTTP 500, which the
openai client retries.
"""

import json
import socket
import threading
import time

import pytest

openai = pytest.importorskip("openai")
fastapi = pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")

from fastapi import FastAPI, Request  # noqa: E402
from fastapi.responses import JSONResponse  # noqa: E402

from clawgym.agent.servers import completion_json  # noqa: E402
from clawgym.synth.llm_route import (  # noqa: E402
    TASK_SCHEMA,
    ClientConfig,
    compile_gate,
    generate_llm_tasks,
    leak_check,
    scaffold_files,
    spec_to_task,
)

USAGE = {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}

GOOD_CODE = '''import json, os

def grade(transcript, workspace_path):
    try:
        data = json.load(open(os.path.join(workspace_path, "output/total.json")))
        v = data["total"]
    except Exception:
        return {"total": 0.0, "is_int": 0.0}
    return {"total": 1.0 if v == 42 else 0.0, "is_int": 1.0 if isinstance(v, int) and v == 42 else 0.0}
'''

WEAK_CODE = '''import os

def grade(transcript, workspace_path):
    return {"exists": 1.0 if os.path.exists(os.path.join(workspace_path, "output/total.json")) else 0.0}
'''


def spec(marker: str, code: str = GOOD_CODE, revised: bool = False) -> dict:
    rub = {"name": "clarity", "file_path": "output/total.json",
           "scores": {"0": "missing", "0.25": "bad", "0.5": "ok", "0.75": "good", "1": "great"}}
    return {
        "instruction": f"Add up the numbers in input/nums.csv and write output/total.json as {{\"total\": <sum>}}. "
                       f"[{marker}]" + (" (revised)" if revised else ""),
        "subcategory": "data analysis and calculation",
        "difficulty": 2,
        "workspace_files": [{"path": "input/nums.csv", "content": "n\n10\n12\n20\n"},
                            {"path": "notes/old.txt", "content": "stale numbers: 1 2 3\n"}],
        "output_paths": ["output/total.json"],
        "verifier_code": code,
        "rubric": [rub] if marker == "case-good" else [],
        "reference_outputs": [{"path": "output/total.json", "content": "{\"total\": 42}\n"}],
    }


class Script:
    def __init__(self):
        self.requests: list[dict] = []
        self.n_500 = 0
        self.lock = threading.Lock()

    def reply(self, body: dict):
        with self.lock:
            self.requests.append(body)
            first = len(self.requests) == 1
        if first:
            self.n_500 += 1
            return 500, {"error": {"message": "scripted overload", "type": "server_error"}}
        rf = body.get("response_format") or {}
        name = rf.get("json_schema", {}).get("name")
        text = "\n".join(m["content"] for m in body["messages"])
        marker = next(m for m in ("case-good", "case-repair", "case-scaffold", "case-audit", "case-prose")
                      if m in text)
        if name == "task_spec" and marker == "case-prose":  # a model that ignores response_format
            return 200, completion_json({"role": "assistant", "content": "Sure! Here is a task: sum the numbers."},
                                        body.get("model", "m"), USAGE)
        if name == "task_spec":
            repairing = "failed validation" in text
            if marker == "case-scaffold":
                out = spec(marker, WEAK_CODE)
            else:
                out = spec(marker, revised=repairing and marker == "case-repair")
        elif name == "task_review":
            ok = marker != "case-repair" or "(revised)" in text
            out = {"pass": ok, "coverage_pass": ok, "issues": [] if ok else ["the sum is not cross-checked"],
                   "missing_task_requirements": [], "weak_or_incorrect_checks": [] if ok else ["total only"],
                   "repair_guidance": "" if ok else "mention the input column explicitly"}
        elif name == "task_audit":
            bad = marker == "case-audit"
            out = {"pass": not bad, "factual_errors": ["10 + 12 + 20 is not 41"] if bad else [],
                   "answer_leak": False, "leaked_text": ""}
        else:
            return 400, {"error": {"message": f"unknown schema {name}"}}
        return 200, completion_json({"role": "assistant", "content": json.dumps(out)}, body.get("model", "m"), USAGE)


def make_app(script) -> FastAPI:
    """An OpenAI-compatible chat endpoint answering with script.reply(body) -> (status, payload)."""
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        code, payload = script.reply(await request.json())
        return JSONResponse(payload, status_code=code)

    return app


@pytest.fixture(scope="module")
def server():
    script = Script()
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


PERSONAS = [{"persona_id": m, "name": m, "role": "analyst", "domain": "retail", "tone": "terse"}
            for m in ("case-good", "case-repair", "case-scaffold", "case-audit")]


def test_llm_route_end_to_end(server, any_isolating_factory, monkeypatch):
    url, script = server
    monkeypatch.setenv("CLAWGYM_TEST_LLM_KEY", "sk-local-test")
    cfg = {"base_url": url, "model": "scripted", "api_key_env": "CLAWGYM_TEST_LLM_KEY", "max_retries": 2}
    accepted, rejected = generate_llm_tasks(PERSONAS, [], {"analysis_reasoning": ["data analysis and calculation"]},
                                            cfg, n=4, route="persona", max_repairs=3, factory=any_isolating_factory)
    by_persona = {t.persona_id: t for t in accepted}
    assert sorted(by_persona) == ["case-good", "case-repair"], rejected
    good, rep = by_persona["case-good"], by_persona["case-repair"]
    assert good.route == "persona" and good.category == "analysis_reasoning" and good.family == "llm_persona"
    assert good.verifier.rubric and good.verifier.rubric[0].name == "clarity"
    assert good.source["llm"]["gate_scores"] == {"noop": 0.0, "scaffold": 0.0, "oracle": 1.0}
    assert good.source["llm"]["repair_rounds"] == 0 and rep.source["llm"]["repair_rounds"] == 1
    assert "(revised)" in rep.instruction
    assert [c.name for c in good.reference] == ["write"]

    reasons = {r["persona_id"]: r for r in rejected}
    assert reasons["case-scaffold"]["reason"] == "scaffold" and reasons["case-scaffold"]["rounds"] == 4
    assert "placeholder" in reasons["case-scaffold"]["detail"]
    assert reasons["case-audit"]["reason"] == "audit" and "factual error" in reasons["case-audit"]["detail"]

    # the 500 was retried by the real client; every call asked for strict JSON-schema output
    assert script.n_500 == 1
    first = script.requests[0]  # candidates run concurrently: the retry of the 500 is a later identical request
    assert sum(r["messages"] == first["messages"] for r in script.requests) == 2
    names = [r["response_format"]["json_schema"]["name"] for r in script.requests]
    assert all(r["response_format"]["type"] == "json_schema" and r["response_format"]["json_schema"]["strict"]
               for r in script.requests)
    # good: gen, review, audit; repair: gen, review, repair, review, audit; scaffold: gen + 3 repairs; audit: 3
    assert names.count("task_spec") == 1 + 2 + 4 + 1 + 1  # (+1: the retried first request)
    assert names.count("task_review") == 1 + 2 + 0 + 1
    assert names.count("task_audit") == 3
    assert "sk-local-test" not in json.dumps(script.requests)


def test_skill_route_sets_skill_ids(server, any_isolating_factory):
    url, _ = server
    skills = [{"skill_id": "csv-sum", "name": "case-good", "description": "sum csv columns", "body": "# CSV sums"}]
    acc, rej = generate_llm_tasks([], skills, [("analysis_reasoning", "data analysis and calculation")],
                                  ClientConfig(base_url=url, model="scripted"), n=1, route="skill",
                                  factory=any_isolating_factory)
    assert not rej and len(acc) == 1
    assert acc[0].route == "skill" and acc[0].skill_ids == ["csv-sum"] and acc[0].persona_id is None


def test_unreachable_endpoint_is_an_llm_error(any_isolating_factory):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    acc, rej = generate_llm_tasks(PERSONAS[:1], [], None, {"base_url": f"http://127.0.0.1:{port}/v1",
                                                          "max_retries": 0, "timeout_s": 5}, n=1,
                                  factory=any_isolating_factory)
    assert not acc and rej[0]["reason"] == "llm_error" and "Connection" in rej[0]["detail"]


def test_deterministic_gates_and_leak_check():
    assert compile_gate("def grade(t, w):\n    return {}\n") is None
    assert "compile" in compile_gate("def grade(:\n")
    assert "no top-level grade" in compile_gate("def other(a, b):\n    pass\n")
    assert set(TASK_SCHEMA["required"]) == set(TASK_SCHEMA["properties"])  # strict schema
    s = spec("case-good")
    t = spec_to_task(s, task_id="t1", category="analysis_reasoning", route="persona", persona_id="p",
                     skill_ids=[], seed=0, meta={})
    assert [f.path for f in scaffold_files(t)] == ["input/nums.csv", "notes/old.txt", "output/total.json"]
    assert leak_check(t) is None
    s["reference_outputs"] = [{"path": "output/summary.md", "content": "Total revenue for March was 42 units.\n"}]
    s["instruction"] += " Hint: Total revenue for March was 42 units."
    leaky = spec_to_task(s, task_id="t2", category="analysis_reasoning", route="persona", persona_id="p",
                         skill_ids=[], seed=0, meta={})
    assert leak_check(leaky) == "Total revenue for March was 42 units."


def test_leak_check_ignores_headers_and_copied_rows():
    s = spec("case-good")
    s["workspace_files"].append({"path": "input/orders.csv", "content": "id,customer,amount\n1,Ana Costa,120.50\n"
                                                                          "2,Ben Ito,99.00\n3,Chen Xu,310.25\n"})
    s["instruction"] += " Write output/big.csv with columns id,customer,amount (orders over 100)."
    s["reference_outputs"] = [{"path": "output/big.csv", "content": "id,customer,amount\n1,Ana Costa,120.50\n"
                                                                     "3,Chen Xu,310.25\n"}]
    t = spec_to_task(s, task_id="t3", category="analysis_reasoning", route="persona", persona_id="p",
                     skill_ids=[], seed=0, meta={})
    assert leak_check(t) is None
    s["workspace_files"].append({"path": "notes/expected.csv", "content": s["reference_outputs"][0]["content"]})
    t2 = spec_to_task(s, task_id="t4", category="analysis_reasoning", route="persona", persona_id="p",
                      skill_ids=[], seed=0, meta={})
    assert leak_check(t2) is not None


def test_workers_keep_candidate_order(server, local_factory):
    url, _ = server
    acc, rej = generate_llm_tasks(PERSONAS[:2] * 2, [], None, {"base_url": url, "model": "scripted"}, n=4,
                                  factory=local_factory, workers=3, max_repairs=1)
    assert [t.persona_id for t in acc] == ["case-good", "case-repair", "case-good", "case-repair"], rej
    assert len({t.task_id for t in acc}) == 4


def test_prose_reply_is_a_schema_rejection(server, local_factory):
    """A reply that is not the JSON the schema asks for is the model's failure (gate `schema`), not an endpoint
    error (`llm_error` is kept for endpoints that did not answer)."""
    url, _ = server
    prose = [{"persona_id": "case-prose", "name": "case-prose", "role": "analyst", "domain": "retail"}]
    acc, rej = generate_llm_tasks(prose, [], None, {"base_url": url, "model": "scripted"}, n=1,
                                  factory=local_factory)
    assert not acc and rej[0]["reason"] == "schema" and "not a JSON object" in rej[0]["detail"]
