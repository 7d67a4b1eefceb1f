import os
import json
import yaml

a = yaml.safe_load(open("input/assets.yaml"))
keep, band, host = [], {"critical": 0, "high": 0, "medium": 0, "low": 0}, {}
for line in open("input/scan_results.jsonl"):
    if not line.strip():
        continue
    f = json.loads(line)
    if f["status"].lower() != "open" or f["false_positive"]:
        continue
    c = f["cvss"]
    risk = round(c * a["weights"][a["criticality"][f["host"]]], 2)
    keep.append((-risk, f["id"], f["host"], c))
    band["critical" if c >= 9 else "high" if c >= 7 else "medium" if c >= 4 else "low"] += 1
    host[f["host"]] = round(host.get(f["host"], 0) + risk, 2)
keep.sort()
os.makedirs("output", exist_ok=True)
with open("output/triage.csv", "w") as out:
    out.write("rank,id,host,cvss,risk\n")
    for i, (r, fid, h, c) in enumerate(keep, 1):
        out.write(f"{i},{fid},{h},{c},{-r:.2f}\n")
top = sorted(host.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
s = {"open_findings": len(keep), "by_severity": band, "top_host": top}
json.dump(s, open("output/triage_summary.json", "w"), indent=2)
