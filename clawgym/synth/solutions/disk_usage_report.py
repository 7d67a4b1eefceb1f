import os
import csv

rows, files = [], []
for d in sorted(os.listdir("data")):
    n = b = 0
    for root, _, fs in os.walk(os.path.join("data", d)):
        for f in fs:
            p = os.path.join(root, f)
            s = os.path.getsize(p)
            files.append((-s, p))
            n += 1
            b += s
    rows.append((-b, d, n))
os.makedirs("output", exist_ok=True)
with open("output/usage.csv", "w") as f:
    w = csv.writer(f)
    w.writerow(["dir", "files", "bytes"])
    for b, d, n in sorted(rows):
        w.writerow([d, n, -b])
open("output/largest.txt", "w").write("".join(p + "\n" for s, p in sorted(files)[:3]))
