import os
import json
import yaml

mods = {m["id"]: m for m in yaml.safe_load(open("course/modules.yaml"))["modules"]}
cap = yaml.safe_load(open("course/constraints.yaml"))["max_hours_per_week"]
order = []
while len(order) < len(mods):
    order.append(min(m for m in mods if m not in order and all(d in order for d in mods[m]["prerequisites"])))
weeks = []
for m in order:
    h = mods[m]["hours"]
    if not weeks or weeks[-1]["hours"] + h > cap:
        weeks.append({"week": len(weeks) + 1, "modules": [], "hours": 0})
    weeks[-1]["modules"].append(m)
    weeks[-1]["hours"] += h
os.makedirs("output", exist_ok=True)
json.dump({"total_weeks": len(weeks), "weeks": weeks}, open("output/curriculum.json", "w"), indent=2)
t = "# Curriculum\n\n| week | module | title | hours |\n|---|---|---|---|\n"
for w in weeks:
    for m in w["modules"]:
        t += f"| {w['week']} | {m} | {mods[m]['title']} | {mods[m]['hours']} |\n"
open("output/curriculum.md", "w").write(t)
