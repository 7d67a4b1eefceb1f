import os
import json
import yaml

th = yaml.safe_load(open("config/thresholds.yaml"))["alert_when_at_or_above"]
fail = []
for f in sorted(os.listdir("health")):
    h = json.load(open(os.path.join("health", f)))
    r = [k for k in ("cpu_pct", "mem_pct", "disk_pct") if h[k] >= th[k]]
    r += [f"{s}_down" for s, st in sorted(h["services"].items()) if st == "down"]
    if r:
        fail.append({"host": h["host"], "reasons": r})
fail.sort(key=lambda x: x["host"])
os.makedirs("output", exist_ok=True)
json.dump({"failing": fail}, open("output/incident.json", "w"), indent=2)
m = f"# Incident note\n\n{len(fail)} host(s) failed the health check against the thresholds.\n\n"
for x in fail:
    m += f"- {x['host']}: {', '.join(x['reasons'])}. Impact: degraded service. Next step: investigate and remediate.\n"
open("output/incident.md", "w").write(m)
