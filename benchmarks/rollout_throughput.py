"""Rollout throughput, in one run:

1. oracle rollouts/s (builtin runtime, our own tasks, each verified in a clean room) at pool sizes 1, 2, 4, 8 on
   each sandbox backend (goals: >= 25/s bwrap, >= 20/s docker, and no pool size below pool 1's rate); both pools
   (the agents' sandboxes and the clean rooms) are warmed before the clock starts (`--cold-rooms`: only the agents',
   as before: the rooms' pool then fills while the rollouts run);
2. the local model server's aggregate decode tokens/s at 16 concurrent rollout-shaped requests over 1 stream
   (the engine, vLLM, through clawgym.serve.ModelServer; goal >= 6x);
3. a DuckDB query (pass rate by category x policy) over 1M generated step rows (goal < 1 s; benchmarks/duckdb_steps.py).

    python benchmarks/rollout_throughput.py [--n 24] [--pools 1,2,4,8] [--backends bwrap,docker] [--cold-rooms]
                                           [--ab REF] [--rounds 2]
                                           [--serve] [--streams 16] [--max-tokens 64] [--plain] [--stock-attention]
                                           [--stock-linear]
                                           [--duckdb] [--openclaw]

Without --serve/--duckdb only part 1 runs (--all runs everything). Prints one line per measurement.

--ab REF: before/after in one run. The library of git commit REF (extracted with `git archive` into a temp dir) and
this tree's run part 1 alternately, `--rounds` rounds of each per backend (old, new, then new, old, ...), each run in
a subprocess of this same script (`--code DIR` picks the library), so both arms share this harness and the box's
noise; prints each arm's median rate per pool, the ratio new/old, each arm's best pool and its lowest pool against
pool 1.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# --code DIR (the A/B's other arm): the library is imported from DIR instead of this tree
_CODE = sys.argv[sys.argv.index("--code") + 1] if "--code" in sys.argv[:-1] else str(REPO)
sys.path.insert(0, _CODE)
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from clawgym.agent.demo import demo_tasks  # noqa: E402
from clawgym.agent.rollout import RolloutSettings, run_rollout  # noqa: E402
from clawgym.sandbox import SandboxConfig, get_factory, host_settings  # noqa: E402

GOALS = {"bwrap": 25.0, "docker": 20.0}


def _available(name: str) -> tuple[bool, str]:
    if name == "local":
        return True, ""
    if name == "bwrap":
        from clawgym.sandbox.bwrap.backend import available
    else:
        from clawgym.sandbox.docker.backend import available
    return available()


def measure(factory, n: int, workers: int, runtime: str = "builtin") -> tuple[float, float]:
    tasks = [demo_tasks()[i % 3] for i in range(n)]
    settings = RolloutSettings(runtime=runtime)
    t0 = time.perf_counter()
    if workers <= 1:
        rs = [run_rollout(t, "oracle", factory, settings) for t in tasks]
    else:
        with ThreadPoolExecutor(workers) as ex:
            rs = list(ex.map(lambda t: run_rollout(t, "oracle", factory, settings), tasks))
    dt = time.perf_counter() - t0
    ok = sum(r.score == 1.0 for r in rs)
    return dt, ok / n


def _box_cpu() -> float:
    """CPU seconds the whole machine has been busy (all cores, /proc/stat: everything but idle and iowait)."""
    with open("/proc/stat") as fh:
        v = [int(x) for x in fh.readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def rollouts(backends: list[str], pools: list[int], n: int, openclaw: bool, cold_rooms: bool = False,
             as_json: bool = False) -> None:
    for b in backends:
        ok, why = _available(b)
        if not ok:
            print(f"{b:7s} skipped: {why}")
            continue
        rates: dict[int, float] = {}
        for pool in pools:
            kw = {"pool_size": max(2, pool)} if b in ("docker", "bwrap") else {}  # sandboxes started ahead
            with get_factory(b, SandboxConfig(**host_settings(os.environ)), **kw) as f:
                f.warm(120)
                if not cold_rooms:
                    f.rooms().warm(120)
                run_rollout(demo_tasks()[0], "oracle", f)  # warm-up (policy server, page cache, pools)
                f.settle(60)
                f.rooms().settle(60)
                made0 = f.stats.get("created", 0), f.rooms().stats.get("created", 0)
                cpu0, box0 = os.times(), _box_cpu()
                dt, solved = measure(f, n, pool)
                cpu1, box1 = os.times(), _box_cpu()
                made = f.stats.get("created", 0) - made0[0], f.rooms().stats.get("created", 0) - made0[1]
            rates[pool] = rate = n / dt
            # where the CPU went, per rollout: this process (the harness, the policy server, the host side of both
            # sandboxes), the whole box (the sandboxes' processes too, and whatever else runs here), and how many
            # sandboxes the pools had to start while the clock ran
            me = (cpu1.user - cpu0.user + cpu1.system - cpu0.system) / n * 1000
            box = (box1 - box0) / n * 1000
            if as_json:
                print("AB " + json.dumps({"backend": b, "pool": pool, "rate": rate, "solved": solved,
                                          "load": os.getloadavg()[0], "cpu_ms": me, "box_ms": box,
                                          "started": made}), flush=True)
                continue
            print(f"{b:7s} pool {pool}: {rate:6.2f} oracle rollouts/s ({dt / n * pool:.2f} s per rollout per worker, "
                  f"solved {solved:.0%}, load {os.getloadavg()[0]:.1f}; CPU per rollout: this process {me:.0f} ms, "
                  f"the box {box:.0f} ms; sandboxes started meanwhile: agents {made[0]}, rooms {made[1]})", flush=True)
        goal = GOALS.get(b)
        if goal and rates and not as_json:
            best, low = max(rates.values()), min(rates.values())
            first = rates.get(1)
            floor = "" if first is None else (f"; lowest pool / pool 1 = {low / first:.2f} "
                                              f"{'OK' if low >= first * 0.999 else 'UNDER'}")
            print(f"{b:7s} best {best:.2f} rollouts/s (goal >= {goal:g}/s) {'OK' if best >= goal else 'UNDER'}{floor}")
        if openclaw and b != "local":
            from clawgym.agent.openclaw import openclaw_installed, openclaw_sandbox_config

            ok, why = openclaw_installed()
            if not ok:
                print(f"{b:7s} openclaw skipped: {why}")
                continue
            with get_factory(b, openclaw_sandbox_config(SandboxConfig(**host_settings(os.environ)))) as f:
                dt, o_ok = measure(f, 2, 1, runtime="openclaw")
            print(f"{b:7s} openclaw oracle: {dt / 2:.1f} s per rollout (solved {o_ok:.0%})")


# ---- before/after in one run ----------------------------------------------------------------------
def ab(ref: str, backends: list[str], pools: list[int], n: int, rounds: int, cold_rooms: bool) -> None:
    """Alternate the library of commit `ref` (old) and this tree's (new), `rounds` runs of each per backend."""
    import subprocess
    import tempfile

    sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", ref], capture_output=True, text=True,
                         check=True).stdout.strip()
    old_dir = Path(tempfile.gettempdir()) / f"clawgym-ab-{sha}"
    if not (old_dir / "clawgym").is_dir():
        old_dir.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(REPO), "archive", sha, "clawgym"], capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(old_dir)], input=archive, check=True)
    arms = {f"old {sha}": str(old_dir), "new": str(REPO)}
    print(f"A/B: old = the library at {sha} ({old_dir}), new = this tree; {rounds} rounds, n = {n} per pool",
          flush=True)
    for b in backends:
        res: dict[str, dict[int, list[float]]] = {a: {p: [] for p in pools} for a in arms}
        for r in range(rounds):
            for arm in (list(arms) if r % 2 == 0 else list(arms)[::-1]):
                cmd = [sys.executable, str(Path(__file__).resolve()), "--code", arms[arm], "--json", "--backends", b,
                       "--pools", ",".join(map(str, pools)), "--n", str(n)] + (["--cold-rooms"] if cold_rooms else [])
                out = subprocess.run(cmd, capture_output=True, text=True, cwd=str(REPO))
                rows = [json.loads(ln[3:]) for ln in out.stdout.splitlines() if ln.startswith("AB ")]
                if not rows:
                    print(f"{b:7s} {arm}: no result (rc {out.returncode}): {out.stderr[-800:]}", flush=True)
                    continue
                for row in rows:
                    res[arm][row["pool"]].append(row["rate"])
                print(f"{b:7s} round {r + 1} {arm:12s}: " + "  ".join(
                    f"pool {x['pool']} {x['rate']:6.2f}/s" for x in rows) + f"  (load {rows[-1]['load']:.1f}; "
                    "sandboxes started while timed, agents+rooms: " + " ".join(
                        f"{x['started'][0]}+{x['started'][1]}" for x in rows) + ")", flush=True)
        med = {a: {p: statistics.median(v) for p, v in res[a].items() if v} for a in arms}
        (old, new) = arms
        for p in pools:
            if p in med[old] and p in med[new]:
                print(f"{b:7s} pool {p}: old {med[old][p]:6.2f}/s  new {med[new][p]:6.2f}/s  "
                      f"new/old {med[new][p] / med[old][p]:.2f}x (median of {len(res[new][p])} rounds)")
        for a in arms:
            if not med[a]:
                continue
            best = max(med[a], key=med[a].get)
            low = min(med[a].values())
            first = med[a].get(pools[0])
            print(f"{b:7s} {a:12s}: best pool {best} {med[a][best]:.2f}/s (goal >= {GOALS.get(b, 0):g}/s); lowest pool "
                  f"/ pool {pools[0]} = {low / first:.2f}", flush=True)


# ---- serving ---------------------------------------------------------------------------------
TOOLS = [{"type": "function", "function": {
    "name": "write", "description": "Create or overwrite a file in the workspace.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                   "required": ["path", "content"]}}},
    {"type": "function", "function": {
        "name": "exec", "description": "Run a shell command in the workspace.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]


def serve(model: str, streams: int, max_tokens: int, rounds: int, extra_args: list[str] | None = None,
          plain: bool = False) -> None:
    """Aggregate completion tokens/s: `streams` concurrent requests vs one stream at a time, same server."""
    import openai

    from clawgym.serve import ModelServer

    if model == "data/models/smollm2-135m-instruct":
        from clawgym.train.base_model import prepare_base_model

        prepare_base_model(model)
    with ModelServer(model, extra_args=extra_args) as srv:
        print(f"serve   command: {' '.join(srv.command()[1:])}", flush=True)
        client = openai.OpenAI(base_url=srv.base_url, api_key=srv.token or "none", timeout=1800, max_retries=0)

        def one(i: int) -> int:
            if plain:  # a short chat request, no tools: decode-bound (the reference measurement)
                r = client.chat.completions.create(
                    model=srv.model_name, max_tokens=max_tokens, temperature=0,
                    messages=[{"role": "user", "content": f"Tell me a long story about the number {i}."}])
                return r.usage.completion_tokens
            r = client.chat.completions.create(
                model=srv.model_name, tools=TOOLS, max_tokens=max_tokens, temperature=0,
                messages=[{"role": "system", "content": "You are an agent working in a file workspace."},
                          {"role": "user", "content": f"Write a detailed project report number {i} about the files "
                                                      f"in the workspace into report{i}.md, section by section."}])
            return r.usage.completion_tokens

        def streamed(i: int) -> list[float]:
            """The arrival time of every completion chunk (one per token) of one streamed request."""
            times = []
            stream = client.chat.completions.create(
                model=srv.model_name, tools=None if plain else TOOLS, max_tokens=max_tokens, temperature=0, stream=True,
                messages=[{"role": "system", "content": "You are an agent working in a file workspace."},
                          {"role": "user", "content": f"Write a detailed project report number {i} about the files "
                                                      f"in the workspace into report{i}.md, section by section."}])
            for chunk in stream:
                if not chunk.choices:
                    continue
                d = chunk.choices[0].delta
                if d is not None and (d.content or d.tool_calls):
                    times.append(time.perf_counter())
            return times or [0.0]

        one(0)  # warm-up (weights in cache, kernels)
        singles, multis = [], []
        for _ in range(rounds):
            t = time.perf_counter()
            toks = sum(one(i) for i in range(2))
            singles.append(toks / (time.perf_counter() - t))
            t = time.perf_counter()
            with ThreadPoolExecutor(streams) as ex:
                toks = sum(ex.map(one, range(streams)))
            multis.append(toks / (time.perf_counter() - t))
        # decode-only rate (prefill excluded): tokens after the first over the span from first to last token
        d_single = [streamed(i) for i in range(2)]
        with ThreadPoolExecutor(streams) as ex:
            d_multi = list(ex.map(streamed, range(streams)))
    dec1 = sum(len(t) - 1 for t in d_single) / max(1e-9, sum(t[-1] - t[0] for t in d_single))
    decn = sum(len(t) - 1 for t in d_multi) / max(1e-9, max(t[-1] for t in d_multi) - min(t[0] for t in d_multi))
    # steady state: only the span in which all `streams` requests are decoding (the last one has its first token,
    # none has its last), so no prefill of a late request falls into it
    lo, hi = max(t[0] for t in d_multi), min(t[-1] for t in d_multi)
    steady = sum(lo < x <= hi for t in d_multi for x in t) / (hi - lo) if hi > lo else float("nan")
    s1, sn = statistics.median(singles), statistics.median(multis)
    kind = "plain chat" if plain else "rollout-shaped (system prompt + 2 tool schemas)"
    print(f"serve   {kind}: 1 stream: {s1:.1f} tokens/s; {streams} concurrent: {sn:.1f} tokens/s aggregate "
          f"(max_tokens {max_tokens}, {rounds} rounds, median)")
    print(f"serve   end-to-end completion tokens/s (prefill included): ratio {streams} over 1 = {sn / s1:.2f}")
    print(f"serve   decode (streamed, first to last token): 1 stream {dec1:.1f} tokens/s; {streams} concurrent "
          f"{decn:.1f} tokens/s aggregate")
    print(f"serve   decode ratio {streams} over 1 = {decn / dec1:.2f} (goal >= 6) "
          f"{'OK' if decn / dec1 >= 6 else 'UNDER'}")
    print(f"serve   steady decode (all {streams} decoding, {hi - lo:.1f} s): {steady:.1f} tokens/s aggregate, "
          f"ratio {steady / dec1:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=24, help="rollouts per pool size")
    ap.add_argument("--pools", default="1,2,4,8")
    ap.add_argument("--backends", default="bwrap,docker")
    ap.add_argument("--openclaw", action="store_true", help="also time OpenClaw rollouts (slow: ~10 s per turn)")
    ap.add_argument("--serve", action="store_true", help="measure the local model server (minutes on CPU)")
    ap.add_argument("--model", default="data/models/smollm2-135m-instruct")
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2, help="serve: rounds; --ab: runs of each arm per backend")
    ap.add_argument("--ab", default="", help="before/after: alternate the library of this git commit and this tree's")
    ap.add_argument("--cold-rooms", action="store_true", help="warm only the agents' pool")
    ap.add_argument("--code", default="", help=argparse.SUPPRESS)  # the library's tree (read before the imports)
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # one AB line per pool (--ab's runs)
    ap.add_argument("--plain", action="store_true", help="serve: short chat requests without tools")
    ap.add_argument("--serve-args", default="",
                    help="extra engine (vLLM) flags, e.g. '--max-num-seqs 32'")
    ap.add_argument("--duckdb", action="store_true", help="time the DuckDB query over 1M step rows")
    ap.add_argument("--all", action="store_true", help="rollouts + --serve + --duckdb")
    a = ap.parse_args()
    pools = [int(x) for x in a.pools.split(",") if x]
    if a.ab:
        ab(a.ab, [b for b in a.backends.split(",") if b], pools, a.n, a.rounds, a.cold_rooms)
    elif a.backends:
        rollouts([b for b in a.backends.split(",") if b], pools, a.n, a.openclaw, a.cold_rooms, a.json)
    if a.serve or a.all:
        serve(a.model, a.streams, a.max_tokens, a.rounds, a.serve_args.split() or None, a.plain)
    if a.duckdb or a.all:
        import subprocess

        subprocess.run([sys.executable, str(REPO / "benchmarks" / "duckdb_steps.py")], check=False)


if __name__ == "__main__":
    main()
