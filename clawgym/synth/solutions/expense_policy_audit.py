import os
import csv
import yaml

p = yaml.safe_load(open("input/policy.yaml"))
lim, rec = p["limits_per_item"], p["receipt_required_above"]
seen = set()
os.makedirs("output", exist_ok=True)
with open("output/flagged.csv", "w") as f:
    f.write("id,reason\n")
    for r in csv.DictReader(open("input/expenses.csv")):
        a = float(r["amount"])
        k = (r["employee"], r["date"], r["category"], a)
        why = []
        if k in seen:
            why.append("duplicate")
        seen.add(k)
        if a > lim[r["category"]]:
            why.append("over_limit")
        if r["receipt"] == "no" and a > rec:
            why.append("missing_receipt")
        if why:
            f.write(f"{r['id']},{';'.join(why)}\n")
