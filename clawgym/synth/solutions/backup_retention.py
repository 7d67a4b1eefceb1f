import os
import json
import yaml

n = yaml.safe_load(open("backups/policy.yaml"))["per_host"]["keep_newest"]
hosts = {}
for line in open("backups/listing.txt"):
    if line.strip():
        f = line.split()[1]
        h, d = f[:-7].split("-", 1)
        hosts.setdefault(h, []).append(d)
delete, kept = [], {}
for h, ds in hosts.items():
    ds.sort(reverse=True)
    keep = [d for i, d in enumerate(ds) if i < n or d.endswith("-01")]
    kept[h] = len(keep)
    delete += [f"{h}-{d}.tar.gz" for d in ds if d not in keep]
os.makedirs("output", exist_ok=True)
open("output/delete.txt", "w").write("".join(x + "\n" for x in sorted(delete)))
json.dump(kept, open("output/kept.json", "w"), indent=2)
