import os
import csv
import json
import re
import yaml
import datetime as dt

y = yaml.safe_load(open("input/daily_limits.yaml"))
mx, fq = y["max_daily_mg"], y["frequency_codes"]
rows, ends = [], {}
for r in csv.DictReader(open("input/prescriptions.csv")):
    d = r["drug"].strip().lower()
    mg = int(re.match(r"\d+", r["dose"].strip())[0]) * fq[r["frequency"].strip()]
    rows.append((d, mg, mx[d], "yes" if mg > mx[d] else "no"))
    s = r["start_date"].strip()
    fmt = "%d/%m/%Y" if "/" in s else "%Y-%m-%d"
    st = dt.datetime.strptime(s, fmt).date()
    ends[d] = (st + dt.timedelta(days=int(r["days"]) - 1)).isoformat()
os.makedirs("output", exist_ok=True)
with open("output/daily_totals.csv", "w") as f:
    f.write("drug,daily_mg,max_mg,over_limit\n")
    for x in sorted(rows):
        f.write(",".join(map(str, x)) + "\n")
json.dump(dict(sorted(ends.items())), open("output/end_dates.json", "w"), indent=2)
