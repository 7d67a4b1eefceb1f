"""Throughput of procedural synthesis + validation.

    python benchmarks/synth_scale.py --n 500 [--backend bwrap|docker|local|host] [--workers 3] [--chunk 100]
    python benchmarks/synth_scale.py --n 13500 --no-validate   # generate + dedupe + split alone

Prints tasks/s and the time per phase (generate, validate, dedupe, split), plus the projection for the
issue's goal (13,500 tasks in <= 10 min on 2 cores).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--backend", default="bwrap", choices=["bwrap", "docker", "local", "host", "auto"])
    ap.add_argument("--workers", type=int, default=(os.cpu_count() or 1) + 1,
                    help="chunks validated at once (default cores + 1: a chunk's host-side work overlaps the others' "
                         "sandbox runs)")
    ap.add_argument("--chunk", type=int, default=100)
    ap.add_argument("--no-forkserver", action="store_true", help="replay python3 runs as real processes (before/after)")
    ap.add_argument("--no-validate", action="store_true", help="generate + dedupe + split only (their scaling)")
    ap.add_argument("--no-memo", action="store_true",
                    help="gates: every run of the agent's code in a check is a new child (before/after)")
    ap.add_argument("--no-direct", action="store_true",
                    help="gates: a check's child python goes through the fork server's shim (before/after)")
    ap.add_argument("--embed-cache", default=os.environ.get("CLAWGYM_EMBED_CACHE"),
                    help="MiniLM embedding cache (.npz; '' = none; default $CLAWGYM_EMBED_CACHE or "
                         "<repo>/data/cache/minilm_embeddings.npz)")
    a = ap.parse_args()

    from clawgym.sandbox.base import SandboxConfig
    from clawgym.synth import pipeline
    from clawgym.synth.embed import DEFAULT_CACHE_PATH, minilm_embedder
    from clawgym.synth.families import all_families
    from clawgym.synth.personas import expand_personas
    from clawgym.synth.pipeline import synthesize

    if a.no_memo or a.no_direct:  # synthesize() takes no gate options: its validate_many, so configured
        import functools

        pipeline.validate_many = functools.partial(pipeline.validate_many, memo=not a.no_memo,
                                                   direct=not a.no_direct)

    factory = None
    if a.backend != "host":
        from clawgym.sandbox import get_factory, host_settings

        factory = get_factory(a.backend, SandboxConfig(disk_mb=512, memory_mb=1024, default_timeout_s=600,
                                                       **host_settings(os.environ)))
    import resource

    fams = all_families()
    load0 = os.getloadavg()[0]
    r0s, r0c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = synthesize(a.n, seed=a.seed, factory=factory, personas=expand_personas(), workers=a.workers, chunk=a.chunk,
                     validate=not a.no_validate, forkserver=not a.no_forkserver,
                     embed=minilm_embedder(DEFAULT_CACHE_PATH if a.embed_cache is None else a.embed_cache))
    wall = time.perf_counter() - t0
    r1s, r1c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_self = (r1s.ru_utime + r1s.ru_stime) - (r0s.ru_utime + r0s.ru_stime)
    cpu_kids = (r1c.ru_utime + r1c.ru_stime) - (r0c.ru_utime + r0c.ru_stime)
    if factory is not None:
        factory.close()
    passed = sum(v.passed for v in res.validations)
    print(f"families: {len(fams)}  tasks: {a.n}  backend: {a.backend}  workers: {a.workers}  chunk: {a.chunk}  "
          f"forkserver: {not a.no_forkserver}  memo: {not a.no_memo}  direct: {not a.no_direct}  "
          f"load average at start {load0:.1f}")
    for k, v in res.timings.items():
        print(f"  {k:12s} {v:8.2f} s")
    vs = res.validate_stats
    if vs.get("tasks"):
        per = 1000 / vs["tasks"]
        host = vs["chunk_s"] - vs.get("replay_s", 0) - vs.get("grade_s", 0)
        print(f"  validate per task, summed over the {a.workers} workers (ms): chunk {vs['chunk_s'] * per:.1f} = "
              f"replay {vs.get('replay_s', 0) * per:.1f} + grade {vs.get('grade_s', 0) * per:.1f} "
              f"+ host {host * per:.1f}")
        for ph in ("replay", "grade"):
            print(f"    {ph:6s}: sandbox open+driver {vs.get(ph + '_driver_s', 0) * per:.1f}, cpu in the sandbox "
                  f"{vs.get(ph + '_sandbox_cpu_s', 0) * per:.1f}, payload JSON/results/close "
                  f"{vs.get(ph + '_transfer_s', 0) * per:.1f}  "
                  f"({vs.get(ph + '_payload_mb', 0) / vs['tasks'] * 1000:.1f} kB)")
        scpu = vs.get("replay_sandbox_cpu_s", 0) + vs.get("grade_sandbox_cpu_s", 0)
        print(f"  sandbox cpu {scpu * per:.1f} ms per task (load-independent cost; host process below)")
        if vs.get("agent_calls") or vs.get("agent_calls_shared"):
            print(f"  checks' runs of the agent's code per task: {vs.get('agent_calls', 0) * per / 1000:.2f} children "
                  f"({vs.get('agent_calls_direct', 0) * per / 1000:.2f} forked directly), "
                  f"{vs.get('agent_calls_shared', 0) * per / 1000:.2f} answered from the memo")
    print(f"passed gates: {passed}/{len(res.validations)}  accepted: {len(res.tasks)}  rejected: {len(res.rejected)}")
    reasons: dict[str, int] = {}
    for r in res.rejected:
        key = f"{r.stage}:{r.family}"
        reasons[key] = reasons.get(key, 0) + 1
    for k, v in sorted(reasons.items(), key=lambda kv: -kv[1])[:10]:
        print(f"  rejected {k}: {v}")
    cpu = cpu_self + cpu_kids
    print(f"cpu: {cpu:.1f} s ({cpu_self:.1f} s this process, {cpu_kids:.1f} s sandboxes/drivers) = "
          f"{cpu / a.n * 1000:.0f} ms cpu per task; load average now {os.getloadavg()[0]:.1f}")
    if factory is not None and cpu_kids < 0.05 * cpu_self:
        print("  (sandbox processes are not children of this process here, so their cpu is not counted: "
              "use --backend host for the cpu figure)")
    else:
        print(f"cpu-bound projection 13,500 tasks on 2 idle cores: {13500 * cpu / a.n / 2 / 60:.1f} min")
    if a.no_validate:
        print(f"generate + dedupe + split of {a.n} tasks: {wall:.1f} s")
        return
    rate = a.n / wall
    print(f"throughput: {rate:.1f} tasks/s  ({wall:.1f} s wall)")
    print(f"projection 13,500 tasks: {13500 / rate / 60:.1f} min (goal <= 5 min)")


if __name__ == "__main__":
    main()
