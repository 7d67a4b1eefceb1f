import os
import csv
import re

budget = {r["cost_centre"].strip(): float(r["budget"]) for r in csv.DictReader(open("input/budget_q1.csv"))}
names = {c.lower(): c for c in budget}
actual = {c: 0.0 for c in budget}
for r in csv.DictReader(open("input/actuals_q1.csv")):
    actual[names[r["cost_centre"].strip().lower()]] += float(re.sub(r"[$,\s]", "", r["amount"]))
rows = []
os.makedirs("output", exist_ok=True)
with open("output/variance.csv", "w") as f:
    f.write("cost_centre,budget,actual,variance,variance_pct\n")
    for c in sorted(budget):
        a, b = round(actual[c], 2), budget[c]
        v = round(a - b, 2)
        rows.append((c, v))
        f.write(f"{c},{b:g},{a:.2f},{v:.2f},{(a - b) / b * 100:.2f}\n")
with open("output/overruns.md", "w") as f:
    f.write("# Q1 overruns\n\n")
    for c, v in sorted([r for r in rows if r[1] > 0], key=lambda r: -r[1]):
        f.write(f"- {c}: {v:.2f}\n")
