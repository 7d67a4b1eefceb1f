import os
import re
import json
import yaml

doc = yaml.safe_load(open("okrs/q3_okrs.yaml"))["objectives"]
on, risk = map(float, re.findall(r"(?:on_track|at_risk) >= ([\d.]+)", open("okrs/scoring.md").read()))
rows, out = [], {}
for o in doc:
    ps = []
    for k in o["key_results"]:
        s, t, c = k["start"], k["target"], k["current"]
        p = (s - c) / (s - t) if k["direction"] == "decrease" else (c - s) / (t - s)
        p = round(min(1.0, max(0.0, p)), 3)
        ps.append(p)
        rows.append((k["id"], o["objective"], p))
    sc = round(sum(ps) / len(ps), 3)
    out[o["objective"]] = {"score": sc, "status": "on_track" if sc >= on else "at_risk" if sc >= risk else "off_track"}
os.makedirs("output", exist_ok=True)
with open("output/kr_progress.csv", "w") as f:
    f.write("id,objective,progress\n")
    for r in rows:
        f.write(f"{r[0]},{r[1]},{r[2]}\n")
json.dump(out, open("output/okr_summary.json", "w"), indent=2)
