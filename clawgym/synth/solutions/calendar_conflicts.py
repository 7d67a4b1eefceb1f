import os
import json

ev = sorted(json.load(open("input/calendar.json"))["events"], key=lambda e: e["id"])
out = []
for i, a in enumerate(ev):
    for b in ev[i + 1:]:
        if a["start"] < b["end"] and b["start"] < a["end"]:
            for p in set(a["attendees"]) & set(b["attendees"]):
                out.append({"person": p, "event_a": a["id"], "event_b": b["id"]})
out.sort(key=lambda c: (c["person"], c["event_a"], c["event_b"]))
os.makedirs("output", exist_ok=True)
json.dump(out, open("output/conflicts.json", "w"), indent=2)
open("output/conflict_count.txt", "w").write(f"{len(out)}\n")
