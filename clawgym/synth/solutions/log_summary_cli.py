import os
import subprocess

cli = r'''import json, re, sys

L = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\s+(DEBUG|INFO|WARN|ERROR)\s+\[([\w.-]+)\]\s+(.*)$")
lv = {k: 0 for k in ("DEBUG", "INFO", "WARN", "ERROR")}
err, comp, ts, bad = {}, {}, [], 0
for line in open(sys.argv[1], encoding="utf-8"):
    m = L.match(line.rstrip("\n"))
    if not m:
        bad += line.strip() != ""
        continue
    t, lvl, c, msg = m.groups()
    ts.append(t)
    lv[lvl] += 1
    if lvl == "ERROR":
        err[msg] = err.get(msg, 0) + 1
        comp[c] = comp.get(c, 0) + 1
top = sorted(err, key=lambda k: (-err[k], k))
print(json.dumps({"levels": lv, "top_error": top[0] if top else None,
                  "errors_by_component": dict(sorted(comp.items())), "first_ts": ts[0] if ts else None,
                  "last_ts": ts[-1] if ts else None, "malformed_lines": bad}, indent=2))
'''
os.makedirs("scripts", exist_ok=True)
os.makedirs("output", exist_ok=True)
open("scripts/log_summary.py", "w").write(cli)
r = subprocess.run(["python3", "scripts/log_summary.py", "logs/app.log"], capture_output=True, text=True)
open("output/log_summary.json", "w").write(r.stdout)
