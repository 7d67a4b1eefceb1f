"""Programs the batched synthesis gates (clawgym.synth.gates.validate_many) run inside a sandbox with the
sandbox's python3 (stdlib only): real modules, importable and testable on the host, shipped as files.

    launch.py       entry point: `python3 <dir>/launch.py replay|grade` reads <dir>/in.json, writes out.json
                    and cpu.json
    replay.py       applies every task's reference solution (clawgym.agent.toolcore: the agent tools' own
                    semantics) and reports the files it changed
    grade.py        grades every variant of every task in-process (clawgym.verify.scoring.mean_of_checks)
    forkserver.py   serves `python3` runs by fork()ing the pre-imported driver process
    common.py       batched removal of finished work directories

`bundle()` is what travels: launch.py plus those modules in a minimal `clawgym` package tree (empty
__init__ files, since the real ones import the host's dependencies), so the drivers import them exactly as
they do on the host.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

HERE = Path(__file__).resolve().parent
_CLAWGYM = HERE.parents[2]
SHIPPED = ("agent/toolcore.py", "verify/scoring.py", "sandbox/guest/synth/common.py",
           "sandbox/guest/synth/forkserver.py", "sandbox/guest/synth/replay.py", "sandbox/guest/synth/grade.py")
LAUNCHER = "launch.py"
DRIVERS = ("replay", "grade")


@lru_cache(maxsize=1)
def bundle() -> dict[str, bytes]:
    """{path relative to the driver directory: content} of every file a driver run needs."""
    out = {LAUNCHER: (HERE / LAUNCHER).read_bytes()}
    for rel in SHIPPED:
        parts = rel.split("/")
        for i in range(len(parts)):
            out.setdefault("/".join(["clawgym", *parts[:i], "__init__.py"]), b"")
        out["clawgym/" + rel] = (_CLAWGYM / rel).read_bytes()
    return out


__all__ = ["bundle", "SHIPPED", "LAUNCHER", "DRIVERS"]
