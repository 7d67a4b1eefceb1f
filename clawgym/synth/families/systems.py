"""systems_automation families: logs, configs, disk usage, cron, health checks, env files, retention, CI."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from typing import Any, cast

from clawgym.synth.families.base import Ctx, csv_text, family, json_text, yaml_text

CAT = "systems_automation"
SERVICES = ["api", "auth", "billing", "search", "worker", "gateway", "notifier"]
PATHS = ["/api/orders", "/api/login", "/api/search", "/api/cart", "/api/profile", "/health", "/api/export"]


# ------------------------------------------------------------------------------------------------
@family("log_error_summary", CAT, "system status inspection", ["read", "search", "aggregate", "write"],
        ["log", "json"], "Summarise ERROR lines across rotated log files (codes, first/last seen, hottest path).")
def log_error_summary(ctx: Ctx) -> None:
    """ERROR lines across rotated logs (codes, first/last seen, hottest path) -> output/error_summary.json."""
    rng = ctx.rng
    t = dt.datetime(2026, rng.randint(1, 12), rng.randint(1, 27), rng.randint(0, 20), 0, 0)
    codes = rng.sample(["E1001", "E2040", "E3300", "E4042", "E5000", "E5031"], 4)
    lines = []
    errs = []
    for _ in range(rng.randint(40, 70)):
        t += dt.timedelta(seconds=rng.randint(5, 400))
        lvl = rng.choices(["INFO", "WARN", "ERROR", "DEBUG"], [5, 2, 2, 1])[0]
        svc, path = rng.choice(SERVICES), rng.choice(PATHS)
        ts = t.strftime("%Y-%m-%dT%H:%M:%SZ")
        if lvl == "ERROR":
            code = rng.choice(codes)
            errs.append((ts, code, path))
            lines.append(f"{ts} ERROR [{svc}] code={code} path={path} msg=\"request failed\"")
        elif lvl == "WARN":
            lines.append(f"{ts} WARN [{svc}] code={rng.choice(codes)} path={path} msg=\"retrying (not an error)\"")
        else:
            lines.append(f"{ts} {lvl} [{svc}] path={path} status=200 took={rng.randint(3, 900)}ms")
    if not errs:
        ts = (t + dt.timedelta(seconds=9)).strftime("%Y-%m-%dT%H:%M:%SZ")
        errs.append((ts, codes[0], PATHS[0]))
        lines.append(f"{ts} ERROR [api] code={codes[0]} path={PATHS[0]} msg=\"request failed\"")
    cut = len(lines) // 2
    ctx.file("logs/app.log.1", "\n".join(lines[:cut]) + "\n")  # older, rotated
    ctx.file("logs/app.log", "\n".join(lines[cut:]) + "\n")
    ctx.file("logs/cron.log", "cron: job backup ok\ncron: job rotate ok\n")
    ctx.distractors(1)
    pc = Counter(p for _, _, p in errs)
    top = sorted(pc, key=lambda p: (-pc[p], p))[0]
    res = {"total_errors": len(errs), "by_code": dict(sorted(Counter(c for _, c, _ in errs).items())),
           "first_seen": errs[0][0], "last_seen": errs[-1][0], "top_path": top}
    ctx.ask("Our app logs are in logs/app.log and the rotated logs/app.log.1 (older). Count only ERROR lines (WARN "
            "is not an error). Write output/error_summary.json with total_errors, by_code (code -> count), first_seen "
            "and last_seen (timestamps as in the log) and top_path (path with the most errors; ties -> "
            "alphabetically first).")
    ctx.expect("r", res)
    ctx.check("total", "J('output/error_summary.json')['total_errors'] == E['r']['total_errors']")
    ctx.check("by_code", "J('output/error_summary.json')['by_code'] == E['r']['by_code']")
    ctx.check("window", "J('output/error_summary.json')['first_seen'] == E['r']['first_seen'] and "
                        "J('output/error_summary.json')['last_seen'] == E['r']['last_seen']")
    ctx.check("top_path", "J('output/error_summary.json')['top_path'] == E['r']['top_path']")
    ctx.exec("ls -la logs/")
    ctx.read("logs/app.log.1")
    ctx.read("logs/app.log")
    ctx.exec("cat logs/app.log.1 logs/app.log | grep ' ERROR ' | grep -o 'code=[A-Z0-9]*' | sort | uniq -c")
    ctx.write("output/error_summary.json", json_text(res))
    ctx.verify_json("output/error_summary.json")


# ------------------------------------------------------------------------------------------------
@family("ini_to_yaml_migration", CAT, "environment configuration and deployment", ["read", "transform", "write", "verify"],
        ["ini", "md", "yaml"], "Migrate a legacy INI config to the new YAML schema following migration notes.", 3)
def ini_to_yaml_migration(ctx: Ctx) -> None:
    """Legacy INI config migrated per docs/MIGRATION.md -> output/app.yaml."""
    rng = ctx.rng
    db_host = rng.choice(["db.internal", "10.0.3.12", "pg-primary.local"])
    port = rng.choice([5432, 5433, 6432])
    workers = rng.randint(2, 16)
    debug = rng.choice([True, False])
    cache_ttl = rng.choice([60, 300, 900])
    log_level = rng.choice(["info", "warning", "debug"])
    yn = lambda b: rng.choice(["yes", "on", "true"]) if b else rng.choice(["no", "off", "false"])  # noqa: E731
    ini = (f"; legacy config - do not edit by hand\n[server]\nworkers = {workers}\ndebug = {yn(debug)}\n"
           f"legacy_mode = yes\n\n[database]\ndb_host = {db_host}\ndb_port = {port}\n"
           f"db_pool = {rng.randint(5, 20)}\n\n[cache]\nttl_seconds = {cache_ttl}\nenabled = {yn(True)}\n\n"
           f"[logging]\nlevel = {log_level.upper()}\n")
    notes = ("# Migrating to config v2\n\n"
             "1. The new file is YAML with top-level keys `server`, `database`, `cache`, `logging`.\n"
             "2. `database.db_host` becomes `database.host`, `db_port` becomes `port` (integer).\n"
             "3. `db_pool` is removed (the pool is sized automatically).\n"
             "4. `server.legacy_mode` is removed.\n"
             "5. Booleans (yes/no/on/off/true/false) become real YAML booleans; numbers become integers.\n"
             "6. `cache.ttl_seconds` is renamed `cache.ttl`.\n"
             "7. `logging.level` is lower-case.\n"
             "8. Add `version: 2` at the top level.\n")
    new = {"version": 2, "server": {"workers": workers, "debug": debug},
           "database": {"host": db_host, "port": port},
           "cache": {"ttl": cache_ttl, "enabled": True}, "logging": {"level": log_level}}
    ctx.file("config/app.ini", ini)
    ctx.file("docs/MIGRATION.md", notes)
    ctx.distractors(2)
    ctx.ask("Migrate config/app.ini to the v2 format described in docs/MIGRATION.md and save it as output/app.yaml. "
            "Keep config/app.ini unchanged.")
    ctx.expect("new", new)
    for sec in ("server", "database", "cache", "logging"):
        ctx.check(f"section_{sec}", f"Y('output/app.yaml')[{sec!r}] == E['new'][{sec!r}]")
    ctx.check("version_and_no_extras", "Y('output/app.yaml') == E['new']")
    ctx.keep_inputs("config/app.ini")
    ctx.read("docs/MIGRATION.md")
    ctx.read("config/app.ini")
    ctx.write("output/app.yaml", yaml_text(new))
    ctx.exec("python3 -c \"import yaml; print(yaml.safe_load(open('output/app.yaml')))\"")


# ------------------------------------------------------------------------------------------------
@family("disk_usage_report", CAT, "automated inspection and handling", ["inspect", "compute", "sort", "write"],
        ["csv", "txt"], "Measure file counts and bytes per top-level data folder and list the largest files.")
def disk_usage_report(ctx: Ctx) -> None:
    """File counts and bytes per top-level data folder -> output/usage.csv and output/largest.txt."""
    rng = ctx.rng
    dirs = rng.sample(["raw", "processed", "exports", "images", "models", "tmp", "reports"], 4)
    sizes: dict[str, list[tuple[str, int]]] = {}
    for d in dirs:
        sizes[d] = []
        for i in range(rng.randint(2, 5)):
            sub = rng.choice(["", "2026/", "old/"])
            name = f"data/{d}/{sub}{rng.choice(['part', 'file', 'chunk', 'blob'])}_{i}.{rng.choice(['bin', 'csv', 'dat'])}"
            n = rng.randint(100, 20000)
            unit = f"{d}-{i}-"
            ctx.file(name, (unit * (n // len(unit) + 1))[:n])  # exactly n bytes (the answer's sizes)
            sizes[d].append((name, n))
    rows = sorted(({"dir": d, "files": len(v), "bytes": sum(n for _, n in v)} for d, v in sizes.items()),
                  key=lambda r: (-cast(int, r["bytes"]), r["dir"]))
    largest = [p for p, _ in sorted([x for v in sizes.values() for x in v], key=lambda x: (-x[1], x[0]))[:3]]
    ctx.distractors(1)
    ctx.ask("The data/ folder is filling the disk. For each top-level folder under data/ count the files (recursively) "
            "and their total size in bytes. Write output/usage.csv with columns dir,files,bytes (dir = folder name "
            "only), biggest first. Then write output/largest.txt with the paths (relative to the workspace, e.g. "
            "data/x/y.bin) of the 3 largest files, largest first.")
    ctx.expect("rows", rows)
    ctx.expect("largest", largest)
    ctx.check("bytes", "rows_score(C('output/usage.csv'), E['rows'], 'dir', ['bytes'], tol=0)")
    ctx.check("files", "rows_score(C('output/usage.csv'), E['rows'], 'dir', ['files'], tol=0)")
    ctx.check("order", "[r['dir'] for r in C('output/usage.csv')] == [r['dir'] for r in E['rows']]")
    ctx.check("largest", "[l.strip().lstrip('./') for l in T('output/largest.txt').splitlines() if l.strip()] == E['largest']")
    ctx.exec("du -sb data/* && find data -type f | wc -l")
    ctx.exec("for d in data/*/; do echo \"$(basename $d),$(find $d -type f | wc -l),$(find $d -type f -printf '%s\\n' | "
             "awk '{s+=$1} END {print s}')\"; done")
    ctx.exec("find data -type f -printf '%s %p\\n' | sort -k1,1nr -k2 | head -3")
    ctx.write("output/usage.csv", csv_text(["dir", "files", "bytes"], [[r["dir"], r["files"], r["bytes"]] for r in rows]))
    ctx.write("output/largest.txt", "\n".join(largest) + "\n")


# ------------------------------------------------------------------------------------------------
_DOW = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]


@family("cron_from_spec", CAT, "scheduled task execution", ["read", "transform", "write"],
        ["yaml", "txt"], "Translate structured job schedules into a crontab with comments.")
def cron_from_spec(ctx: Ctx) -> None:
    """Structured job schedules translated into a commented crontab -> output/crontab.txt."""
    rng = ctx.rng
    jobs, lines = [], []
    names = rng.sample(["backup-db", "rotate-logs", "sync-mirror", "send-digest", "prune-cache", "renew-certs",
                        "export-metrics", "vacuum-db"], rng.randint(4, 6))
    for n in names:
        kind = rng.choice(["every_minutes", "daily_at", "weekly", "monthly", "weekdays_at"])
        h, m = rng.randint(0, 23), rng.choice([0, 5, 15, 30, 45])
        at = f"{h:02d}:{m:02d}"
        sched: dict[str, Any]
        if kind == "every_minutes":
            k = rng.choice([5, 10, 15, 20, 30])
            sched, expr = {"every_minutes": k}, f"*/{k} * * * *"
        elif kind == "daily_at":
            sched, expr = {"daily_at": at}, f"{m} {h} * * *"
        elif kind == "weekly":
            d = rng.randrange(7)
            sched, expr = {"weekly": {"day": _DOW[d], "at": at}}, f"{m} {h} * * {d}"
        elif kind == "monthly":
            dom = rng.randint(1, 28)
            sched, expr = {"monthly": {"day": dom, "at": at}}, f"{m} {h} {dom} * *"
        else:
            sched, expr = {"weekdays_at": at}, f"{m} {h} * * 1-5"
        cmd = f"/opt/jobs/{n}.sh"
        jobs.append({"name": n, "command": cmd, "schedule": sched})
        lines.append(f"{expr} {cmd} # {n}")
    ctx.yaml("ops/jobs.yaml", {"jobs": jobs})
    ctx.file("ops/README.md", "Job specs. Day names: sun=0 ... sat=6. Times are HH:MM, server time.\n")
    ctx.distractors(2)
    ctx.ask("Turn ops/jobs.yaml into a crontab. Write output/crontab.txt with one line per job, in the same order: "
            "'<minute> <hour> <day-of-month> <month> <day-of-week> <command> # <name>'. Use */N for every N minutes, "
            "1-5 for weekdays, numeric day-of-week (sun=0), and no leading zeros in numbers.")
    ctx.expect("lines", lines)
    ctx.grade.helper("def cron_lines(t):\n    return [' '.join(l.split()) for l in (t or '').splitlines() "
                     "if l.strip() and not l.strip().startswith('#')]")
    ctx.check("expressions", "frac(sum(1 for a, b in zip(cron_lines(T('output/crontab.txt')), E['lines']) "
                             "if a.split()[:6] == b.split()[:6]), len(E['lines']))")
    ctx.check("exact", "cron_lines(T('output/crontab.txt')) == [' '.join(l.split()) for l in E['lines']]")
    ctx.read("ops/README.md")
    ctx.read("ops/jobs.yaml")
    ctx.write("output/crontab.txt", "\n".join(lines) + "\n")
    ctx.exec("awk '{print NF}' output/crontab.txt | sort -u")


# ------------------------------------------------------------------------------------------------
@family("host_health_incident", CAT, "incident response and reliability", ["read", "compare", "aggregate", "write"],
        ["json", "yaml", "md"], "Check host health snapshots against thresholds and write an incident summary.", 3)
def host_health_incident(ctx: Ctx) -> None:
    """Host snapshots checked against thresholds -> output/incident.json and output/incident.md."""
    rng = ctx.rng
    th = {"cpu_pct": rng.choice([85, 90]), "mem_pct": rng.choice([85, 90, 95]), "disk_pct": rng.choice([80, 90])}
    svcs = ["nginx", "postgres", "redis", "worker"]
    hosts = [f"{rng.choice(['web', 'db', 'app', 'cache'])}-{i:02d}" for i in range(1, rng.randint(5, 8))]
    failing: list[dict[str, Any]] = []
    for h in hosts:
        snap: dict[str, Any] = {"host": h, "cpu_pct": rng.randint(10, 99), "mem_pct": rng.randint(20, 99), "disk_pct": rng.randint(30, 97),
                "services": {s: ("down" if rng.random() < 0.12 else "up") for s in rng.sample(svcs, 3)}}
        ctx.json(f"health/{h}.json", snap)
        reasons = [k for k in ("cpu_pct", "mem_pct", "disk_pct") if snap[k] >= th[k]]
        reasons += [f"{s}_down" for s, st in sorted(snap["services"].items()) if st == "down"]
        if reasons:
            failing.append({"host": h, "reasons": reasons})
    if not failing:
        h = hosts[0]
        snap = json.loads(ctx.files[f"health/{h}.json"].content)
        snap["disk_pct"] = 99
        ctx.json(f"health/{h}.json", snap)
        failing.append({"host": h, "reasons": [k for k in ("cpu_pct", "mem_pct", "disk_pct") if snap[k] >= th[k]]
                        + [f"{s}_down" for s, st in sorted(snap["services"].items()) if st == "down"]})
    failing.sort(key=lambda f: f["host"])
    ctx.yaml("config/thresholds.yaml", {"alert_when_at_or_above": th})
    ctx.distractors(1)
    ctx.ask("Check every snapshot in health/ against config/thresholds.yaml. A host fails if any metric is at or above "
            "its threshold or any service is down. Write output/incident.json: {\"failing\": [{host, reasons}]} sorted "
            "by host, reasons in the order cpu_pct, mem_pct, disk_pct, then '<service>_down' for down services "
            "(A-Z). Then write output/incident.md: a short incident note with one bullet per failing host.")
    ctx.expect("f", failing)
    ctx.check("hosts", "set_score([x['host'] for x in J('output/incident.json')['failing']], [x['host'] for x in E['f']])")
    ctx.check("reasons", "rows_score([dict(host=x['host'], r='|'.join(x['reasons'])) for x in J('output/incident.json')['failing']],"
                         " [dict(host=x['host'], r='|'.join(x['reasons'])) for x in E['f']], 'host', ['r'])")
    ctx.check("note", "frac(sum(1 for x in E['f'] if any(x['host'] in b for b in md_bullets(T('output/incident.md')))), len(E['f']))"
                      " * (1.0 if len(md_bullets(T('output/incident.md'))) == len(E['f']) else 0.5)")
    ctx.rubric_rule("incident_clarity", "output/incident.md", {"0": "missing", "0.5": "lists hosts only",
                                                              "1": "states impact and next steps per host"})
    ctx.exec("ls health/")
    ctx.read("config/thresholds.yaml")
    ctx.exec("python3 -c \"import glob, json\nfor f in sorted(glob.glob('health/*.json')):\n    d = json.load(open(f)); "
             "print(d['host'], d['cpu_pct'], d['mem_pct'], d['disk_pct'], d['services'])\"")
    ctx.write("output/incident.json", json_text({"failing": failing}))
    ctx.write("output/incident.md", "# Incident note\n\n" + "".join(
        f"- {f['host']}: {', '.join(f['reasons'])} - investigate and remediate\n" for f in failing))


# ------------------------------------------------------------------------------------------------
@family("env_drift_check", CAT, "DevOps and continuous delivery", ["read", "compare", "write", "redact"],
        ["env", "json"], "Diff staging vs production .env files without leaking secret values.")
def env_drift_check(ctx: Ctx) -> None:
    """Staging vs production .env diff without secret values -> output/env_diff.json."""
    rng = ctx.rng
    keys = rng.sample(["DATABASE_URL", "REDIS_URL", "LOG_LEVEL", "FEATURE_CHECKOUT_V2", "API_KEY", "SENTRY_DSN",
                       "MAX_WORKERS", "SMTP_HOST", "JWT_SECRET", "CDN_BASE", "TIMEOUT_MS", "S3_BUCKET"], 9)
    stg, prod = {}, {}
    for k in keys:
        v = f"{k.lower()}-{rng.randint(100, 999)}"
        r = rng.random()
        if r < 0.2:
            stg[k] = v
        elif r < 0.35:
            prod[k] = v
        elif r < 0.6:
            stg[k], prod[k] = v + "-stg", v
        else:
            stg[k] = prod[k] = v
    if not any(k not in prod for k in stg):
        stg["DEBUG_TOOLBAR"] = "1"
    secrets = {k: v for d in (stg, prod) for k, v in d.items() if any(s in k for s in ("KEY", "SECRET", "URL", "DSN"))}

    def env(d):
        ks = list(d)
        rng.shuffle(ks)
        return "# generated\n" + "".join(f"{k}={d[k]}\n" + ("\n" if rng.random() < .2 else "") for k in ks)
    ctx.file("deploy/.env.staging", env(stg))
    ctx.file("deploy/.env.production", env(prod))
    ctx.distractors(2)
    res = {"missing_in_production": sorted(k for k in stg if k not in prod),
           "missing_in_staging": sorted(k for k in prod if k not in stg),
           "different": sorted(k for k in stg if k in prod and stg[k] != prod[k])}
    ctx.ask("Before the release, compare deploy/.env.staging with deploy/.env.production. Write output/env_diff.json "
            "with three sorted lists of variable NAMES: missing_in_production, missing_in_staging, different (present "
            "in both with different values). Never copy any values into the output - some are secrets.")
    ctx.expect("r", res)
    ctx.expect("secret_values", sorted(set(secrets.values())))
    for k in res:
        ctx.check(k, f"list_equal(J('output/env_diff.json')[{k!r}], E['r'][{k!r}]) if E['r'][{k!r}] else "
                     f"J('output/env_diff.json')[{k!r}] == []")
    ctx.check("no_leak", "set(J('output/env_diff.json')) >= set(E['r']) and not any(v in T('output/env_diff.json') for v in E['secret_values'])")
    ctx.read("deploy/.env.staging")
    ctx.read("deploy/.env.production")
    ctx.exec("diff <(grep -v '^#' deploy/.env.staging | grep . | cut -d= -f1 | sort) "
             "<(grep -v '^#' deploy/.env.production | grep . | cut -d= -f1 | sort); true")
    ctx.write("output/env_diff.json", json_text(res))
    ctx.verify_json("output/env_diff.json")

    def leak(ov):
        d = json.loads(ov["output/env_diff.json"])
        d["note"] = "value was " + (sorted(secrets.values()) or ["x"])[0]
        return {**ov, "output/env_diff.json": json_text(d).encode()}
    if secrets:
        ctx.mutation("leaks_secret", leak)


# ------------------------------------------------------------------------------------------------
@family("backup_retention", CAT, "automated inspection and handling", ["read", "filter", "compute", "write"],
        ["txt", "yaml", "json"], "Apply a backup retention policy per host and list what to delete.", 3)
def backup_retention(ctx: Ctx) -> None:
    """Backup retention policy applied per host -> output/delete.txt and output/kept.json."""
    rng = ctx.rng
    hosts = rng.sample(["web01", "db01", "files", "mail", "ci"], 3)
    keep_last = rng.choice([3, 4, 5])
    end = dt.date(2026, rng.randint(2, 12), rng.randint(1, 28))
    listing, delete, kept = [], [], {}
    for h in hosts:
        days = sorted({end - dt.timedelta(days=rng.randint(0, 70)) for _ in range(rng.randint(8, 12))}, reverse=True)
        keep = set(days[:keep_last]) | {d for d in days if d.day == 1}
        kept[h] = len(keep)
        for d in days:
            f = f"{h}-{d.isoformat()}.tar.gz"
            listing.append(f"{rng.randint(10, 900)}M  {f}")
            if d not in keep:
                delete.append(f)
    rng.shuffle(listing)
    ctx.file("backups/listing.txt", "\n".join(listing) + "\n")
    ctx.yaml("backups/policy.yaml", {"per_host": {"keep_newest": keep_last, "always_keep": "backups taken on the 1st of a month"},
                                     "file_pattern": "<host>-<YYYY-MM-DD>.tar.gz"})
    ctx.distractors(2)
    delete.sort()
    ctx.ask("Apply backups/policy.yaml to the backups in backups/listing.txt (size then file name per line). Write "
            "output/delete.txt with the file names to delete, one per line, sorted, and output/kept.json mapping each "
            "host to the number of backups it keeps.")
    ctx.expect("delete", delete)
    ctx.expect("kept", kept)
    ctx.check("delete_set", "set_score([l.strip() for l in T('output/delete.txt').splitlines() if l.strip()], E['delete'])")
    ctx.check("delete_sorted", "[l.strip() for l in T('output/delete.txt').splitlines() if l.strip()] == E['delete']")
    ctx.check("kept", "J('output/kept.json') == E['kept']")
    ctx.read("backups/policy.yaml")
    ctx.read("backups/listing.txt")
    ctx.exec("awk '{print $2}' backups/listing.txt | cut -d- -f1 | sort | uniq -c")
    ctx.write("output/delete.txt", "\n".join(delete) + "\n")
    ctx.write("output/kept.json", json_text(kept))


# ------------------------------------------------------------------------------------------------
@family("junit_failure_digest", CAT, "DevOps and continuous delivery", ["read", "parse", "aggregate", "write"],
        ["xml", "json"], "Parse JUnit XML reports from several CI shards into a failure digest.")
def junit_failure_digest(ctx: Ctx) -> None:
    """JUnit XML reports from several CI shards -> output/ci_digest.json failure digest."""
    rng = ctx.rng
    mods = rng.sample(["test_api", "test_models", "test_utils", "test_cli", "test_auth", "test_io"], 3)
    tot: Counter[str] = Counter()
    failed = []
    for shard in range(1, rng.randint(2, 4)):
        cases = []
        for m in rng.sample(mods, 2):
            for i in range(rng.randint(3, 6)):
                name = f"test_{rng.choice(['parse', 'load', 'save', 'login', 'render', 'sum'])}_{i}"
                outcome = rng.choices(["pass", "failure", "error", "skipped"], [12, 2, 1, 1])[0]
                tot["tests"] += 1
                body = ""
                if outcome == "failure":
                    tot["failures"] += 1
                    body = f'<failure message="AssertionError: expected {rng.randint(1, 9)}">trace</failure>'
                elif outcome == "error":
                    tot["errors"] += 1
                    body = '<error message="RuntimeError: boom">trace</error>'
                elif outcome == "skipped":
                    tot["skipped"] += 1
                    body = '<skipped message="needs gpu"/>'
                full = f"tests.{m}::{name}"
                if outcome in ("failure", "error") and full not in failed:
                    failed.append(full)
                cases.append(f'    <testcase classname="tests.{m}" name="{name}" time="0.{rng.randint(1, 99):02d}">{body}</testcase>')
        xml = ('<?xml version="1.0" encoding="utf-8"?>\n<testsuites>\n  <testsuite name="shard%d">\n%s\n  </testsuite>\n'
               '</testsuites>\n' % (shard, "\n".join(cases)))
        ctx.file(f"ci/reports/junit-shard{shard}.xml", xml)
    ctx.file("ci/pipeline.yaml", "stages: [lint, test, deploy]\ntest:\n  shards: 3\n")
    ctx.distractors(1)
    res = {"tests": tot["tests"], "failures": tot["failures"], "errors": tot["errors"], "skipped": tot["skipped"],
           "pass_rate": round((tot["tests"] - tot["failures"] - tot["errors"] - tot["skipped"]) / tot["tests"] * 100, 2),
           "failed_tests": sorted(failed)}
    ctx.ask("CI ran in shards; the JUnit reports are in ci/reports/. Write output/ci_digest.json with the totals over all "
            "shards: tests, failures, errors, skipped, pass_rate (percent of all tests that passed, 2 decimals) and "
            "failed_tests: sorted list of '<classname>::<name>' for every failure or error.")
    ctx.expect("r", res)
    ctx.check("totals", "all(J('output/ci_digest.json')[k] == E['r'][k] for k in ('tests', 'failures', 'errors', 'skipped'))")
    ctx.check("pass_rate", "close(J('output/ci_digest.json')['pass_rate'], E['r']['pass_rate'])")
    ctx.check("failed_tests", "list_equal(J('output/ci_digest.json')['failed_tests'], E['r']['failed_tests']) "
                              "if E['r']['failed_tests'] else J('output/ci_digest.json')['failed_tests'] == []")
    ctx.exec("ls ci/reports/")
    ctx.exec("python3 - <<'EOF'\nimport glob, xml.etree.ElementTree as ET\nfor f in sorted(glob.glob('ci/reports/*.xml')):\n"
             "    r = ET.parse(f).getroot()\n    print(f, len(r.findall('.//testcase')), len(r.findall('.//failure')))\nEOF")
    ctx.write("output/ci_digest.json", json_text(res))
    ctx.verify_json("output/ci_digest.json")
