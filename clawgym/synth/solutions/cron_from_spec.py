import os
import yaml

dow = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
out = []
for j in yaml.safe_load(open("ops/jobs.yaml"))["jobs"]:
    k, v = list(j["schedule"].items())[0]
    at = v["at"] if isinstance(v, dict) else str(v)
    h, m = [int(x) for x in at.split(":")] if ":" in at else (0, 0)
    if k == "every_minutes":
        e = f"*/{v} * * * *"
    elif k == "daily_at":
        e = f"{m} {h} * * *"
    elif k == "weekdays_at":
        e = f"{m} {h} * * 1-5"
    elif k == "weekly":
        e = f"{m} {h} * * {dow.index(v['day'])}"
    else:
        e = f"{m} {h} {v['day']} * *"
    out.append(f"{e} {j['command']} # {j['name']}\n")
os.makedirs("output", exist_ok=True)
open("output/crontab.txt", "w").write("".join(out))
