import os
import csv
import json

d = json.load(open("input/plans.json"))
use = [int(list(r.values())[1]) for r in csv.DictReader(open("input/usage_last_year.csv"))]
rows = []
for p in d["plans"]:
    extra = sum(max(0, u - p["included"]) * p["per_extra_unit"] for u in use)
    rows.append((round(12 * p["monthly_fee"] + extra + p["setup_fee"], 2), p["name"]))
rows.sort()
os.makedirs("output", exist_ok=True)
t = "# Plan decision\n\n| plan | annual_cost |\n|---|---|\n"
for c, n in rows:
    t += f"| {n} | {c:.2f} |\n"
t += f"\nRecommendation: {rows[0][1]}\n\n"
t += (f"It has the lowest annual cost for last year's usage of {sum(use)} {d['unit']}s: monthly fees, "
      "setup fee and the extra units above each plan's included allowance were all counted.\n")
open("output/decision.md", "w").write(t)
