import os
import re
import json
import yaml

ts = yaml.safe_load(open("plan/tasks.yaml"))["tasks"]
dur = {t["id"]: int(re.match(r"\d+", str(t["duration"]))[0]) for t in ts}
dep = {t["id"]: t["depends_on"] or [] for t in ts}
es, ef = {}, {}
while len(ef) < len(ts):
    for t in sorted(dep):
        if t not in ef and all(d in ef for d in dep[t]):
            es[t] = max([ef[d] for d in dep[t]], default=0)
            ef[t] = es[t] + dur[t]
total = max(ef.values())
ls = {}
while len(ls) < len(ts):
    for t in sorted(dep):
        succ = [s for s in dep if t in dep[s]]
        if t not in ls and all(s in ls for s in succ):
            ls[t] = min([ls[s] for s in succ], default=total) - dur[t]
rows = sorted(dep, key=lambda t: (es[t], t))
os.makedirs("output", exist_ok=True)
with open("output/schedule.csv", "w") as f:
    f.write("id,earliest_start,earliest_finish,slack\n")
    for t in rows:
        f.write(f"{t},{es[t]},{ef[t]},{ls[t] - es[t]}\n")
crit = sorted(t for t in dep if ls[t] == es[t])
json.dump({"project_days": total, "critical_tasks": crit}, open("output/plan_summary.json", "w"), indent=2)
