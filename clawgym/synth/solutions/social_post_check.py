import os
import csv
import re
import yaml

lim = yaml.safe_load(open("input/channels.yaml"))
ok = []
os.makedirs("output", exist_ok=True)
with open("output/post_check.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["id", "channel", "chars", "hashtags", "status"])
    for r in csv.DictReader(open("input/drafts.csv")):
        ch, t = r["channel"].strip().lower(), r["text"]
        n, h = len(t), len(re.findall(r"#\w+", t))
        st = []
        if n > lim[ch]["max_chars"]:
            st.append("too_long")
        if h > lim[ch]["max_hashtags"]:
            st.append("too_many_hashtags")
        if not st:
            ok.append((r["scheduled"], r["id"]))
        w.writerow([r["id"], ch, n, h, ";".join(st) or "ok"])
open("output/approved.txt", "w").write("".join(i + "\n" for d, i in sorted(ok)))
