# args: \|pct_change\| >= (\d+(?:\.\d+)?)
import os
import csv
import sys
import json

limit = float(sys.argv[1])
rows = [r for r in csv.reader(open("input/daily_metrics.csv")) if r and not r[0].startswith("#")]
head, days = rows[0], rows[1:]
out = {}
for j, m in enumerate(head[1:], 1):
    v = [float(r[j]) for r in days]
    prev, cur = sum(v[:7]) / 7, sum(v[7:]) / 7
    pct = round((cur - prev) / prev * 100, 2) if prev else 0.0
    out[m] = {"prev_avg": round(prev, 2), "curr_avg": round(cur, 2), "pct_change": pct, "alert": abs(pct) >= limit}
os.makedirs("output", exist_ok=True)
json.dump(out, open("output/trends.json", "w"), indent=2)
open("output/alerts.txt", "w").write("".join(m + "\n" for m in sorted(m for m in out if out[m]["alert"])))
