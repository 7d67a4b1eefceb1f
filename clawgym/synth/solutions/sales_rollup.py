import os
import csv
import json
import re

seen, reg, prod = set(), {}, {}
for r in csv.DictReader(open("input/sales_export.csv")):
    if r["order_id"] in seen:
        continue
    seen.add(r["order_id"])
    v = int(r["qty"]) * float(re.sub(r"[$,\s]", "", r["unit_price"]))
    k = r["region"].strip().title()
    reg[k] = reg.get(k, 0) + v
    prod[r["product"]] = prod.get(r["product"], 0) + v
os.makedirs("output", exist_ok=True)
out = {"total_revenue": round(sum(reg.values()), 2), "orders": len(seen),
       "revenue_by_region": {k: round(v, 2) for k, v in sorted(reg.items())},
       "top_product": max(sorted(prod), key=lambda p: prod[p])}
json.dump(out, open("output/summary.json", "w"), indent=2)
