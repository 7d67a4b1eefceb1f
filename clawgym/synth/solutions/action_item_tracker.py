import os
import re
import datetime as dt

t = open("notes/meeting_notes.md").read()
y = re.search(r"\d{4}", t)[0]
r = re.findall(r"ACTION: (\S+) to (.+) by (\S+)", t)
for o, k, m, d in re.findall(r"\[ \] @(\S+): (.+) \(due (\w+) (\d+)\)", t):
    r.append((o, k, dt.datetime.strptime(f"{y} {m} {d}", "%Y %b %d").date().isoformat()))
for o, k, d, m, yy in re.findall(r"TODO\((\S+)\) (.+) -- due (\d+)/(\d+)/(\d+)", t):
    r.append((o, k, f"{yy}-{m}-{d}"))
os.makedirs("output", exist_ok=True)
with open("output/action_items.csv", "w") as f:
    f.write("owner,task,due\n")
    for o, k, d in sorted(r, key=lambda x: (x[2], x[0], x[1])):
        f.write(f"{o},{k},{d}\n")
