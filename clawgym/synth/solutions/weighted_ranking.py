import os
import glob
import json
import yaml

rb = yaml.safe_load(open("input/rubric.yaml"))
w, low = rb["weights"], rb["lower_is_better"]
opts = json.load(open(glob.glob("input/*.json")[0]))
rows = []
for o in opts:
    s = sum(w[c] * (11 - v if c in low else v) for c, v in o["scores"].items())
    rows.append((-round(s, 2), o["name"]))
os.makedirs("output", exist_ok=True)
with open("output/ranking.csv", "w") as f:
    f.write("rank,name,score\n")
    for i, (s, n) in enumerate(sorted(rows), 1):
        f.write(f"{i},{n},{-s:.2f}\n")
