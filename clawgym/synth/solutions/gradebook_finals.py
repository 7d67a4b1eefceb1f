import os
import csv
import yaml

p = yaml.safe_load(open("input/grading_policy.yaml"))
w, cut = p["weights"], p["letter_cutoffs"]
os.makedirs("output", exist_ok=True)
with open("output/finals.csv", "w") as f:
    f.write("student,final,letter\n")
    for r in csv.DictReader(open("input/gradebook.csv")):
        hw = [float(v) for k, v in r.items() if k.startswith("hw") and v.strip() != "EX"]
        if len(hw) > 1:
            hw.remove(min(hw))
        avg = sum(hw) / len(hw) if hw else 0
        fin = round(w["homework"] * avg + w["exam"] * float(r["exam"]), 2)
        let = next((k for k, v in sorted(cut.items(), key=lambda x: -x[1]) if fin >= v), "F")
        f.write(f"{r['student']},{fin:.2f},{let}\n")
