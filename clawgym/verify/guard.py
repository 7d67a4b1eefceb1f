"""Verification the agent cannot reach: what happens between the end of the agent's phase and the verifier.

The agent under test is an adversary that writes files, leaves processes and crafts output. Before any
verifier code runs in its sandbox, `prepare_for_verification` makes sure that nothing the agent left can
execute inside the verifier or change what the verifier reads as configuration:

1. **No agent process, no IPC** — `Sandbox.quiesce()` kills every process of the agent's phase (daemonised,
   setsid, stopped ones included) and removes SysV IPC objects, POSIX mqueues, /dev/shm files and keyrings.
   From here on nothing of the agent runs: it can act only through files.
2. **Only the workspace survives** — `Sandbox.scrub()` (from the host, never following symlinks) empties /tmp
   and $HOME except the path down to the workspace: user site-packages, `usercustomize.py`, `.pth`
   files, `~/.gitconfig`, shell rc files and anything a workspace symlink could point at are gone. It also
   reports every workspace entry that is not a plain file or directory.
3. **Harness-control files the agent added or changed are restored or removed** (`neutralize_controls`):
   `conftest.py`, `pytest.ini`, `tox.ini`, the pytest sections of `setup.cfg`/`pyproject.toml`,
   `sitecustomize.py`/`usercustomize.py`, `*.pth`, `*.pyc`, git hooks, git's `commondir`/gitdir pointers,
   and every git config is cut down to an allow-list of inert keys (no fsmonitor, hooksPath, pager,
   filters, diff/merge drivers, includes, ...). Symlinks with a control name are removed. Files the task
   itself shipped unchanged are never touched, so imported tasks score exactly as before.
4. **A verifier environment the agent never wrote** (`verifier_env`): a fresh $HOME, a clean PATH, no user
   site (`PYTHONNOUSERSITE`), no byte code written (agent-planted `__pycache__`/`.pyc` files are removed in
   step 3; a PYTHONPYCACHEPREFIX would also hide the interpreter's own cached stdlib: 2.4x slower), git without
   system/global config and with hooks and fsmonitor forced off, and an import guard on PYTHONPATH
   (`clawgym/sandbox/guest/verify/sitecustomize.py`) that resolves every stdlib / installed top-level module from the
   interpreter's own directories before the workspace (a planted `json.py` or `pytest.py` is never imported).
5. **Sealed verifier files** — `reward/` and the guard directory are written by the host after step 1 and
   then sealed (`Sandbox.seal`: owned by root, read-only for the sandbox user), so nothing running during
   verification can append to the running `reward.sh` or swap the guard.
6. **The result channel** (runtime.py): `grade` results travel on a private descriptor with a per-run
   nonce; reward.sh's score is the last stdout line of a process tree in which no agent process is left.
   Every score is clamped to [0, 1]; a non-finite one is 0 with an error.
"""

from __future__ import annotations

import base64
import re
import secrets
import threading
from dataclasses import dataclass, field

from clawgym.sandbox.base import Sandbox, SandboxError
from clawgym.sandbox.guest import VERIFY_SIDE

SIDE = VERIFY_SIDE  # the files written into the room (clawgym/sandbox/guest/verify/)
CLEAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# basenames that configure a test runner or the interpreter when they sit in the workspace
CONTROL_NAMES = {"conftest.py", "pytest.ini", "tox.ini", "sitecustomize.py", "usercustomize.py", ".pytest.ini",
                 "noxfile.py", ".pdbrc", ".pythonrc", ".pythonrc.py"}
CONTROL_SUFFIXES = (".pth", ".pyc", ".pyo")
SECTION_FILES = ("setup.cfg", "pyproject.toml")  # files whose pytest part is read as pytest reads it
# git config keys kept when the agent changed a repository's config: inert settings only
GIT_ALLOWED = re.compile(
    r"^(core\.(repositoryformatversion|filemode|bare|logallrefupdates|ignorecase|precomposeunicode|symlinks|"
    r"autocrlf|eol|safecrlf|quotepath|abbrev)|remote\.[^=]*\.(url|fetch|pushurl|push|tagopt)|"
    r"branch\.[^=]*\.(remote|merge|rebase|description)|user\.(name|email)|init\.defaultbranch|"
    r"extensions\.(objectformat|worktreeconfig)|tag\.sort|commit\.(cleanup)|color\.[a-z.]*|i18n\.[a-z.]*)$",
    re.I)


class UnsafeWorkspace(RuntimeError):
    """A harness-control file the agent left could not be neutralised: the verifier must not run (the
    code check scores 0 with this error; the agent's doing, never infra)."""


@dataclass
class Prepared:
    """What preparation did: the verifier's environment, the actions taken (for the record) and odd entries."""

    env: dict[str, str]
    home: str
    guard_dir: str
    actions: list[dict] = field(default_factory=list)
    odd: list[list] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    shell: str = "bash"  # what runs reward.sh: the sealed execute-only bash on isolating backends


def _is_git_config(parts: list[str]) -> bool:
    return len(parts) >= 2 and parts[-1] in ("config", "config.worktree") and ".git" in parts[:-1]


def control_kind(path: str) -> str | None:
    """Why `path` (workspace-relative) controls a harness, or None. 'section' files are checked by content."""
    parts = path.split("/")
    base = parts[-1]
    if ".git" in parts[:-1]:
        i = parts.index(".git")
        rest = parts[i + 1:]
        if rest and rest[0] == "hooks":
            return "git hook"
        if _is_git_config(parts):
            return "git config"
        if base in ("commondir", "gitdir") or (rest and rest[0] in ("info",) and base == "attributes"):
            return "git pointer"
        return None
    if base == ".git":
        return "gitdir file"  # a `.git` file is a pointer to a repository elsewhere
    if base in CONTROL_NAMES or base.endswith(CONTROL_SUFFIXES):
        return "python/pytest control"
    if "__pycache__" in parts:
        return "byte code"
    if base in SECTION_FILES:
        return "section"
    return None


def sanitize_git_config(text: str) -> str:
    """Keep only allow-listed keys of a git config file (section headers kept when they keep a key)."""
    out: list[str] = []
    section = None
    pending_header: str | None = None
    cont = False
    for raw in text.splitlines():
        line = raw.strip()
        if cont:  # continuation of a dropped or multi-line value: always dropped
            cont = raw.rstrip().endswith("\\")
            continue
        if not line or line[0] in "#;":
            continue
        m = re.match(r'^\[\s*([A-Za-z0-9.-]+)(?:\s+"((?:[^"\\]|\\.)*)")?\s*\]\s*(.*)$', line)
        if m:
            name, sub = m.group(1).lower(), m.group(2)
            section = f"{name}.{sub}" if sub is not None else name
            pending_header = f'[{m.group(1)} "{sub}"]' if sub is not None else f"[{m.group(1)}]"
            line = m.group(3).strip()
            if not line or line[0] in "#;":
                continue
        if section is None:
            continue
        if raw.rstrip().endswith("\\"):
            cont = True
            continue
        km = re.match(r"^([A-Za-z][A-Za-z0-9-]*)\s*(=\s*(.*))?$", line)
        if not km:
            continue
        key = f"{section}.{km.group(1)}"
        if not GIT_ALLOWED.match(key):
            continue
        if pending_header is not None:
            out.append(pending_header)
            pending_header = None
        out.append(f"\t{km.group(1)} = {km.group(3) if km.group(2) is not None else 'true'}")
    return "\n".join(out) + ("\n" if out else "")


def _ini_header(line: str) -> str | None:
    """The section name of an ini header line, read leniently (any indentation, any spacing), else None."""
    t = line.strip()
    if not t.startswith("["):
        return None
    end = t.find("]")
    return t[1:end].strip().lower() if end > 0 else t[1:].strip().lower()


def _ini_pytest_sections(text: str) -> set[str]:
    """Sections of an ini file pytest could take for its own (read as iniconfig, pytest's parser, reads
    them, plus every header that merely mentions pytest)."""
    found = {h for h in (_ini_header(ln) for ln in text.splitlines()) if h is not None and "pytest" in h}
    try:
        import iniconfig

        found |= {n for n in iniconfig.IniConfig("setup.cfg", data=text).sections if "pytest" in n.lower()}
    except Exception:  # pytest cannot read it either: it then fails to start, which pays nothing
        pass
    return found


def _toml_pytest(text: str):
    """(parsed document, its `tool.pytest` value or None) -- TOML read as pytest reads it (tomllib), so every
    spelling (dotted keys, quoted keys, inline tables, spaces around dots) is the same key; (None, None) when
    it does not parse (pytest then fails to start)."""
    import tomllib

    try:
        doc = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, ValueError):
        return None, None
    tool = doc.get("tool")
    return doc, (tool.get("pytest") if isinstance(tool, dict) else None)


def strip_pytest_config(name: str, text: str, original: str | None) -> str | None:
    """`text` of an agent-written `setup.cfg` / `pyproject.toml` without any pytest configuration the task's
    own version (`original`, None when the agent added the file) did not have; None when nothing must change.
    pyproject.toml is parsed with tomllib and rewritten (tomli_w) without `tool.pytest` (the task's own
    `tool.pytest` value put back); setup.cfg loses every section whose header mentions pytest (the task's own
    pytest sections appended back). The result is parsed again: if pytest would still find configuration of
    the agent's, the file is replaced by the task's own version (or emptied)."""
    if name == "pyproject.toml":
        doc, mine = _toml_pytest(text)
        theirs = _toml_pytest(original)[1] if original is not None else None
        if doc is None or mine is None or mine == theirs:
            return None
        tool = dict(doc["tool"])
        tool.pop("pytest", None)
        if theirs is not None:
            tool["pytest"] = theirs
        doc = {**doc, "tool": tool} if tool else {k: v for k, v in doc.items() if k != "tool"}
        import tomli_w

        out = tomli_w.dumps(doc)
        if _toml_pytest(out)[1] != theirs:
            return original if original is not None else ""
        return out
    mine = _ini_pytest_sections(text)
    if not mine:
        return None
    if original is not None and text == original:
        return None
    lines, skip = [], False
    for line in text.splitlines(keepends=True):
        h = _ini_header(line)
        if h is not None:
            skip = "pytest" in h
        if not skip:
            lines.append(line)
    new = "".join(lines)
    if original is not None:  # keep the task's own pytest sections
        kept, keep = [], False
        for line in original.splitlines(keepends=True):
            h = _ini_header(line)
            if h is not None:
                keep = "pytest" in h
            if keep:
                kept.append(line)
        if kept:
            new += ("\n" if new and not new.endswith("\n") else "") + "".join(kept)
    theirs = _ini_pytest_sections(original) if original is not None else set()
    if not _ini_pytest_sections(new) <= theirs:
        return original if original is not None else ""
    return new


def neutralize_controls(task, sandbox: Sandbox, odd: list[list] | None = None) -> list[dict]:
    """Restore or remove harness-control files the agent added or changed (see module docstring)."""
    original = task.file_map()
    modes = {f.path: f.mode for f in task.files}
    actions: list[dict] = []
    for rel, kind, _target in odd or []:
        if rel.split("/")[0] == "reward":
            continue  # reward/ is replaced wholesale
        if control_kind(rel) is not None or rel.split("/")[-1] == ".git":
            try:
                sandbox.remove(rel)
            except SandboxError:
                raise
            except Exception as e:
                raise UnsafeWorkspace(f"{rel!r} could not be removed: {type(e).__name__}: {e}") from e
            actions.append({"path": rel, "action": "removed", "why": f"{kind} with a control name"})
    for rel in sandbox.list_files("."):
        try:
            _neutralize_one(rel, sandbox, original, modes, actions)
        except SandboxError:
            raise
        except Exception as e:
            raise UnsafeWorkspace(f"{rel!r} could not be neutralised: {type(e).__name__}: {e}") from e
    return actions


def _neutralize_one(rel: str, sandbox: Sandbox, original: dict, modes: dict, actions: list[dict]) -> None:
    kind = control_kind(rel)
    if kind is None or rel.split("/")[0] == "reward":
        return
    try:
        now = sandbox.read_file(rel)
    except (OSError, ValueError):
        now = None
    before = original.get(rel)
    if now is not None and before is not None and now == before:
        return  # shipped with the task, unchanged: trusted
    if kind == "section":
        name = rel.split("/")[-1]
        text = (now or b"").decode("utf-8", errors="surrogateescape")
        old = before.decode("utf-8", errors="surrogateescape") if before is not None else None
        new = strip_pytest_config(name, text, old)
        if new is None:
            return
        sandbox.write_file(rel, new.encode("utf-8", errors="surrogateescape"), modes.get(rel, 0o644))
        actions.append({"path": rel, "action": "pytest configuration removed", "why": kind})
    elif kind == "git config":
        text = (now or b"").decode("utf-8", errors="surrogateescape")
        clean = sanitize_git_config(text)
        if clean != text:
            sandbox.write_file(rel, clean.encode("utf-8", errors="surrogateescape"), 0o644)
            actions.append({"path": rel, "action": "sanitized", "why": kind})
    elif before is not None:
        sandbox.write_file(rel, before, modes.get(rel, 0o644))
        actions.append({"path": rel, "action": "restored", "why": kind})
    else:
        sandbox.remove(rel)
        actions.append({"path": rel, "action": "removed", "why": kind})


def verifier_env(home: str, guard_dir: str, workspace: str) -> dict[str, str]:
    """The whole environment of a verifier command (replaces the sandbox defaults that matter)."""
    git_cfg = [("core.hooksPath", "/dev/null"), ("core.fsmonitor", "false"), ("core.pager", "cat"),
               ("core.editor", "true"), ("core.sshCommand", "false"), ("core.askPass", ""),
               ("credential.helper", ""),
               # the clean room seals the workspace (another owner): git would refuse the repository as dubious
               ("safe.directory", workspace)]
    env = {"HOME": home, "PATH": CLEAN_PATH, "USER": "sandbox", "LOGNAME": "sandbox", "LANG": "C.UTF-8",
           "TMPDIR": "/tmp", "TERM": "dumb", "WORKSPACE": workspace, "SHELL": "/bin/bash",
           "PYTHONPATH": guard_dir, "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONSTARTUP": "", "PYTHONINSPECT": "", "BASH_ENV": "", "ENV": "", "CDPATH": "",
           "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_TERMINAL_PROMPT": "0",
           "GIT_PAGER": "cat", "PAGER": "cat", "GIT_EDITOR": "true", "EDITOR": "true", "VISUAL": "true",
           "GIT_EXTERNAL_DIFF": "", "GIT_ASKPASS": "", "SSH_ASKPASS": "", "NODE_OPTIONS": "",
           "NODE_PATH": "", "PERL5OPT": "", "PERL5LIB": "", "RUBYOPT": "", "LD_PRELOAD": "",
           "LD_LIBRARY_PATH": "", "PYTEST_ADDOPTS": "", "PYTEST_PLUGINS": "", "GIT_CONFIG_COUNT": str(len(git_cfg))}
    for i, (k, v) in enumerate(git_cfg):
        env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"] = k, v
    return env  # empty values override whatever the sandbox's defaults set (exec merges env over them)


GUARD_FILES = ("sitecustomize.py", "protected_modules.txt")
_BASH: dict[tuple, bytes] = {}
_BASH_LOCK = threading.Lock()


def sandbox_bash(sandbox: Sandbox) -> bytes:
    """The bytes of the sandbox's own /bin/bash, read once per process and image (through one exec: the host
    does not know where a backend's root file system lies) -- what the execute-only verifier shell is made of."""
    key = (type(sandbox).__name__, sandbox.config.image, sandbox.config.rootfs)
    with _BASH_LOCK:
        if key not in _BASH:
            r = sandbox.exec(["base64", "-w0", "/bin/bash"], timeout=60, max_output=16 << 20)
            if not r.ok or r.truncated:
                raise SandboxError(f"the sandbox's /bin/bash could not be read: rc {r.rc}: {r.stderr[-300:]}")
            _BASH[key] = base64.b64decode(r.stdout.strip())
        return _BASH[key]


def _isolating(sandbox) -> bool:
    """The backend's declared capability (Sandbox.isolating); objects that are no Sandbox promise nothing."""
    return isinstance(sandbox, Sandbox) and type(sandbox).isolating


def prepare_for_verification(task, sandbox: Sandbox, clean_room: bool = False) -> Prepared:
    """Steps 1-5 of the module docstring; raises SandboxError only when the sandbox itself fails,
    UnsafeWorkspace when a control file cannot be neutralised. `clean_room`: `sandbox` is a room no agent
    ever ran in, holding an export of the agent's workspace (clawgym.verify.runtime.verify_after_agent):
    there is nothing to stop and HOME and /tmp are fresh, so steps 1-2 are skipped. Backends without
    isolation (`local`, test doubles; `Sandbox.isolating` False) only get step 3: they promise nothing against
    a hostile agent."""
    odd: list[list] = []
    errors: list[str] = []
    if not _isolating(sandbox):
        actions = neutralize_controls(task, sandbox, odd)
        return Prepared(env={}, home="", guard_dir="", actions=actions)
    # the guard lives in a directory of its own, sealed as a whole (in sticky /tmp the sandbox user can
    # neither rename nor replace a root-owned entry); HOME is a separate, writable directory
    tag = secrets.token_hex(8)
    home, guard_dir = f"/tmp/.clawgym-home-{tag}", f"/tmp/.clawgym-verify-{tag}"
    if not clean_room:
        sandbox.quiesce()  # SandboxError from a backend that cannot
        try:
            odd = sandbox.scrub()  # from the host: no process in the sandbox, ~1 ms
        except NotImplementedError:
            raise SandboxError(f"{type(sandbox).__name__} cannot empty HOME and /tmp from the host "
                               "(no scrub())") from None
        except OSError as e:  # the agent replaced a directory on the way to the workspace, or pinned an entry
            raise UnsafeWorkspace(f"HOME and /tmp could not be emptied: {e}") from e
    actions = neutralize_controls(task, sandbox, odd)
    try:
        sandbox.write_file(f"{home}/.keep", b"", 0o644)
        for name in GUARD_FILES:
            sandbox.write_file(f"{guard_dir}/{name}", (SIDE / name).read_bytes(), 0o644)
        # an execute-only copy of the sandbox's own bash (sealed: root-owned, mode 0111): reward.sh runs in it, and
        # a process exec'd from a file its user cannot read is not dumpable -- agent code the check runs cannot
        # open /proc/<reward.sh>/fd (its stdout: the score line) or read its memory. Subshells inherit that.
        sandbox.write_file(f"{guard_dir}/bash", sandbox_bash(sandbox), 0o111)
        sandbox.seal(guard_dir)
    except SandboxError:
        raise
    except (OSError, ValueError) as e:  # e.g. the agent filled the sandbox's disk: its doing, fail closed
        raise UnsafeWorkspace(f"verifier files could not be written: {type(e).__name__}: {e}") from e
    return Prepared(env=verifier_env(home, guard_dir, sandbox.workspace), home=home, guard_dir=guard_dir,
                    actions=actions, odd=odd, errors=errors, shell=f"{guard_dir}/bash")


def seal_reward(sandbox: Sandbox, path: str) -> None:
    """Seal the reward files at `path` against the agent on isolating backends (a no-op on others)."""
    if _isolating(sandbox):
        sandbox.seal(path)


def seal_workspace(sandbox: Sandbox) -> None:
    """The whole workspace made read-only for the sandbox user from the host (Sandbox.seal: another owner, no write
    bits, the top entry immutable where the filesystem allows it), on isolating backends; a no-op elsewhere. The
    clean room does it before a grade() check runs: the agent's code a check runs (a child process of the grader,
    under the sandbox user's uid) can then change no file a later check reads, nor rename the tree they sit in."""
    if _isolating(sandbox):
        sandbox.seal(".")
        sandbox.lock_workspace_path()  # nor can it rename a parent away and build another workspace there


__all__ = ["seal_workspace", "prepare_for_verification", "neutralize_controls", "sanitize_git_config", "verifier_env",
           "control_kind", "Prepared", "seal_reward", "UnsafeWorkspace"]
