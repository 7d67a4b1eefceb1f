import os
import csv
import json
import yaml

tm = yaml.safe_load(open("backlog/team.yaml"))
cap = int(sum(m["capacity_points"] for m in tm["members"]) * tm["focus_factor"])
items = [r for r in csv.DictReader(open("backlog/backlog.csv")) if r["status"].strip().lower() == "todo"]
items.sort(key=lambda r: (r["priority"].strip().upper(), r["id"]))
sel, dfr, left = [], [], cap
for r in items:
    p = int(r["points"])
    if p <= left:
        sel.append(r)
        left -= p
    else:
        dfr.append(r["id"])
os.makedirs("output", exist_ok=True)
out = {"capacity": cap, "selected": [r["id"] for r in sel], "committed_points": cap - left, "deferred": sorted(dfr)}
json.dump(out, open("output/sprint_plan.json", "w"), indent=2)
t = f"# Sprint plan\n\nCapacity: {cap} points\n\n| id | title | points |\n|---|---|---|\n"
for r in sel:
    t += f"| {r['id']} | {r['title']} | {r['points']} |\n"
open("output/sprint_plan.md", "w").write(t)
