"""Any Task as a Harbor task folder: `export_harbor_task`, `export_harbor_dataset`, `harbor_task_files`.

The folder runs in the real Harbor unchanged (`harbor run -p <dataset> -a oracle`): `environment/Dockerfile` FROM the
sandbox image, `tests/` our verifier offline (the grade driver, scoring and the task's checks, writing reward.txt +
reward.json), `solution/solve.sh` replaying the reference, and with `separate` the workspace handed to a clean
verifier environment as data (`[verifier] environment_mode = "separate"`, `[[verifier.collect]]`). Import of Harbor
folders is clawgym.tasks.harbor (the tasks layer); this module ships the verifier's own files, so it sits above
clawgym.verify (tests/test_layers.py).

The handover is the clean room's, with the clean room's own code, since Harbor's verifier has no clawgym installed:
the collect hook never follows a workspace replaced by a link or a file (an empty tar); tests/clawgym_unpack.py
reads the tar by clawgym/sandbox/host/export.py's rules (shipped verbatim as tests/clawgym_export.py) into an
emptied workspace, no tar being an empty workspace; tests/clawgym_verify.py prepares it with
clawgym.verify.guard's `neutralize_controls` and `verifier_env`, whose source this module copies into
tests/clawgym_guard.py, with the allow-list import guard in tests/clawgym_site/.
"""

from __future__ import annotations

import base64
import inspect
import json
import posixpath
import shlex
from pathlib import Path
from typing import Any

import clawgym.sandbox.host.export as host_export
from clawgym.tasks._io import AtomicDir, write_tree
from clawgym.tasks.harbor import (
    DEFAULT_BASE_IMAGE,
    DOCKERFILE,
    EXPORT_DIR,
    EXPORT_TAR,
    INSTRUCTION,
    PROGRAM_FILE,
    TASK_TOML,
    _side,
)
from clawgym.tasks.model import File, Task, TaskError
from clawgym.tasks.names import check_name, safe_join


def _toml_str(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)  # a JSON string is a valid TOML basic string


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return _toml_str(str(v))


def _task_toml(task: Task, *, separate: bool, cpus: float, memory_mb: int, storage_mb: int,
               network_mode: str | None = None) -> str:
    v = task.verifier
    meta: dict[str, Any] = {"clawgym_task_id": task.task_id, "suite": task.suite, "split": task.split,
                            "route": task.route, "category": task.category, "difficulty": task.difficulty,
                            "tags": [x for x in (task.category, task.family) if x]}
    for k in ("family", "subcategory", "persona_id"):
        if getattr(task, k):
            meta[k] = getattr(task, k)
    if task.seed is not None:
        meta["seed"] = task.seed
    if task.skill_ids:
        meta["skill_ids"] = list(task.skill_ids)
    meta["clawgym_verifier"] = v.kind
    if v.rubric:
        meta["clawgym_rubric"] = (f"not scored in Harbor: {len(v.rubric)} rubric rules (tests/rubric.json) need a "
                                  "judge; the Harbor reward is the code part only (clawgym weights code "
                                  f"{v.weights()[0]:g} / rubric {v.weights()[1]:g}; judge configured in clawgym by "
                                  "CLAWGYM_JUDGE_BASE_URL / CLAWGYM_JUDGE_MODEL / CLAWGYM_JUDGE_API_KEY)")
    lines = ['schema_version = "1.1"', ""]
    if separate:
        lines += [f"artifacts = [{_toml_str(EXPORT_DIR)}]", ""]
    lines += ["[metadata]"] + [f"{k} = {_toml_value(x)}" for k, x in meta.items()] + [""]
    lines += ["[agent]", f"timeout_sec = {float(task.timeout_s)!r}", ""]
    lines += ["[verifier]", f"timeout_sec = {float(v.timeout_s) + 60.0!r}"]
    if separate:
        lines += ['environment_mode = "separate"', "",
                  "[[verifier.collect]]",
                  f"command = {_toml_str(_collect_command(task.workspace_dir))}",
                  "timeout_sec = 120.0"]
    lines += ["", "[environment]", "build_timeout_sec = 600.0", f"cpus = {cpus!r}", f"memory_mb = {memory_mb}",
              f"storage_mb = {storage_mb}"] + \
        ([f"network_mode = {_toml_str(network_mode)}"] if network_mode else []) + [""]
    return "\n".join(lines)


def _collect_command(ws: str) -> str:
    """The `[[verifier.collect]]` hook: the workspace as a tar, never through a link. `cd -P` then `pwd -P` equal to
    the workspace path means no part of the path is a link; a workspace replaced by a link or a file, or deleted,
    is no directory any more, and what is there is nothing a verifier may read: the tar is then empty, as clawgym's
    own export of such a workspace is. Unreadable entries are left out, as the built-in export drops them."""
    q = shlex.quote(posixpath.normpath(ws))
    return (f"mkdir -p {EXPORT_DIR} && rm -f {EXPORT_TAR} && "
            f"if cd -P -- {q} 2>/dev/null && [ \"$(pwd -P)\" = {q} ]; then "
            f"tar --ignore-failed-read --exclude=./reward -cf {EXPORT_TAR} .; "
            f"else tar -cf {EXPORT_TAR} -T /dev/null; fi && chmod 0644 {EXPORT_TAR}")


def _dockerfile(task: Task, base_image: str) -> str:
    ws = task.workspace_dir
    return (f"# clawgym task {task.task_id} (exported by clawgym.tasks.harbor): the offline sandbox image, the\n"
            f"# workspace files at the task's workspace path, which is the working directory.\n"
            f"FROM {base_image}\n"
            f"USER root\n"
            f"COPY workspace/ {ws}/\n"
            f"RUN mkdir -p {EXPORT_DIR}\n"
            f"WORKDIR {ws}\n")


def _test_sh(task: Task, separate: bool) -> str:
    ws = shlex.quote(task.workspace_dir)
    head = ("#!/usr/bin/env bash\n"
            f"# clawgym verifier for {task.task_id}: no network, no downloads.\n"
            "mkdir -p /logs/verifier\n")
    if separate:
        head += (
            "# In Harbor's separate verifier environment the agent's workspace arrives as data (the artifact tar of\n"
            "# [[verifier.collect]]) and replaces the image's copy: regular files and folders, links resolved inside\n"
            "# the workspace or dropped; no tar is an empty workspace. clawgym's own importer of this folder runs it\n"
            "# on a workspace that already is its clean room's export (CLAWGYM_VERIFY_IN_PLACE=1).\n"
            'if [ "${CLAWGYM_VERIFY_IN_PLACE:-}" != 1 ]; then\n'
            f"  python3 -I /tests/clawgym_unpack.py {EXPORT_TAR} {ws} /logs/verifier || "
            "{ echo 0 > /logs/verifier/reward.txt; echo 'clawgym: workspace export unreadable' >&2; exit 0; }\n"
            "fi\n")
    return head + f"cd {ws} && python3 -I /tests/clawgym_verify.py\n"


# clawgym.verify.guard's rules, shipped as they are: the Harbor verifier has no clawgym installed, so the exporter
# writes the guard's own functions into tests/clawgym_guard.py instead of a second, hand-written copy of them
_GUARD_CODE = ("_is_git_config", "control_kind", "sanitize_git_config", "_ini_header", "_ini_pytest_sections",
               "_toml_pytest", "strip_pytest_config", "neutralize_controls", "_neutralize_one", "verifier_env")


def _guard_module() -> str:
    """tests/clawgym_guard.py: the constants and functions of clawgym.verify.guard that prepare a workspace for a
    verifier (neutralize_controls and what it calls, verifier_env), as their source; stdlib only, except tomli_w
    (shipped beside it) and iniconfig (pytest's own parser, optional)."""
    from clawgym.verify import guard as g

    head = ('"""clawgym.verify.guard\'s workspace preparation inside a Harbor task (tests/clawgym_guard.py).\n\n'
            "Generated by clawgym.tasks.harbor_export from clawgym/verify/guard.py: its functions copied as they\n"
            "are, so the Harbor verifier neutralises the same files and builds the same environment as clawgym's\n"
            "clean room.\n"
            '"""\n'
            "from __future__ import annotations\n\nimport re\n\n\n"
            "class SandboxError(Exception):\n"
            '    """Never raised here (no sandbox): neutralize_controls re-raises it by name."""\n\n\n'
            + inspect.getsource(g.UnsafeWorkspace) + "\n\n"
            f"CLEAN_PATH = {g.CLEAN_PATH!r}\n"
            f"CONTROL_NAMES = set({sorted(g.CONTROL_NAMES)!r})\n"
            f"CONTROL_SUFFIXES = {tuple(g.CONTROL_SUFFIXES)!r}\n"
            f"SECTION_FILES = {tuple(g.SECTION_FILES)!r}\n"
            f"GIT_ALLOWED = re.compile({g.GIT_ALLOWED.pattern!r}, {int(g.GIT_ALLOWED.flags)})\n\n\n")
    return head + "\n\n".join(inspect.getsource(getattr(g, n)) for n in _GUARD_CODE)


def _guard_files(task: Task) -> list[File]:
    """What tests/clawgym_verify.py prepares the workspace with: the generated guard, the import guard's folder
    (clawgym_site/: nothing else may be in it, it goes on PYTHONPATH), tomli_w (strip_pytest_config rewrites a
    pyproject.toml with it; the sandbox image has none) and the task's own control files, which stay."""
    import importlib.metadata
    import importlib.util

    from clawgym.sandbox.guest import VERIFY_SIDE
    from clawgym.verify.guard import GUARD_FILES, control_kind

    out = [File(path="clawgym_guard.py", content=_guard_module().encode())]
    out += [File(path=f"clawgym_site/{n}", content=(VERIFY_SIDE / n).read_bytes()) for n in GUARD_FILES]
    spec = importlib.util.find_spec("tomli_w")
    assert spec is not None and spec.origin is not None, "tomli_w (a dependency of clawgym) is not installed"
    tw = Path(spec.origin).parent
    out += [File(path=f"tomli_w/{p.name}", content=p.read_bytes()) for p in sorted(tw.glob("*.py"))]
    lic = next((f for f in importlib.metadata.distribution("tomli_w").files or []
                if f.name.upper().startswith("LICENSE")), None)
    if lic is not None:
        out.append(File(path="tomli_w/LICENSE", content=lic.read_text().encode()))
    controls = {f.path: {"content_b64": base64.b64encode(f.content).decode(), "mode": f.mode}
                for f in task.files if control_kind(f.path) is not None}
    out.append(File(path="clawgym_controls.json", content=(json.dumps(controls, indent=1) + "\n").encode()))
    return out


def _verifier_files(task: Task, separate: bool = True) -> list[File]:
    """tests/ of an exported task."""
    from clawgym.tasks.clawgym_format import reward_files_for
    from clawgym.verify.runtime import GRADE_DRIVER

    v = task.verifier
    cfg = {"kind": "grade" if v.kind == "grade" else "reward_dir", "timeout_s": float(v.timeout_s),
           "workspace": task.workspace_dir, "task_id": task.task_id}
    out = [File(path="test.sh", content=_test_sh(task, separate).encode(), mode=0o755),
           File(path="clawgym_verify.py", content=_side("clawgym_verify.py").encode()),
           File(path="clawgym_unpack.py", content=_side("clawgym_unpack.py").encode()),
           # clawgym's own export rules, verbatim: the unpack reads the tar as the clean room reads a workspace
           File(path="clawgym_export.py", content=Path(host_export.__file__).read_bytes()),
           File(path="scoring.py", content=(Path(__file__).parent.parent / "verify" / "scoring.py").read_bytes()),
           File(path="clawgym.json", content=(json.dumps(cfg, indent=2) + "\n").encode())]
    out += _guard_files(task)
    if v.kind == "grade":
        out += [File(path="check_code.py", content=(v.code or "").encode()),
                File(path="grade_driver.py", content=GRADE_DRIVER.encode())]
    else:  # reward_dir, or rubric-only ("none": reward.sh prints 0, as in ClawGym's harness)
        for f in reward_files_for(task):
            if f.path != "rubric.json":
                out.append(File(path=f"reward/{f.path}", content=f.content, mode=f.mode))
    if v.rubric:
        rub = {"eval_type": "llm_rubric", "scored_in_harbor": False,
               "rules": [r.model_dump(exclude_none=True) for r in v.rubric]}
        out.append(File(path="rubric.json", content=(json.dumps(rub, indent=2) + "\n").encode()))
    return out


def _program_file(task: Task) -> list[File]:
    """solution/program.json: the program teacher's tool calls (Task.program_reference), when the task has them."""
    if not task.program_reference:
        return []
    calls = [c.model_dump(mode="json") for c in task.program_reference]
    return [File(path=PROGRAM_FILE, content=(json.dumps(calls, indent=1, ensure_ascii=False) + "\n").encode())]


def _solution_files(task: Task) -> list[File]:
    if not task.reference:
        return _program_file(task)
    calls = [c.model_dump() for c in task.reference]
    sh = ("#!/usr/bin/env bash\n"
          f"# clawgym reference solution for {task.task_id}: its tool calls replayed with the agent tools' semantics\n"
          f'cd {shlex.quote(task.workspace_dir)} && python3 "$(dirname "$0")/clawgym_solve.py" '
          f"{shlex.quote(task.workspace_dir)}\n")
    return [File(path="solve.sh", content=sh.encode(), mode=0o755),
            File(path="clawgym_solve.py", content=_side("clawgym_solve.py").encode()),
            File(path="toolcore.py", content=(Path(__file__).parent.parent / "agent" / "toolcore.py").read_bytes()),
            File(path="reference.json", content=(json.dumps(calls, indent=1, ensure_ascii=False) + "\n").encode()),
            *_program_file(task)]


def harbor_task_files(task: Task, *, base_image: str = DEFAULT_BASE_IMAGE, separate: bool = True,
                      cpus: float = 1.0, memory_mb: int = 2048, storage_mb: int = 4096,
                      network_mode: str | None = None) -> list[File]:
    """Every file of the Harbor folder `task` exports as (paths relative to the task folder)."""
    if task.workspace_dir in ("", "/") or not task.workspace_dir.startswith("/"):
        raise TaskError(task.task_id, "workspace_dir", "must be an absolute path below / for a Harbor WORKDIR")
    files = [File(path=INSTRUCTION, content=(task.instruction.rstrip("\n") + "\n").encode()),
             File(path=TASK_TOML, content=_task_toml(task, separate=separate, cpus=cpus, memory_mb=memory_mb,
                                                     storage_mb=storage_mb, network_mode=network_mode).encode()),
             File(path=DOCKERFILE, content=_dockerfile(task, base_image).encode())]
    files += [File(path=f"environment/workspace/{f.path}", content=f.content, mode=f.mode) for f in task.files]
    if not task.files:
        files.append(File(path="environment/workspace/.clawgym-empty", content=b""))
    files += [File(path=f"tests/{f.path}", content=f.content, mode=f.mode) for f in _verifier_files(task, separate)]
    files += [File(path=f"solution/{f.path}", content=f.content, mode=f.mode) for f in _solution_files(task)]
    return files


def export_harbor_task(task: Task, out_dir: str | Path, **kw) -> Path:
    """Write `task` as a Harbor task folder at out_dir (the task folder itself; replaced atomically).
    Keywords: base_image (default clawgym-sandbox:latest), separate (the clean-room verifier; default True),
    cpus, memory_mb, storage_mb."""
    out = Path(out_dir)
    files = harbor_task_files(task, **kw)
    with AtomicDir(out) as tmp:
        write_tree(tmp, files)
    return out


def export_harbor_dataset(tasks: list[Task], out_dir: str | Path, *, name: str = "clawgym", **kw) -> list[Path]:
    """Each task to out_dir/<task_id>/ (Harbor runs the folder: `harbor run -p out_dir -a oracle`), plus
    out_dir/clawgym_dataset.json listing the tasks and their metadata. Only folders directly inside out_dir
    are created or replaced (names are checked, paths go through safe_join)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    seen: set[str] = set()
    for t in tasks:
        check_name(t.task_id, "task_id")
        if t.task_id == "clawgym_dataset.json":  # the index's own name: a task folder there would clash with it
            raise TaskError(t.task_id, "task_id", "reserved name (the dataset index)")
        if t.task_id in seen:
            raise TaskError(t.task_id, "task_id", f"duplicate task_id {t.task_id!r}")
        seen.add(t.task_id)
    paths = [export_harbor_task(t, safe_join(out, t.task_id), **kw) for t in tasks]
    index = {"name": check_name(name, "dataset name"), "format": "harbor", "n": len(tasks),
             "tasks": [{"name": t.task_id, "path": t.task_id, "suite": t.suite, "split": t.split,
                        "category": t.category, "family": t.family, "seed": t.seed} for t in tasks]}
    (out / "clawgym_dataset.json").write_text(json.dumps(index, indent=1) + "\n", encoding="utf-8")
    return paths


__all__ = ["export_harbor_task", "export_harbor_dataset", "harbor_task_files"]
