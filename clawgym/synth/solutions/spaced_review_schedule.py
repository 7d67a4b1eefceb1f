import os
import re
import csv
import json
import datetime as dt

rule = open("study/rules.md").read()
g = float(re.search(r"good: new interval = interval x ([\d.]+)", rule)[1])
e = float(re.search(r"easy: new interval = interval x [\d.]+ x ([\d.]+)", rule)[1])
rows, load = [], {}
for r in csv.DictReader(open("study/reviews.csv")):
    iv, res = int(r["interval_days"]), r["result"].strip().lower()
    new = 1 if res == "again" else int(round(iv * g)) if res == "good" else int(round(iv * g * e))
    day = dt.date.fromisoformat(r["reviewed_on"].strip().replace("/", "-"))
    due = (day + dt.timedelta(days=new)).isoformat()
    rows.append((due, r["card"], new))
    load[due] = load.get(due, 0) + 1
os.makedirs("output", exist_ok=True)
with open("output/next_reviews.csv", "w") as f:
    f.write("card,new_interval,next_due\n")
    for due, c, n in sorted(rows):
        f.write(f"{c},{n},{due}\n")
json.dump(dict(sorted(load.items())), open("output/daily_load.json", "w"), indent=2)
