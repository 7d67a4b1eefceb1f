import os
import re
import json

errs = []
for f in ["logs/app.log.1", "logs/app.log"]:
    for line in open(f):
        m = re.match(r"(\S+) ERROR .*code=(\S+) path=(\S+)", line)
        if m:
            errs.append(m.groups())
codes, paths = {}, {}
for _, c, p in errs:
    codes[c] = codes.get(c, 0) + 1
    paths[p] = paths.get(p, 0) + 1
top = sorted(paths, key=lambda p: (-paths[p], p))[0]
res = {"total_errors": len(errs), "by_code": dict(sorted(codes.items())), "first_seen": errs[0][0],
       "last_seen": errs[-1][0], "top_path": top}
os.makedirs("output", exist_ok=True)
json.dump(res, open("output/error_summary.json", "w"), indent=2)
