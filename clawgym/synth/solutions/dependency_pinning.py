import os
import re
import json

lk = dict(l.split("==") for l in open("requirements.lock").read().splitlines() if "==" in l)
out, un, mm, ms = [], [], [], []
n = 0
for l in open("requirements.txt").read().splitlines():
    m = re.match(r"([\w.-]+)\s*(==\s*([\w.]+))?", l)
    if not m:
        out.append(l)
        continue
    k, v = m[1].lower(), m[3]
    n += 1
    if k not in lk:
        ms.append(k)
        out.append(l)
        continue
    out.append(f"{k}=={lk[k]}")
    if not v:
        un.append(k)
    elif v != lk[k]:
        mm.append({"name": k, "required": v, "locked": lk[k]})
open("requirements.txt", "w").write("\n".join(out) + "\n")
os.makedirs("output", exist_ok=True)
rep = {"total_packages": n, "unpinned": sorted(un), "mismatched": sorted(mm, key=lambda x: x["name"]),
       "missing_from_lock": sorted(ms)}
json.dump(rep, open("output/deps_report.json", "w"), indent=2)
