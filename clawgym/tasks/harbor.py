"""Harbor task folders <-> Task.

Harbor's task format (harbor-framework/harbor; Terminal-Bench 2, SkyRL and prime-rl read it):

    <task>/instruction.md          what the agent is told
    <task>/task.toml               limits ([agent] / [verifier] timeout_sec, [environment] cpus, memory_mb, ...),
                                   [metadata], [verifier] environment_mode, artifacts, [[verifier.collect]]
    <task>/environment/Dockerfile  the agent's container (its WORKDIR is the workspace), + its build context
    <task>/tests/test.sh           the verifier: writes /logs/verifier/reward.txt (a float) or reward.json
    <task>/solution/solve.sh       the reference solution (Harbor's `oracle` agent runs it)

Export (`clawgym.tasks.harbor_export`: `export_harbor_task`, `export_harbor_dataset`, a layer above the verifier whose
files it ships): any Task runs in Harbor unchanged.

- environment/Dockerfile is ``FROM clawgym-sandbox:latest`` (the offline sandbox image; `base_image=` for users
  with a registry), copies the workspace files (environment/workspace/) to the task's workspace path, which is
  its WORKDIR.
- tests/ holds our verifier with no network and no downloads: test.sh runs tests/clawgym_verify.py
  (stdlib only), which runs the task's reward/ folder (reward_dir tasks: tests/reward/) or our grade driver on
  tests/check_code.py (grade tasks) exactly as clawgym.verify.runtime does, and writes the score to
  /logs/verifier/reward.txt and the per-check detail to /logs/verifier/reward.json ({"reward": x, check: v}).
- The clean room travels with the task: ``[verifier] environment_mode = "separate"`` runs the verifier in a
  fresh container of the same environment; the agent's workspace is handed over as data by Harbor's own
  mechanism -- a ``[[verifier.collect]]`` hook tars the workspace in the agent's container, the tar is a task
  ``artifacts`` entry, Harbor re-materialises it at the same path in the verifier's container, and test.sh
  replaces the workspace with what the tar holds by clawgym's own export rules (tests/clawgym_export.py: a link
  resolved inside the workspace or dropped, special files dropped; no tar is an empty workspace) before verifying.
- solution/program.json (when the task has a program_reference): the program teacher's tool calls, read back on import.
- solution/solve.sh (when the task has a reference): replays the reference tool calls with the agent tools' own
  semantics (solution/toolcore.py is clawgym.agent.toolcore verbatim), as our `oracle` policy does.
- task.toml: [agent] timeout_sec = Task.timeout_s, [verifier] timeout_sec, [environment] cpus / memory_mb /
  storage_mb and network off, [metadata] with category, family, seed, split, route, difficulty and the task id.
  Rubric rules are not run in Harbor (no judge there by default): the task is exported code-only with the rubric
  kept in tests/rubric.json and marked in [metadata] (clawgym_rubric = "not scored in Harbor ...").

Import (`import_harbor_task`, `import_harbor_folder`): a Harbor task folder or a folder of them -> Tasks, read
through clawgym.tasks.reader (no symlinks, no hard links, size caps). Every part is read: instruction.md
and task.toml are required (a missing one, or a task.toml that does not parse, is a TaskError naming the file
and the field); environment/ (the Dockerfile and its build context), tests/, solution/ and any other file of the
folder are kept. The Dockerfile is read for its FROM, WORKDIR and COPY lines: files COPY'd into the WORKDIR
become workspace files, a skills folder (task.toml skills_dir) goes to the workspace's skills/ (where OpenClaw
looks). The verifier is a reward_dir whose reward.sh runs tests/test.sh in the sandbox (clawgym.tasks.harbor_side
/harbor_run.py: Harbor's absolute paths /tests, /logs, /solution and the WORKDIR mapped onto the sandbox) and
reads the reward from the file test.sh writes; a test.sh that writes none scores 0 with that error.
The reference is one `exec` call running solution/solve.sh the same way.

What cannot run offline is found before anything runs (`offline_problems`): a FROM image that is not local
(unless `base_images` maps it to ours), a Dockerfile RUN or a test.sh line that downloads (apt-get, curl, pip,
uv...). `import_harbor_folder(..., runnable_only=True)` (the bench suite) reports each such task as one TaskError
naming the task, the file and the line -- recorded, never infra for a model and never fatal to the suite.
"""

from __future__ import annotations

import base64
import json
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clawgym.tasks import reader
from clawgym.tasks._io import ImportReport, import_entries, make_task
from clawgym.tasks.model import File, Task, TaskError, ToolCall, Verifier
from clawgym.tasks.names import NAME_RULE, is_name, to_name
from clawgym.tasks.reader import Budget, Limits, TaskDir, load_json

FORMAT = "harbor"
SIDE = Path(__file__).parent / "harbor_side"
DEFAULT_BASE_IMAGE = "clawgym-sandbox:latest"
PROGRAM_FILE = "program.json"  # solution/program.json: Task.program_reference (the program teacher's calls)
LOCAL_IMAGES = (DEFAULT_BASE_IMAGE,)  # images the offline engine has (more via base_images / local_images)
EXPORT_DIR = "/tmp/clawgym-export"  # a directory artifact (Harbor types an entry before the collect hook runs)
EXPORT_TAR = EXPORT_DIR + "/workspace.tar"  # the agent's workspace as data, handed to the separate verifier
INSTRUCTION, TASK_TOML, DOCKERFILE, TEST_SH, SOLVE_SH = (
    "instruction.md", "task.toml", "environment/Dockerfile", "tests/test.sh", "solution/solve.sh")
VERIFY_MARK = "clawgym's verifier inside a Harbor task"  # first line of tests/clawgym_verify.py

# A line that needs the network at build or test time (the cookbook tasks: apt-get, curl | sh, uvx).
_NET_RE = re.compile(
    r"(?<![\w-])(apt-get|apt|apk|yum|dnf|curl|wget|pip3?|pipx|uv|uvx|npm|npx|yarn|pnpm|git\s+clone|"
    r"go\s+install|cargo\s+install|gem\s+install|conda|mamba)(?![\w-])(\s+(update|install|add|clone|sync|run|"
    r"-\S+|https?://\S+|--with|\S+))?")


def _side(name: str) -> str:
    return (SIDE / name).read_text(encoding="utf-8")


# ----------------------------------------------------------------------------------------------- export ----


def _read_program(label: str, solution: list[File], limits: Limits | None) -> list[ToolCall] | None:
    """Task.program_reference from solution/program.json (None when absent); TaskError naming the file and field."""
    f = next((f for f in solution if f.path == PROGRAM_FILE), None)
    if f is None:
        return None
    fname = f"{label}/solution/{PROGRAM_FILE}"
    text = _decode(f)
    if text is None:
        raise TaskError(fname, None, "is not valid UTF-8")
    data = load_json(text, fname, None, limits)
    if not isinstance(data, list) or not data:
        raise TaskError(fname, None, "must be a non-empty JSON list of tool calls")
    out = []
    for i, c in enumerate(data):
        if not isinstance(c, dict) or not isinstance(c.get("name"), str) or not isinstance(c.get("arguments", {}),
                                                                                           dict):
            raise TaskError(fname, f"[{i}]", 'must be {"name": <tool>, "arguments": {...}}')
        out.append(ToolCall(name=c["name"], arguments=c.get("arguments", {})))
    return out


# ----------------------------------------------------------------------------------------------- import ----
def is_harbor_task_dir(p: str | Path) -> bool:
    """A folder holding a task.toml (a Harbor task folder)."""
    p = Path(p)
    return p.is_dir() and (p / TASK_TOML).is_file()


def parse_dockerfile(text: str) -> dict[str, Any]:
    """The parts of a Dockerfile clawgym reads: {"from": [(line, image)], "workdir", "copy": [(line, srcs, dest)],
    "run": [(line, command)], "env": {k: v}, "user"}. Continuation lines are joined (the line is the first)."""
    out: dict[str, Any] = {"from": [], "workdir": None, "copy": [], "run": [], "env": {}, "user": None}
    logical: list[tuple[int, str]] = []
    buf, start = "", 0
    for i, raw in enumerate(text.splitlines(), 1):
        s = raw.rstrip()
        if not buf and (not s.strip() or s.lstrip().startswith("#")):
            continue
        if not buf:
            start = i
        if s.endswith("\\"):
            buf += s[:-1] + " "
            continue
        logical.append((start, (buf + s).strip()))
        buf = ""
    if buf:
        logical.append((start, buf.strip()))
    for ln, s in logical:
        word, _, rest = s.partition(" ")
        word, rest = word.upper(), rest.strip()
        if word == "FROM":
            toks = [t for t in rest.split() if not t.startswith("--")]
            out["from"].append((ln, toks[0] if toks else ""))
        elif word == "WORKDIR":
            wd = rest.strip().strip('"')
            out["workdir"] = wd if wd.startswith("/") or not out["workdir"] else \
                out["workdir"].rstrip("/") + "/" + wd
        elif word in ("COPY", "ADD"):
            toks = [t for t in rest.split() if not t.startswith("--")]
            if rest.startswith("["):
                try:
                    toks = json.loads(rest)
                except json.JSONDecodeError:
                    pass
            if len(toks) >= 2:
                out["copy"].append((ln, toks[:-1], toks[-1], word))
        elif word == "RUN":
            out["run"].append((ln, rest))
        elif word == "ENV":
            m = re.match(r"^(\S+?)[= ](.*)$", rest)
            if m:
                out["env"][m.group(1)] = m.group(2).strip().strip('"')
        elif word == "USER":
            out["user"] = rest
    return out


def _net_lines(text: str) -> list[tuple[int, str]]:
    hits = []
    for i, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        if _NET_RE.search(s):
            hits.append((i, s))
    return hits


def offline_problems(task: Task) -> list[str]:
    """Why an imported Harbor task cannot run offline here, one line each naming the file and line; [] = it can."""
    h = task.source.get("harbor") if task.source.get("format") == FORMAT else None
    return list((h or {}).get("offline_problems", []))


def _problems(label: str, df: dict | None, tests: dict[str, str], base: str | None, local: set[str]) -> list[str]:
    out = []
    if df is None:
        out.append(f"{label}/{DOCKERFILE}: missing (no environment to run the task in)")
    else:
        froms = df["from"]
        if not froms:
            out.append(f"{label}/{DOCKERFILE}: no FROM line")
        elif base is None or base not in local:
            ln, img = froms[-1]
            out.append(f"{label}/{DOCKERFILE} line {ln}: FROM {img} needs a registry pull, which is not possible "
                       f"offline (map it to a local image with base_images={{{img!r}: {DEFAULT_BASE_IMAGE!r}}})")
        for ln, cmd in df["run"]:
            if _NET_RE.search(cmd):
                out.append(f"{label}/{DOCKERFILE} line {ln}: RUN {cmd[:120]} downloads at build time (offline)")
    for rel, text in sorted(tests.items()):
        if not rel.endswith(".sh"):
            continue
        for ln, s in _net_lines(text):
            out.append(f"{label}/tests/{rel} line {ln}: {s[:120]} downloads at test time (offline)")
    return out


def _decode(f: File) -> str | None:
    try:
        return f.content.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _reference(label: str, solution: list[File], cfg: dict) -> tuple[list[ToolCall] | None, str | None]:
    """One exec call that runs solution/solve.sh through harbor_run.solve (paths mapped)."""
    if not any(f.path == "solve.sh" for f in solution):
        return None, None
    files = {}
    for f in solution:
        t = _decode(f)
        if t is None:
            return None, f"{label}/solution/{f.path}: binary solution files are not replayed by the oracle"
        files[f.path] = (t, f.mode)
    prog = _side("harbor_run.py").replace('if __name__ == "__main__":', "if False:") + \
        f"\nsolve({files!r}, {cfg!r}, __import__('os').getcwd())\n"
    b64 = base64.b64encode(prog.encode()).decode()
    if len(b64) > 120_000:
        return None, f"{label}/solution: too large to replay as one command ({len(b64)} bytes encoded)"
    cmd = ("python3 -c 'import base64,sys; exec(compile(base64.b64decode(sys.argv[1]), \"solve.sh\", \"exec\"))' "
           + b64)
    return [ToolCall(name="exec", arguments={"command": cmd, "timeout": 600})], None


def _meta_str(meta: dict, key: str, default: str = "") -> str:
    v = meta.get(key, default)
    return v if isinstance(v, str) else default


def import_harbor_task(dir: str | Path, *, suite: str | None = None, split: str | None = None,
                       limits: Limits | None = None, suite_budget: Budget | None = None, follow_root: bool = True,
                       base_images: dict[str, str] | None = None, local_images: tuple[str, ...] | None = None
                       ) -> Task:
    """One Harbor task folder -> Task (see the module docstring). TaskError naming the file and field on bad
    input. `base_images` maps a FROM image to a local one (e.g. {"ubuntu:24.04": "clawgym-sandbox:latest"});
    `local_images` are the images the offline engine has (default: the sandbox image)."""
    d = Path(dir)
    label = d.name
    if not d.is_dir() and not d.is_symlink():
        raise TaskError(label, None, "is not a directory")
    with TaskDir(d, label, limits=limits, suite=suite_budget, follow_root=follow_root) as td:
        return _import(td, label, suite, split, base_images or {}, set(local_images or LOCAL_IMAGES))


def _read_toml(td: TaskDir, label: str) -> tuple[str, str, dict]:
    """(instruction.md's text, task.toml's text, task.toml parsed); TaskError when one is missing, the
    instruction is empty or the TOML does not parse."""
    if td.kind(INSTRUCTION) == "missing":
        raise TaskError(f"{label}/{INSTRUCTION}", None, "missing (a Harbor task needs instruction.md)")
    instruction = td.read_text(INSTRUCTION)
    if not instruction.strip():
        raise TaskError(f"{label}/{INSTRUCTION}", None, "is empty")
    if td.kind(TASK_TOML) == "missing":
        raise TaskError(f"{label}/{TASK_TOML}", None, "missing (a Harbor task needs task.toml)")
    toml_text = td.read_text(TASK_TOML)
    try:
        conf = tomllib.loads(toml_text)
    except tomllib.TOMLDecodeError as e:
        raise TaskError(f"{label}/{TASK_TOML}", None, f"is not valid TOML: {e}") from None
    return instruction, toml_text, conf


@dataclass
class _Settings:
    """task.toml's fields the import reads, checked."""

    meta: dict
    agent_timeout: float
    verifier_timeout: float
    verifier_env: dict
    skills_dir: str | None


def _settings(conf: dict, fname: str) -> _Settings:
    """The checked fields of task.toml `conf` (TaskError naming `fname` and the field otherwise)."""

    def table(key: str) -> dict:
        v = conf.get(key, {})
        if not isinstance(v, dict):
            raise TaskError(fname, key, "must be a table")
        return v

    meta, agent, verifier, env = table("metadata"), table("agent"), table("verifier"), table("environment")

    def num(t: dict, key: str, where: str, default: float) -> float:
        v = t.get(key, default)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
            raise TaskError(fname, f"{where}.{key}", f"must be a positive number (got {v!r})")
        return float(v)

    agent_timeout = num(agent, "timeout_sec", "agent", 600.0)
    verifier_timeout = num(verifier, "timeout_sec", "verifier", 600.0)
    venv = verifier.get("env", {})
    if not isinstance(venv, dict):
        raise TaskError(fname, "verifier.env", "must be a table")
    skills_dir = env.get("skills_dir")
    if skills_dir is not None and (not isinstance(skills_dir, str) or not skills_dir.startswith("/")):
        raise TaskError(fname, "environment.skills_dir", "must be an absolute path")
    return _Settings(meta, agent_timeout, verifier_timeout, venv, skills_dir)


def _read_parts(td: TaskDir, label: str) -> tuple[list[File], list[File], list[File], list[File]]:
    """Every part of the folder: (environment/, tests/, solution/, the other files); TaskError on a file kind
    that is not allowed or a missing tests/test.sh."""
    env_files = td.read_tree("environment")
    tests = td.read_tree("tests")
    solution = td.read_tree("solution")
    others: list[File] = []
    for name in sorted(os.listdir(td.fd)):
        if name in (INSTRUCTION, TASK_TOML, "environment", "tests", "solution") or name.startswith("."):
            continue
        k = td.kind(name)
        if k == "file":
            others.append(File(path=name, content=td.read_bytes(name)))
        elif k == "dir":
            others += [File(path=f"{name}/{f.path}", content=f.content, mode=f.mode) for f in td.read_tree(name)]
        else:
            raise TaskError(td.name(name), None, f"is a {k} (not allowed in task files)")
    if not any(f.path == "test.sh" for f in tests):
        raise TaskError(f"{label}/{TEST_SH}", None, "missing (the Harbor verifier entry point)")
    return env_files, tests, solution, others


def _read_dockerfile(label: str, env_files: list[File]) -> tuple[File | None, dict | None, str]:
    """(environment/Dockerfile, parsed, its WORKDIR: /app by default); TaskError when it is not UTF-8 text or
    its WORKDIR is /."""
    dockerfile = next((f for f in env_files if f.path == "Dockerfile"), None)
    df = None
    if dockerfile is not None:
        dtext = _decode(dockerfile)
        if dtext is None:
            raise TaskError(f"{label}/{DOCKERFILE}", None, "is not UTF-8 text")
        df = parse_dockerfile(dtext)
    workdir = (df or {}).get("workdir") or "/app"  # Harbor's tasks use /app by convention
    if not workdir.startswith("/"):
        workdir = "/" + workdir
    workdir = workdir.rstrip("/") or "/"
    if workdir == "/":
        raise TaskError(f"{label}/{DOCKERFILE}", "WORKDIR", "is / (a workspace must be a folder below /)")
    return dockerfile, df, workdir


def _workspace(df: dict | None, env_files: list[File], workdir: str, skills_dir: str | None
               ) -> tuple[dict[str, File], list[str], str | None]:
    """The workspace: what the Dockerfile COPYs from its context into the WORKDIR, skills into skills/.
    Returns (workspace files by path, notes on what was not reproduced, "skills" when the skills were copied)."""
    ctx = {f.path: f for f in env_files}
    ws_files: dict[str, File] = {}
    notes: list[str] = []
    skills_rel = None
    for ln, srcs, dest, word in (df or {}).get("copy", []):
        dabs = dest if dest.startswith("/") else workdir + "/" + dest.lstrip("./")
        dabs = dabs.rstrip("/") or "/"
        if skills_dir and (dabs == skills_dir.rstrip("/")):
            target = "skills"
            skills_rel = "skills"
        elif dabs == workdir or dabs.startswith(workdir + "/"):
            target = dabs[len(workdir):].strip("/")
        else:
            notes.append(f"{DOCKERFILE} line {ln}: {word} to {dest} (outside the workspace) not reproduced")
            continue
        for src in srcs:
            s = src.strip("/").removeprefix("./")
            if s in ("", "."):
                matched = list(ctx)
                strip = ""
            elif s in ctx:  # one file
                matched, strip = [s], s.rsplit("/", 1)[0] + "/" if "/" in s else ""
                if not dest.endswith("/") and len(srcs) == 1:  # COPY a.txt b.txt: renamed
                    f = ctx[s]
                    tgt = target if target else s.rsplit("/", 1)[-1]
                    ws_files[tgt] = File(path=tgt, content=f.content, mode=f.mode)
                    continue
            else:
                matched = [p for p in ctx if p.startswith(s + "/")]
                strip = s + "/"
            if not matched:
                notes.append(f"{DOCKERFILE} line {ln}: {word} {src}: nothing in environment/ matches")
            for p in matched:
                if p == "Dockerfile" and s in ("", "."):
                    continue
                rel = p[len(strip):]
                tgt = f"{target}/{rel}" if target else rel
                ws_files[tgt] = File(path=tgt, content=ctx[p].content, mode=ctx[p].mode)
    return ws_files, notes, skills_rel


def _reward_files(tests: list[File], cfg: dict) -> list[File]:
    """The reward_dir verifier: reward.sh running tests/test.sh through harbor_run.py with `cfg`, and tests/."""
    reward_sh = "#!/usr/bin/env bash\n# a Harbor task's tests/test.sh, run by clawgym (clawgym.tasks.harbor)\n" \
                'exec python3 "$(dirname "$0")/harbor_run.py"\n'
    reward_files = [File(path="reward.sh", content=reward_sh.encode(), mode=0o755),
                    File(path="harbor_run.py", content=_side("harbor_run.py").encode()),
                    File(path="harbor.json", content=(json.dumps(cfg, indent=1) + "\n").encode())]
    reward_files += [File(path=f"tests/{f.path}", content=f.content, mode=f.mode) for f in tests]
    return reward_files


def _task_id(meta: dict, label: str, fname: str) -> str:
    """[metadata] clawgym_task_id, else the folder's name, as a valid task id (TaskError when none can be made)."""
    task_id = _meta_str(meta, "clawgym_task_id") or label
    if not is_name(task_id):
        task_id = to_name(task_id, "")
        if not task_id:
            raise TaskError(fname, "metadata.clawgym_task_id", f"is not a valid task id ({NAME_RULE})")
    return task_id


def _difficulty(meta: dict) -> int:
    """[metadata] difficulty: an int as it is, easy / medium / hard as 1 / 2 / 3, else 2."""
    diff = meta.get("difficulty")
    return diff if isinstance(diff, int) and not isinstance(diff, bool) else \
        {"easy": 1, "medium": 2, "hard": 3}.get(str(diff).lower(), 2)


def _import(td: TaskDir, label: str, suite: str | None, split: str | None, base_images: dict[str, str],
            local: set[str]) -> Task:
    instruction, toml_text, conf = _read_toml(td, label)
    fname = f"{label}/{TASK_TOML}"
    st = _settings(conf, fname)
    meta, verifier_timeout, skills_dir = st.meta, st.verifier_timeout, st.skills_dir
    env_files, tests, solution, others = _read_parts(td, label)
    dockerfile, df, workdir = _read_dockerfile(label, env_files)
    image = df["from"][-1][1] if df and df["from"] else None
    base = base_images.get(image, image) if image else None

    ws_files, notes, skills_rel = _workspace(df, env_files, workdir, skills_dir)
    for ln, cmd in (df or {}).get("run", []):
        if not _NET_RE.search(cmd):
            notes.append(f"{DOCKERFILE} line {ln}: RUN {cmd[:80]} not run (the sandbox image is used as it is)")
    if image and base != image:
        notes.append(f"{DOCKERFILE}: FROM {image} mapped to {base}")

    test_text = {f.path: t for f in tests if (t := _decode(f)) is not None}
    problems = _problems(label, df, test_text, base, local)
    own = any(f.path == "clawgym_verify.py" and VERIFY_MARK in f.text.splitlines()[0] for f in tests)
    cfg = {"workdir": workdir, "timeout_s": verifier_timeout, "clawgym_verifier": own,
           "env": {str(k): str(v) for k, v in st.verifier_env.items()}}
    if skills_dir and skills_rel:
        cfg["extra_paths"] = {skills_dir.rstrip("/"): skills_rel}
    reward_files = _reward_files(tests, cfg)
    reference, why = _reference(label, solution, cfg)
    if why:
        notes.append(why)

    task_id = _task_id(meta, label, fname)
    sp = split or _meta_str(meta, "split")
    sp = sp if sp in ("train", "bench") else "bench"
    family = _meta_str(meta, "family")
    family = family if is_name(family) else ""
    seed = meta.get("seed")
    source = {"format": FORMAT, "dirname": label, "harbor": {
        "task_toml": toml_text, "config": json.loads(json.dumps(conf, default=str)),
        "dockerfile": dockerfile.text if dockerfile else None, "image": image, "base_image": base,
        "workdir": workdir, "skills_dir": skills_dir,
        "environment_files": [f.path for f in env_files], "tests_files": [f.path for f in tests],
        "solution_files": [f.path for f in solution],
        "other_files": {f.path: (f.text if _decode(f) is not None else None) for f in others},
        "offline_problems": problems, "notes": notes}}
    return make_task(
        fname, task_id=task_id, suite=suite or to_name(_meta_str(meta, "suite") or "harbor", "harbor"), split=sp,
        route="imported", family=family or "harbor", category=_meta_str(meta, "category"),
        subcategory=_meta_str(meta, "subcategory"), seed=seed if isinstance(seed, int) else None,
        difficulty=_difficulty(meta), instruction=instruction,
        files=sorted(ws_files.values(), key=lambda f: f.path),
        verifier=Verifier(kind="reward_dir", reward_files=reward_files, timeout_s=verifier_timeout + 30.0),
        reference=reference, program_reference=_read_program(label, solution, td.limits), workspace_dir=workdir,
        timeout_s=st.agent_timeout, source=source)


def _entries(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if not p.name.startswith(".") and (p.is_dir() or p.is_symlink())
                  and (p.is_symlink() or (p / TASK_TOML).exists() or (p / INSTRUCTION).exists()
                       or (p / "tests").exists()))


def import_harbor_folder(dir: str | Path, *, suite: str | None = None, split: str | None = None,
                         limits: Limits | None = None, base_images: dict[str, str] | None = None,
                         local_images: tuple[str, ...] | None = None, runnable_only: bool = False) -> ImportReport:
    """A Harbor task folder, or a dataset folder of them -> ImportReport (one TaskError per bad task).
    `runnable_only`: a task that cannot run offline here (`offline_problems`) is reported as one TaskError
    naming the task, the file and the line instead of being returned (the bench suite's mode)."""
    root = Path(dir)
    name = suite or to_name(root.name, "harbor")
    if is_harbor_task_dir(root):
        rep = ImportReport()
        try:
            rep.tasks.append(import_harbor_task(root, suite=name, split=split, limits=limits,
                                                base_images=base_images, local_images=local_images))
        except TaskError as e:
            rep.errors.append(e)
    else:
        budget = reader.suite_budget(limits)
        rep = import_entries(root, _entries,
                             lambda d: import_harbor_task(d, suite=name, split=split, limits=limits,
                                                          suite_budget=budget, follow_root=False,
                                                          base_images=base_images, local_images=local_images),
                             lambda d: f"{d.name}/{TASK_TOML}", "task_id")
    if runnable_only:
        keep = []
        for t in rep.tasks:
            probs = offline_problems(t)
            if probs:
                more = f" (+{len(probs) - 1} more: {'; '.join(probs[1:])})" if len(probs) > 1 else ""
                rep.errors.append(TaskError(t.source.get("dirname", t.task_id), None,
                                            f"cannot run offline: {probs[0]}{more}"))
            else:
                keep.append(t)
        rep.tasks = keep
    return rep


__all__ = ["import_harbor_task",
           "import_harbor_folder", "is_harbor_task_dir", "offline_problems", "parse_dockerfile",
           "DEFAULT_BASE_IMAGE", "FORMAT"]
