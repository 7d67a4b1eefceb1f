"""Entry point of the gates' in-sandbox drivers: `python3 <dir>/launch.py replay|grade`.

<dir> holds clawgym.sandbox.guest.synth.bundle() and in.json (the job); the driver's result goes to out.json and
the CPU seconds it used (itself and its children) to cpu.json, with the driver's counters (its STATS, if any).
"""

import sys

# First thing: what a bare interpreter holds. The fork server counts everything imported beyond it as
# pre-imported (a program's own module of that name would have won in a real interpreter).
BASE_MODULES = frozenset(sys.modules)


def main(argv=None) -> None:
    import json
    import os
    import resource

    which = (sys.argv if argv is None else argv)[1:2]
    if which == ["replay"]:
        from clawgym.sandbox.guest.synth import replay as driver
    elif which == ["grade"]:
        from clawgym.sandbox.guest.synth import grade as driver  # type: ignore[no-redef]  # one name, either driver
    else:
        raise SystemExit("usage: launch.py replay|grade")
    root = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(root, "in.json")) as fh:
        job = json.load(fh)
    out = driver.run(job, root, BASE_MODULES)
    with open(os.path.join(root, "out.json"), "w") as fh:
        json.dump(out, fh)
    usage = (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN))
    with open(os.path.join(root, "cpu.json"), "w") as fh:
        json.dump({"cpu_s": sum(x.ru_utime + x.ru_stime for x in usage), **getattr(driver, "STATS", {})}, fh)


if __name__ == "__main__":
    main()
