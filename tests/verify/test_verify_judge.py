"""OpenAIJudge against a real (in-test) OpenAI-compatible HTTP server: prompt, temperature 0, reply
validation (nonce, rules, scale), retries with backoff, key from the environment and redacted from errors.
The judge protocol against hostile material: tests/verify/test_judge_protocol.py."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from test_verify_runtime import TmpSandbox  # tests/ is on sys.path (pytest prepend import mode)

from clawgym.tasks import File, RubricRule, Task, Verifier
from clawgym.verify import OfflineJudge, OpenAIJudge, make_judge, verify_task
from clawgym.verify.judge import JudgeError, JudgeUnavailable, RubricContext, RuleInput, parse_judge_reply

SECRET = "sk-test-SECRET-0123456789"


def nonce_of(body: dict) -> str:
    """The request's nonce, as the judge is told it in the system prompt."""
    return re.search(r'"nonce": "([0-9a-f]{32})"', body["messages"][0]["content"]).group(1)


class FakeOpenAI:
    """Replies with the queued (status, content) pairs in order; records every request. `content` may be a
    function of the request body (to answer with the request's nonce)."""

    def __init__(self):
        self.queue: list[tuple[int, str]] = []
        self.requests: list[dict] = []
        fake = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
                status, content = fake.queue.pop(0) if fake.queue else (200, "{}")
                if callable(content):
                    content = content(body)
                if status == 200:
                    payload = {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                               "choices": [{"index": 0, "finish_reason": "stop",
                                            "message": {"role": "assistant", "content": content}}]}
                else:
                    payload = {"error": {"message": content, "type": "server_error"}}
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setenv("JUDGE_KEY", SECRET)
    f = FakeOpenAI()
    yield f
    f.close()


RULES = [RubricRule(name="clarity", file_path="out/report.md", scores={"0": "unclear", "0.5": "ok", "1": "clear"}),
         RubricRule(name="tone", file_path="out/report.md", scores={"0": "rude", "1": "polite"}),
         RubricRule(name="memo", file_path="out/memo.md", scores={"0": "no", "1": "yes"})]


def task() -> Task:
    return Task(task_id="j1", instruction="Write out/report.md about the sales.",
                files=[File(path="in.csv", content=b"a\n1\n")],
                verifier=Verifier(kind="grade", code="def grade(t, w):\n    return {'ok': True}\n", rubric=RULES))


def verdict(nonce, clarity=0.75, tone=1):
    return json.dumps({"nonce": nonce, "rule_scores": [
        {"name": "clarity", "file_path": "out/report.md", "score": clarity, "reason": "mostly clear"},
        {"name": "tone", "file_path": "out/report.md", "score": tone, "reason": "polite"}]})


def good_reply(clarity=0.75, tone=1):
    """A reply function: the judge's own verdict, carrying the request's nonce."""
    return lambda body: verdict(nonce_of(body), clarity, tone)


def test_judge_end_to_end_with_retries(fake):
    fake.queue = [(500, "overloaded"), (200, "I think it is great!"),
                  (200, lambda b: "```json\n" + verdict(nonce_of(b)) + "\n```")]
    j = OpenAIJudge(fake.url, "judge-m", api_key_env="JUDGE_KEY", backoff_s=0.01)
    assert SECRET not in repr(j)
    with TmpSandbox(task().files) as sb:
        sb.write_file("out/report.md", b"# Sales\nSales rose 10%.")
        r = verify_task(task(), sb, judge=j)
    assert len(fake.requests) == 3
    req = fake.requests[-1]
    assert req["path"] == "/v1/chat/completions" and req["auth"] == f"Bearer {SECRET}"
    body = req["body"]
    assert body["temperature"] == 0 and body["model"] == "judge-m"
    rf = body["response_format"]
    assert rf["type"] == "json_schema" and rf["json_schema"]["schema"]["properties"]["nonce"]["enum"] == [
        nonce_of(body)]
    assert len({nonce_of(q["body"]) for q in fake.requests}) == 1  # one nonce per judging, kept over retries
    user = body["messages"][-1]["content"]
    assert "Write out/report.md about the sales." in user and "Sales rose 10%." in user
    assert '"clarity"' in user and '"memo"' not in user  # the missing-file rule never reaches the judge
    assert r.judge == "openai:judge-m" and r.error is None
    assert [x["score"] for x in r.rule_scores] == [0.75, 1.0, 0.0]
    assert r.rule_scores[2]["reason"] == "missing file"
    assert r.rubric_score == pytest.approx((0.75 + 1 + 0) / 3)
    assert r.score == pytest.approx(0.7 * 1.0 + 0.3 * r.rubric_score)
    assert SECRET not in json.dumps(r.to_dict())


def test_judge_gives_up_and_redacts_key(fake):
    fake.queue = [(401, f"bad key {SECRET}")] * 3
    j = OpenAIJudge(fake.url, "m", api_key_env="JUDGE_KEY", max_retries=2, backoff_s=0.01)
    with TmpSandbox(task().files) as sb:
        sb.write_file("out/report.md", b"text")
        with pytest.raises(JudgeUnavailable) as ei:  # never a rubric score of 0 for the agent
            verify_task(task(), sb, judge=j)
    assert len(fake.requests) == 3
    msg = str(ei.value)
    assert "failed after 3 attempts" in msg and SECRET not in msg and "***" in msg


N = "ab" * 16


@pytest.mark.parametrize("reply,needle", [
    ("no json here", "not one JSON object"),
    (f'{{"nonce": "{N}", "rule_scores": [{{"name": "clarity", "score": 0.6}}, {{"name": "tone", "score": 1}}]}}',
     "not on the scale"),
    (f'{{"nonce": "{N}", "rule_scores": [{{"name": "clarity", "score": 1}}, {{"name": "clarity", "score": 1}}]}}',
     "no score for rule 'tone'"),
    (f'{{"nonce": "{N}", "rule_scores": [{{"name": "clarity", "score": 1}}]}}', "1 rules, 2 were asked"),
    (f'{{"nonce": "{N}", "scores": []}}', "rule_scores"),
    (f'{{"nonce": "{N}", "rule_scores": [{{"name": "clarity", "score": "high"}}, {{"name": "tone", "score": 1}}]}}',
     "not a number"),
    ('{"rule_scores": [{"name": "clarity", "score": 1}, {"name": "tone", "score": 1}]}', "nonce"),
])
def test_reply_validation(reply, needle):
    items = [RuleInput(rule=RULES[0], content="x"), RuleInput(rule=RULES[1], content="x")]
    with pytest.raises(JudgeError, match=needle):
        parse_judge_reply(reply, items, N)


def test_make_judge_from_env(fake, monkeypatch):
    monkeypatch.setenv("CLAWGYM_JUDGE_BASE_URL", fake.url)
    monkeypatch.setenv("CLAWGYM_JUDGE_MODEL", "envm")
    monkeypatch.setenv("CLAWGYM_JUDGE_API_KEY_ENV", "JUDGE_KEY")
    assert isinstance(make_judge("auto"), OfflineJudge)  # the library never reads the environment itself
    from clawgym_assets.defs.rollouts.resources import JudgeResource

    res = JudgeResource.from_env()  # the resource does (kind from CLAWGYM_JUDGE; "auto" here)
    assert (res.base_url, res.model, res.api_key_env) == (fake.url, "envm", "JUDGE_KEY")
    j = JudgeResource(kind="auto", base_url=res.base_url, model=res.model, api_key_env=res.api_key_env).judge()
    assert isinstance(j, OpenAIJudge) and j.name == "openai:envm"
    assert make_judge("auto", {"base_url": fake.url, "model": "envm"}).name == "openai:envm"
    fake.queue = [(200, good_reply(0.5, 0))]
    out = j.score_rules(RubricContext(task_id="t", instruction="i"),
                        [RuleInput(rule=RULES[0], content="a"), RuleInput(rule=RULES[1], content="b")])
    assert [o["score"] for o in out] == [0.5, 0.0]
    d = make_judge({"base_url": fake.url, "model": "dm", "api_key_env": "JUDGE_KEY"})
    assert d.name == "openai:dm"
