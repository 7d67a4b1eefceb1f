"""The program checker (outside the library's import path: only the CLI, tests and benchmarks import it).

    python -m clawgym.synth.solutions [FAMILY ...] [--seeds N] [--start S] [--backend auto]

scores each family's program solution (clawgym/synth/solutions/<family>.py) on seeds [S, S+N) with the family's
real verifier in the sandbox, prints per family how many seeds score 1.0 and, for up to 3 failing seeds, the
verification and the program's output; exit status 1 when any seed fails. The module's name starts with "_" so
`program_families()` does not take it for a family.
"""

from __future__ import annotations

from clawgym.synth.solutions import program_families, program_source, with_program_reference


def check_programs(families: list[str] | None = None, seeds=range(10), backend: str = "auto",
                   workers: int = 2, factory=None) -> dict[str, dict[int, float | None]]:
    """Score each family's program on `seeds` with the family's real verifier: {family: {seed: score}}
    (`factory`: a sandbox factory, else one of `backend`)."""
    from concurrent.futures import ThreadPoolExecutor

    from clawgym.agent.rollout import run_rollout
    from clawgym.sandbox import get_factory
    from clawgym.synth.families import get_family

    factory = factory or get_factory(backend)
    # tasks are generated here, one at a time: some generators (software.py) self-check through sys.modules
    jobs = [(f, s, get_family(f).generate(s)) for f in (families or program_families()) for s in seeds]

    def one(job):
        f, s, task = job
        ro = run_rollout(with_program_reference(task), "oracle", factory)
        return f, s, ro.score, ro

    out: dict[str, dict[int, float | None]] = {}
    with ThreadPoolExecutor(max(1, workers)) as ex:
        for f, s, score, _ro in ex.map(one, jobs):
            out.setdefault(f, {})[s] = score
    return out


def main(argv=None) -> int:
    """python -m clawgym.synth.solutions [FAMILY ...] [--seeds N] [--start S]: score programs, show failures."""
    import argparse

    from clawgym.agent.rollout import run_rollout
    from clawgym.sandbox import get_factory
    from clawgym.synth.families import get_family

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("families", nargs="*")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--backend", default="auto")
    a = ap.parse_args(argv)
    fams = a.families or program_families()
    res = check_programs(fams, range(a.start, a.start + a.seeds), a.backend)
    bad = 0
    factory = get_factory(a.backend)
    for f in fams:
        scores = res.get(f, {})
        fails = {s: v for s, v in scores.items() if v != 1.0}
        n_tok = len(program_source(f) or "")
        print(f"{f}: {sum(v == 1.0 for v in scores.values())}/{len(scores)} seeds score 1.0 "
              f"(program {n_tok} chars)")
        for s in list(fails)[:3]:
            ro = run_rollout(with_program_reference(get_family(f).generate(s)), "oracle", factory)
            tool_out = [m.get("content") for m in ro.messages if m.get("role") == "tool"]
            print(f"  seed {s}: score {ro.score} verification {str(ro.verification)[:600]}")
            print(f"    program output: {str(tool_out)[:800]}")
        bad += len(fails)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
