"""Structured output by constrained decoding (xgrammar): ``response_format`` and ``tool_choice``.

A chat-completions request may constrain what the model can write, as on vLLM / SGLang (which use the same
library, xgrammar, for it):

  ``"response_format": {"type": "json_object"}``                 -> the completion is one JSON object
  ``"response_format": {"type": "json_schema", "json_schema": {"name": ..., "schema": {...}}}``
                                                                  -> one JSON value valid under ``schema``
  ``"tool_choice": "required"``                                   -> one tool call, to one of ``tools``, whose
                                                                     arguments are valid under its ``parameters``
  ``"tool_choice": {"type": "function", "function": {"name": N}}`` -> one tool call to N, likewise
  (``"auto"`` / ``"none"`` / absent, ``"response_format": {"type": "text"}``: no constraint)

A tool call is written in the format of the model's chat template and response parser, the Hermes / Qwen2.5
one our base model and every checkpoint trained from it carry: ``<tool_call>\\n{"name": N, "arguments": {...}}
\\n</tool_call>``, so `transformers serve`'s own parser turns it into OpenAI ``tool_calls`` (finish reason
``tool_calls``). JSON is written compactly (``", "`` / ``": "``, no free whitespace: a small model cannot pad
forever). When the grammar is complete only the end-of-turn token may follow.

How: each sampling step, the tokens a constrained request may take next are a bitmask over the vocabulary
(xgrammar's `GrammarMatcher`, fed the tokens the request has generated so far); logits outside it become -inf
before sampling, so the output is valid by construction (unless ``max_tokens`` cuts it: finish reason
``length``). With continuous batching (the default), `constrained_sample` wraps CB's `ModelRunner._sample`:
the constrained requests of a step get their rows masked, the others are untouched, so constrained and free
requests batch together. Without it, the request's ``model.generate`` gets a `GrammarLogitsProcessor`.
Streaming and non-streaming requests are constrained alike. Compiled grammars are cached per tokenizer and
spec; compiling a JSON schema for the 49k-token SmolLM2 vocabulary takes ~20 ms, the tokenizer's table 0.5 s
once per server.

Bad input is answered 400 with the field named (``response_format.json_schema.schema: ...``,
``tool_choice: ...``). Installed in the server process by the launcher (``--structured``).
"""

from __future__ import annotations

import contextvars
import json
import logging
import threading
from collections import OrderedDict

from clawgym.serve.compat import require_transformers

TRANSFORMERS_VERSION = "5.24.0"  # the transformers release whose private code this module patches (see compat)

log = logging.getLogger(__name__)

TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>\n", "\n</tool_call>"
JSON_SEPARATORS = (", ", ": ")

_SPEC: contextvars.ContextVar = contextvars.ContextVar("clawgym_structured_spec", default=None)
CONSTRAINTS: dict = {}  # CB request id -> Constraint (read by the CB loop's thread, written by the event loop)


class StructuredRequestError(ValueError):
    """A request's response_format / tool_choice cannot be honoured; `field` names the request field."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


# ---- the request: which grammar --------------------------------------------------------------------------------

def _tool_functions(tools) -> list[dict]:
    if not isinstance(tools, list) or not tools:
        raise StructuredRequestError("tools", "tool_choice 'required' or a named function needs a non-empty tools list")
    out = []
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(t, dict) or t.get("type", "function") != "function" or not isinstance(fn, dict):
            raise StructuredRequestError(f"tools[{i}]", "not a {'type': 'function', 'function': {...}} tool")
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise StructuredRequestError(f"tools[{i}].function.name", "missing or not a string")
        params = fn.get("parameters")
        if params is None:
            params = {"type": "object"}
        if not isinstance(params, dict):
            raise StructuredRequestError(f"tools[{i}].function.parameters", "not a JSON schema object")
        out.append({"name": name, "parameters": params})
    return out


def request_spec(body: dict) -> tuple[str, str] | None:
    """The grammar a chat-completions body asks for, as (kind, canonical JSON payload), or None; raises
    `StructuredRequestError` on a malformed or unsupported request. Kinds: ``json_object``, ``json_schema``,
    ``tool_call``."""
    rf, tc = body.get("response_format"), body.get("tool_choice")
    spec = None
    if rf is not None:
        if not isinstance(rf, dict) or not isinstance(rf.get("type"), str):
            raise StructuredRequestError("response_format", "must be an object with a 'type'")
        kind = rf["type"]
        if kind == "json_object":
            spec = ("json_object", "")
        elif kind == "json_schema":
            js = rf.get("json_schema")
            if not isinstance(js, dict):
                raise StructuredRequestError("response_format.json_schema", "missing or not an object")
            schema = js.get("schema")
            if not isinstance(schema, (dict, bool)):
                raise StructuredRequestError("response_format.json_schema.schema", "missing or not a JSON schema")
            spec = ("json_schema", json.dumps(schema, sort_keys=True))
        elif kind != "text":
            raise StructuredRequestError("response_format.type",
                                         f"{kind!r} is not one of 'text', 'json_object', 'json_schema'")
    if tc is None or tc in ("auto", "none"):
        return spec
    if tc == "required":
        fns = _tool_functions(body.get("tools"))
    elif isinstance(tc, dict) and tc.get("type") == "function" and isinstance(tc.get("function"), dict):
        name = tc["function"].get("name")
        fns = [f for f in _tool_functions(body.get("tools")) if f["name"] == name]
        if not fns:
            raise StructuredRequestError("tool_choice.function.name", f"{name!r} is not one of the request's tools")
    else:
        raise StructuredRequestError("tool_choice", "must be 'auto', 'none', 'required' or "
                                                    "{'type': 'function', 'function': {'name': ...}}")
    if spec is not None:
        raise StructuredRequestError("tool_choice", "a forced tool call and a response_format cannot both apply")
    return ("tool_call", json.dumps(fns, sort_keys=True))


def build_grammar(kind: str, payload: str):
    """The xgrammar `Grammar` of a spec from `request_spec`."""
    import xgrammar as xgr

    field = {"json_schema": "response_format.json_schema.schema", "tool_call": "tools"}.get(kind, "response_format")
    try:
        if kind == "json_object":
            return xgr.Grammar.from_json_schema({"type": "object"}, strict_mode=False, any_whitespace=False,
                                                separators=JSON_SEPARATORS)
        if kind == "json_schema":
            return xgr.Grammar.from_json_schema(payload, any_whitespace=False, separators=JSON_SEPARATORS)
        if kind == "tool_call":
            calls = [{"type": "object", "properties": {"name": {"const": f["name"]}, "arguments": f["parameters"]},
                      "required": ["name", "arguments"]} for f in json.loads(payload)]
            body = xgr.Grammar.from_json_schema(calls[0] if len(calls) == 1 else {"anyOf": calls},
                                                any_whitespace=False, separators=JSON_SEPARATORS)
            return xgr.Grammar.concat(xgr.Grammar.from_ebnf(f"root ::= {json.dumps(TOOL_CALL_OPEN)}"), body,
                                      xgr.Grammar.from_ebnf(f"root ::= {json.dumps(TOOL_CALL_CLOSE)}"))
    except Exception as e:  # noqa: BLE001 - xgrammar's parse / schema errors: the request's schema is at fault
        raise StructuredRequestError(field, f"cannot be compiled to a grammar: {e}") from e
    raise StructuredRequestError("response_format", f"unknown grammar kind {kind!r}")


# ---- compiling, per tokenizer -----------------------------------------------------------------------------------

_COMPILERS: dict = {}
_COMPILED: OrderedDict = OrderedDict()
_LOCK = threading.Lock()
_MAX_COMPILED = 64


def vocab_size_of(model) -> int:
    """The number of logits the model writes per position (can exceed the tokenizer's vocabulary)."""
    out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if out is not None and getattr(out, "weight", None) is not None:
        return int(out.weight.shape[0])
    return int(model.config.get_text_config().vocab_size)


def _stop_ids(gen_config, tokenizer) -> list[int]:
    eos = getattr(gen_config, "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    return sorted({int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos]) if e is not None})


def compiled_grammar(spec: tuple[str, str], tokenizer, vocab_size: int, stop_ids: list[int]):
    """The compiled grammar of `spec` for this tokenizer (cached)."""
    import xgrammar as xgr

    tkey = (id(tokenizer), vocab_size, tuple(stop_ids))
    with _LOCK:
        comp = _COMPILERS.get(tkey)
        if comp is None:
            info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=stop_ids)
            comp = _COMPILERS[tkey] = (xgr.GrammarCompiler(info, cache_enabled=False), tokenizer)
        key = (tkey, spec)
        hit = _COMPILED.get(key)
        if hit is not None:
            _COMPILED.move_to_end(key)
            return hit
    cg = comp[0].compile_grammar(build_grammar(*spec))
    with _LOCK:
        _COMPILED[key] = cg
        while len(_COMPILED) > _MAX_COMPILED:
            _COMPILED.popitem(last=False)
    return cg


class Constraint:
    """One request's grammar state: a matcher fed the request's generated tokens, lazily (`sync`)."""

    def __init__(self, compiled, vocab_size: int, request_id: str = ""):
        import xgrammar as xgr

        self.matcher = xgr.GrammarMatcher(compiled)
        self.vocab_size = vocab_size
        self.request_id = request_id
        self.fed = 0
        self.failed: str | None = None

    def sync(self, generated) -> None:
        """Feed the matcher the tokens generated since the last call."""
        if self.failed is not None or len(generated) <= self.fed:
            return
        for t in list(generated[self.fed:]):
            if self.matcher.is_terminated():
                break
            if not self.matcher.accept_token(int(t)):
                self.failed = f"token {int(t)} at position {self.fed} is outside the grammar"
                log.error("structured output of %s: %s; unconstrained from here", self.request_id, self.failed)
                break
            self.fed += 1
        self.fed = len(generated) if self.failed is None else self.fed

    def fill(self, bitmask, row: int) -> bool:
        """Write this request's allowed next tokens into `bitmask[row]`; False when it no longer constrains."""
        if self.failed is not None or self.matcher.is_terminated():
            return False
        self.matcher.fill_next_token_bitmask(bitmask, row)
        return True


def mask_rows(scores2d, rows: list[tuple[int, Constraint]]) -> None:
    """Set to -inf, in place, every logit of `scores2d` [rows, vocab] outside its row's constraint."""
    import xgrammar as xgr

    if not rows:
        return
    vocab = scores2d.shape[-1]
    bitmask = xgr.allocate_token_bitmask(scores2d.shape[0], vocab)
    used = [row for row, c in rows if c.fill(bitmask, row)]
    if used:
        xgr.apply_token_bitmask_inplace(scores2d, bitmask.to(scores2d.device), vocab_size=vocab, indices=used)


# ---- continuous batching: masked rows inside the CB loop ----------------------------------------------------------

def _constrained_sample(stock):
    def _sample(self, scores, output_ids):
        if CONSTRAINTS:
            io = self.inputs_and_outputs
            rows, row = [], 0
            for fs in getattr(io, "requests_in_batch", ()):
                if not fs.has_new_token:
                    continue
                c = CONSTRAINTS.get(fs.state.request_id)
                if c is not None:
                    c.sync(fs.state.generated_tokens)
                    rows.append((row, c))
                row += 1
            if rows:
                mask_rows(scores[0], rows)
        return stock(self, scores, output_ids)

    _sample._clawgym_stock = stock
    return _sample


def _cb_config_sync(stock):
    def __init__(self, cb_config=None):
        from transformers import ContinuousBatchingConfig

        cb_config = cb_config if cb_config is not None else ContinuousBatchingConfig()
        # the mask needs each request's previous token before the next step's sampling: no asynchronous batching
        # (it carries tokens over on the device) and no CUDA graphs (the mask is Python between forward and sample)
        cb_config.use_async_batching = False
        cb_config.use_cuda_graph = False
        stock(self, cb_config)

    __init__._clawgym_stock = stock
    return __init__


# ---- sequential generation: a logits processor --------------------------------------------------------------------

def grammar_logits_processor(constraint: Constraint, prompt_len: int):
    """A `LogitsProcessor` for `model.generate` (batch of one) masking by `constraint`."""
    from transformers import LogitsProcessor

    class GrammarLogitsProcessor(LogitsProcessor):
        def __call__(self, input_ids, scores):
            constraint.sync(input_ids[0, prompt_len:].tolist())
            mask_rows(scores, [(0, constraint)])
            return scores

    return GrammarLogitsProcessor()


# ---- the handlers -------------------------------------------------------------------------------------------------

def _constraint_for(model, processor, gen_config, request_id: str) -> Constraint:
    tok = getattr(processor, "tokenizer", processor)
    vocab = vocab_size_of(model)
    return Constraint(compiled_grammar(_SPEC.get(), tok, vocab, _stop_ids(gen_config, tok)), vocab, request_id)


def _with_processor(inputs, constraint: Constraint):
    from transformers import LogitsProcessorList

    ids = inputs["input_ids"]
    prompt_len = ids.shape[-1] if hasattr(ids, "shape") else len(ids)
    return {**inputs, "logits_processor": LogitsProcessorList([grammar_logits_processor(constraint, prompt_len)])}


def _wrap_streaming(stock, sequential: bool):
    def generate_streaming(self, model, processor, inputs, gen_config, request_id, *args, **kwargs):
        if _SPEC.get() is None:
            return stock(self, model, processor, inputs, gen_config, request_id, *args, **kwargs)
        c = _constraint_for(model, processor, gen_config, request_id)
        if sequential:
            return stock(self, model, processor, _with_processor(inputs, c), gen_config, request_id, *args, **kwargs)
        CONSTRAINTS[request_id] = c  # removed when the response ends (`_wrap_handle_request`)
        return stock(self, model, processor, inputs, gen_config, request_id, *args, **kwargs)

    generate_streaming._clawgym_stock = stock
    return generate_streaming


def _wrap_non_streaming(stock, sequential: bool):
    async def generate_non_streaming(self, model, processor, inputs, gen_config, request_id, *args, **kwargs):
        if _SPEC.get() is None:
            return await stock(self, model, processor, inputs, gen_config, request_id, *args, **kwargs)
        c = _constraint_for(model, processor, gen_config, request_id)
        if sequential:
            return await stock(self, model, processor, _with_processor(inputs, c), gen_config, request_id,
                               *args, **kwargs)
        CONSTRAINTS[request_id] = c
        try:
            return await stock(self, model, processor, inputs, gen_config, request_id, *args, **kwargs)
        finally:
            CONSTRAINTS.pop(request_id, None)

    generate_non_streaming._clawgym_stock = stock
    return generate_non_streaming


def _wrap_handle_request(stock):
    async def handle_request(self, body, request_id):
        from fastapi import HTTPException
        from fastapi.responses import StreamingResponse

        try:
            spec = request_spec(body)
        except StructuredRequestError as e:
            raise HTTPException(status_code=400, detail=str(e)) from e
        body.pop("response_format", None)
        if body.get("tool_choice") is not None:
            body.pop("tool_choice")
        if spec is not None:
            try:  # compile here, so a schema xgrammar cannot take is the request's 400, not a failed generation
                build_grammar(*spec)
            except StructuredRequestError as e:
                raise HTTPException(status_code=400, detail=str(e)) from e
        token = _SPEC.set(spec)
        try:
            resp = await stock(self, body, request_id)
        except BaseException:
            CONSTRAINTS.pop(request_id, None)
            raise
        finally:
            _SPEC.reset(token)
        if spec is not None and isinstance(resp, StreamingResponse):
            inner = resp.body_iterator

            async def body_iterator():
                try:
                    async for chunk in inner:
                        yield chunk
                finally:
                    CONSTRAINTS.pop(request_id, None)

            resp.body_iterator = body_iterator()
        return resp

    handle_request._clawgym_stock = stock
    return handle_request


def _targets():
    from transformers.cli.serving import utils
    from transformers.cli.serving.chat_completion import ChatCompletionHandler
    from transformers.generation.continuous_batching.model_runner import ModelRunner

    return utils, ChatCompletionHandler, ModelRunner


def install_structured_output() -> None:
    """Honour response_format / tool_choice in this process's `transformers serve` (see above)."""
    require_transformers(__name__, TRANSFORMERS_VERSION)
    import xgrammar  # noqa: F401 - fail at launch, not at the first constrained request

    utils, handler, runner = _targets()
    if hasattr(handler.handle_request, "_clawgym_structured"):
        return
    wrapped = _wrap_handle_request(handler.handle_request)
    wrapped._clawgym_structured = True
    handler.handle_request = wrapped
    for mgr, sequential in ((utils.GenerateManager, True), (utils.CBGenerateManager, False)):
        mgr.generate_streaming = _wrap_streaming(mgr.generate_streaming, sequential)
        mgr.generate_non_streaming = _wrap_non_streaming(mgr.generate_non_streaming, sequential)
    utils.CBGenerateManager.__init__ = _cb_config_sync(utils.CBGenerateManager.__init__)
    runner._sample = _constrained_sample(runner._sample)
