import os
import json
import yaml

p = yaml.safe_load(open("input/policy.yaml"))
secs = open("input/contract.md").read().lower().split("\n## ")[1:]
have = [s.split("\n")[0].split(". ", 1)[1] for s in secs]
miss = sorted(c for c in p["required_clauses"] if c.lower() not in have)
flag = [{"clause": int(s.split(".")[0]), "term": t} for s in secs for t in p["forbidden_terms"] if t.lower() in s]
ok = not miss and not flag
os.makedirs("output", exist_ok=True)
json.dump({"missing_clauses": miss, "flagged": flag, "compliant": ok}, open("output/review.json", "w"))
m = "# Contract review memo\n\nVerdict: " + ("compliant" if ok else "not compliant") + ".\n\n"
for f in flag:
    m += f"- Clause {f['clause']} contains the forbidden term \"{f['term']}\"; strike it.\n"
for c in miss:
    m += f"- The required clause \"{c}\" is missing; request it from the supplier.\n"
if ok:
    m += "All required clauses are present and no forbidden terms were found.\n"
open("output/memo.md", "w").write(m)
