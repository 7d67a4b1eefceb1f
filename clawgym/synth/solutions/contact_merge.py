import os
import csv
import re

p = {}
for r in csv.DictReader(open("input/phone_contacts.csv")):
    e = r["email"].strip().lower()
    n = r["full_name"].strip()
    if " " not in n:
        n = e.split("@")[0].replace(".", " ").title()
    p[e] = {"name": n, "phone": re.sub(r"\D", "", r["mobile"])[-9:]}
for r in csv.DictReader(open("input/crm_export.csv")):
    e = r["E-mail"].strip().lower()
    ph = re.sub(r"\D", "", r["Phone"])[-9:] or p.get(e, {}).get("phone", "")
    p[e] = {"name": r["Name"].strip(), "phone": ph}
os.makedirs("output", exist_ok=True)
with open("output/contacts.csv", "w") as f:
    w = csv.writer(f)
    w.writerow(["email", "name", "phone"])
    for e in sorted(p):
        w.writerow([e, p[e]["name"], p[e]["phone"]])
