import os
import csv
import json
import re

t = open("docs/handbook.md").read()
n = {}
for r in csv.DictReader(open("docs/glossary.csv")):
    a = r["old_name"].strip()
    t, n[a] = re.subn(rf"\b{re.escape(a)}\b", r["new_name"].strip(), t)
os.makedirs("output", exist_ok=True)
open("output/handbook.md", "w").write(t)
json.dump(n, open("output/changes.json", "w"), indent=2)
