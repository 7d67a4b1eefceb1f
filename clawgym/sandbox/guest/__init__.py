"""The guest side: every program clawgym ships INTO a sandbox, kept here as real files and copied in as text.

    execd.py   the exec server (docker: bound read-only at /opt/clawgym/execd.py; bwrap: pid 1 at
               /run/clawgym/execd.py); its host half is clawgym.sandbox.host.execd_client
    verify/    the clean room's files (clawgym.verify.guard writes them in): the allow-list import guard
               (sitecustomize.py, its data protected_modules.txt made by clawgym.verify.protected) and the grade
               driver (grade_driver.py). Files, not a package: nothing on the host imports them.
    synth/     the synthesis gates' drivers (clawgym.synth.gates): a package, importable and tested on the host;
               `clawgym.sandbox.guest.synth.bundle()` is what travels

Everything here runs on the sandbox's python3 with the standard library only (clawgym's own dependencies are not
in the sandbox). Paths below are where the host reads them from.
"""

from __future__ import annotations

from pathlib import Path

GUEST = Path(__file__).resolve().parent
EXECD = GUEST / "execd.py"
VERIFY_SIDE = GUEST / "verify"

__all__ = ["GUEST", "EXECD", "VERIFY_SIDE"]
