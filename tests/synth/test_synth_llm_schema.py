"""The LLM route's request schema is the schema gate's own (clawgym.synth.llm_route.TASK_SCHEMA / REVIEW_SCHEMA /
AUDIT_SCHEMA); for a small budget it is bounded (bounded_schema): the same schema plus maxLength / maxItems, so
every reply it admits the gate admits, and a reply at every bound fits max_tokens."""

import json
import os
from pathlib import Path

import jsonschema
import pytest

from clawgym.synth.llm_route import AUDIT_SCHEMA, REVIEW_SCHEMA, TASK_SCHEMA, bounded_schema

SCHEMAS = [("task_spec", TASK_SCHEMA), ("task_review", REVIEW_SCHEMA), ("task_audit", AUDIT_SCHEMA)]
BOUND_KEYS = ("maxLength", "minLength", "maxItems", "minItems")


def unbounded(schema):
    """`schema` without the bounds bounded_schema adds."""
    if isinstance(schema, dict):
        return {k: unbounded(v) for k, v in schema.items() if k not in BOUND_KEYS}
    if isinstance(schema, list):
        return [unbounded(v) for v in schema]
    return schema


def largest(schema):
    """The reply at every bound: each array at maxItems, each string at maxLength (of characters that need a JSON
    escape, the worst case), integers at their maximum."""
    t = schema["type"]
    if t == "object":
        return {k: largest(v) for k, v in schema["properties"].items()}
    if t == "array":
        return [largest(schema["items"]) for _ in range(schema["maxItems"])]
    if t == "string":
        return "\n" * schema["maxLength"]
    if t == "boolean":
        return False
    return schema.get("maximum", 0)


@pytest.mark.parametrize("name,schema", SCHEMAS)
@pytest.mark.parametrize("max_tokens", [384, 1024, 4096])
def test_bounded_is_the_gate_schema_plus_bounds_and_fits_the_budget(name, schema, max_tokens):
    b = bounded_schema(schema, max_tokens, name)
    assert unbounded(b) == schema  # one source of truth: nothing but bounds added
    big = largest(b)
    jsonschema.validate(big, b)
    jsonschema.validate(big, schema)  # what the bounded schema admits, the gate's schema admits
    # at 3 characters per token, the largest reply (every character escaped) fits the completion budget
    assert len(json.dumps(big, separators=(", ", ": "))) <= 3 * max_tokens
    # and the budget is used: twice the tokens allow longer strings
    b2 = bounded_schema(schema, 2 * max_tokens, name)
    assert len(json.dumps(largest(b2))) > len(json.dumps(big))


def test_task_spec_bounds_keep_the_gates_workable():
    b = bounded_schema(TASK_SCHEMA, 1024, "task_spec")["properties"]
    assert b["verifier_code"]["maxLength"] >= 400 and b["instruction"]["maxLength"] >= 200
    assert b["output_paths"]["minItems"] == 1 and b["reference_outputs"]["minItems"] == 1
    assert b["workspace_files"]["items"]["properties"]["path"]["maxLength"] >= 40


def test_too_small_a_budget_is_refused():
    with pytest.raises(ValueError, match="max_tokens 40"):
        bounded_schema(TASK_SCHEMA, 40, "task_spec")


def test_the_constrained_decoder_accepts_exactly_the_bounded_replies():
    """xgrammar (the embedded server's constrained decoder) holds the bounds: a string one character past
    maxLength, or one item past maxItems, cannot be decoded."""
    xgr = pytest.importorskip("xgrammar")
    from transformers import AutoTokenizer

    model = Path(os.environ.get("CLAWGYM_BASE_MODEL_DIR",
                                Path(__file__).resolve().parents[2] / "data" / "models" / "smollm2-135m-instruct"))
    if not (model / "config.json").exists():  # the embedded model, prepared once (idempotent)
        from clawgym.train.base_model import prepare_base_model

        prepare_base_model(model)
    tok = AutoTokenizer.from_pretrained(str(model))
    comp = xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(tok))
    b = bounded_schema(AUDIT_SCHEMA, 384, "task_audit")
    g = comp.compile_json_schema(json.dumps(b))
    n, k = b["properties"]["leaked_text"]["maxLength"], b["properties"]["factual_errors"]["maxItems"]

    def accepts(obj) -> bool:
        m = xgr.GrammarMatcher(g)
        return all(m.accept_token(t) for t in tok.encode(json.dumps(obj), add_special_tokens=False)) \
            and m.accept_token(tok.eos_token_id) and m.is_terminated()

    ok = {"pass": True, "factual_errors": ["e"] * k, "answer_leak": False, "leaked_text": "x" * n}
    assert accepts(ok)
    assert not accepts({**ok, "leaked_text": "x" * (n + 1)})
    assert not accepts({**ok, "factual_errors": ["e"] * (k + 1)})
