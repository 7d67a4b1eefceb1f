import os
import csv
import json
import re

inv = list(csv.DictReader(open("finance/invoices.csv")))
paid = {int(i["invoice"][4:]): 0.0 for i in inv}
un = []
for line in open("finance/bank_payments.jsonl"):
    if not line.strip():
        continue
    p = json.loads(line)
    m = re.search(r"inv(?:oice)?\W*(\d+)", p["memo"], re.I)
    if m and int(m[1]) in paid:
        paid[int(m[1])] += float(p["amount"])
    else:
        un.append(p["id"])
os.makedirs("output", exist_ok=True)
with open("output/reconciliation.csv", "w") as f:
    f.write("invoice,paid,balance,status\n")
    for i in inv:
        pd = round(paid[int(i["invoice"][4:])], 2)
        b = round(float(i["amount"]) - pd, 2)
        st = "unpaid" if pd == 0 else "paid" if b == 0 else "partial" if b > 0 else "overpaid"
        f.write(f"{i['invoice']},{pd:.2f},{b:.2f},{st}\n")
json.dump(sorted(un), open("output/unmatched_payments.json", "w"))
