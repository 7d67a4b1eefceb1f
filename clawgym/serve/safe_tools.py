"""Tool calls the model wrote badly are answered as text, not as a server error (a `transformers serve` patch)."""

from __future__ import annotations

from clawgym.serve.compat import require_transformers

TRANSFORMERS_VERSION = "5.24.0"  # the transformers release whose private code this module patches (see compat)

# ---- tool calls the model wrote badly: text, not a server error --------------------------------------------------
# transformers serve parses the model's `<tool_call>{…}</tool_call>` regions with the tokenizer's response template
# (transformers.utils.chat_parsing). When the model writes a region that is not valid JSON, `content_parsers._json`
# raises ValueError("json parser could not parse region as JSON") out of `ResponseParser._close_current`; valid JSON
# without "name"/"arguments" (or not an object) raises KeyError/TypeError in `cli.serving.utils._normalize_tool_call`.
# Non-streaming, both escape `parse_assistant_message` in `ChatCompletionHandler._non_streaming` and the request
# fails with HTTP 500; streaming, they escape `ResponseParser.feed` inside `CBStreamer.put` / `DirectStreamer.put`
# and the stream ends in an `{"error": …}` event. A client then retries the same greedy request and gives up: the
# model's own mistake became an endpoint failure (excluded as `infra` instead of scored). OpenAI-compatible servers
# (vLLM's tool parsers) answer such output as plain text instead, and so do these wrappers: non-streaming, the
# message is the generated text (special tokens skipped) as `content` with no `tool_calls`; streaming, tool calls
# are held until the stream ends, and when any region failed the text not yet sent goes out as `content` and the
# held calls are dropped. Installed in the server process by the launcher (`--safe-tool-parsing`).


def _valid_tool_call(value) -> bool:
    from transformers.cli.serving.utils import _normalize_tool_call

    try:
        tc = _normalize_tool_call(value)
    except Exception:  # noqa: BLE001 - KeyError/TypeError/ValueError: the model's JSON has the wrong shape
        return False
    return isinstance(tc.name, str) and bool(tc.name.strip()) and isinstance(tc.arguments, str)


class SafeResponseParser:
    """Wraps a `ResponseParser` for a streamed generation (`feed` / `finalize` / `initial_events`) so that no
    badly written tool call raises: see above."""

    def __init__(self, parser, special_tokens=()):
        self._parser = parser
        self._special = sorted({t for t in special_tokens if t}, key=len, reverse=True)
        self._raw: list[str] = []  # every generated chunk fed
        self._sent: list[str] = []  # content text passed on from generated chunks
        self._calls: list[dict] = []  # closed, valid tool-call regions, held until finalize
        self.failure: str | None = None
        self.initial_events = self._pass(parser.initial_events, generated=False)

    def _fail(self, why) -> None:
        if self.failure is None:
            self.failure = f"{type(why).__name__}: {why}" if isinstance(why, BaseException) else str(why)

    def _pass(self, events, generated: bool = True) -> list[dict]:
        out = []
        for ev in events:
            if ev.get("type") == "region_close" and ev.get("field") == "tool_calls":
                if not _valid_tool_call(ev.get("value")):
                    self._fail(f"tool call with the wrong shape: {str(ev.get('value'))[:200]}")
                    break
                self._calls.append(ev)
                continue
            if (generated and ev.get("type") == "region_chunk" and ev.get("field") == "content"
                    and not ev.get("dirty") and ev.get("text")):
                self._sent.append(ev["text"])
            out.append(ev)
        return out

    def feed(self, text: str) -> list[dict]:
        self._raw.append(text or "")
        if self.failure is not None:
            return []
        try:
            events = self._parser.feed(text)
        except Exception as e:  # noqa: BLE001 - the model's text, not the server, is wrong
            self._fail(e)
            return []
        return self._pass(events)

    def finalize(self) -> tuple[dict, list[dict]]:
        msg: dict = {}
        out: list[dict] = []
        if self.failure is None:
            try:
                msg, events = self._parser.finalize()
            except Exception as e:  # noqa: BLE001 - e.g. a tool call cut by max_tokens
                self._fail(e)
            else:
                out = self._pass(events)
        if self.failure is None:
            return msg, out + self._calls
        text = "".join(self._raw)
        for t in self._special:
            text = text.replace(t, "")
        sent = "".join(self._sent)
        at = 0 if text.startswith(sent) else text.find(sent) if sent else 0
        rest = text[at + len(sent):] if at >= 0 else text
        tail = [{"type": "region_chunk", "field": "content", "text": rest}] if rest else []
        return {"role": "assistant", "content": sent + rest}, out + tail


def _safe_parse_assistant_message(stock):
    def parse_assistant_message(*args, **kwargs):
        cleaned = kwargs.get("cleaned_content", args[4] if len(args) > 4 else "")
        try:
            content, reasoning, calls = stock(*args, **kwargs)
        except Exception:  # noqa: BLE001 - see above: the model's tool call does not parse
            return cleaned, None, None
        if calls and not all(isinstance(c.name, str) and c.name.strip() and isinstance(c.arguments, str)
                             for c in calls):
            return cleaned, None, None
        return content, reasoning, calls

    parse_assistant_message._clawgym_stock = stock
    return parse_assistant_message


def _safe_build_response_parser(stock):
    def build_response_parser(processor, *args, **kwargs):
        parser = stock(processor, *args, **kwargs)
        if parser is None:
            return None
        tok = getattr(processor, "tokenizer", processor)
        return SafeResponseParser(parser, getattr(tok, "all_special_tokens", ()) or ())

    build_response_parser._clawgym_stock = stock
    return build_response_parser


def _serving_modules():
    from transformers.cli.serving import chat_completion, response

    return chat_completion, response


def install_safe_tool_parsing() -> None:
    """Answer badly written tool calls as text in this process's `transformers serve` handlers (see above)."""
    require_transformers(__name__, TRANSFORMERS_VERSION)
    for mod in _serving_modules():
        if not hasattr(mod.parse_assistant_message, "_clawgym_stock"):
            mod.parse_assistant_message = _safe_parse_assistant_message(mod.parse_assistant_message)
        if not hasattr(mod.build_response_parser, "_clawgym_stock"):
            mod.build_response_parser = _safe_build_response_parser(mod.build_response_parser)


def uninstall_safe_tool_parsing() -> None:
    """Undo `install_safe_tool_parsing` (tests)."""
    for mod in _serving_modules():
        for name in ("parse_assistant_message", "build_response_parser"):
            stock = getattr(getattr(mod, name), "_clawgym_stock", None)
            if stock is not None:
                setattr(mod, name, stock)


