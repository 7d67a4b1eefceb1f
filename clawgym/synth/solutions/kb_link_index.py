import os
import re
import csv
import glob
import json

notes = {}
for p in sorted(glob.glob("kb/*.md")):
    notes[re.search(r"^title: (.+)$", open(p).read(), re.M)[1].strip()] = p
tags, broken, inb = {}, [], {p: 0 for p in notes.values()}
for p in notes.values():
    lines = open(p).read().splitlines()
    for g in re.search(r"^tags: \[(.*)\]", "\n".join(lines), re.M)[1].split(","):
        if g.strip():
            tags.setdefault(g.strip(), []).append(p)
    for i, l in enumerate(lines, 1):
        for t in re.findall(r"\[\[(.+?)\]\]", l):
            if t in notes:
                if notes[t] != p:
                    inb[notes[t]] += 1
            else:
                broken.append((p, t, i))
os.makedirs("output", exist_ok=True)
json.dump({k: sorted(v) for k, v in sorted(tags.items())}, open("output/tag_index.json", "w"), indent=2)
with open("output/broken_links.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["note", "link", "line"])
    w.writerows(sorted(broken))
open("output/orphans.txt", "w").write("".join(p + "\n" for p in sorted(inb) if not inb[p]))
