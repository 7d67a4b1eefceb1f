# args: earliest (\d+)-minute slot
import os
import re
import sys
import json
import yaml

dur = int(sys.argv[1])
b = yaml.safe_load(open("input/busy.yaml"))


def mins(s):
    """Minutes since midnight of 'HH:MM'."""
    return int(s[:2]) * 60 + int(s[3:5])


def span(s):
    """(start, end) minutes of 'HH:MM-HH:MM'."""
    return mins(s.split("-")[0].strip()), mins(s.split("-")[1].strip())


blocks = [span(x) for v in b["busy"].values() for x in v]
blocks += [span(x) for x in re.findall(r"\d\d:\d\d-\d\d:\d\d", open("input/team_rules.md").read())]
t, end = span(b["working_hours"])
while any(t < e and s < t + dur for s, e in blocks):
    t += 15
hm = lambda m: f"{m // 60:02d}:{m % 60:02d}"  # noqa: E731
res = {"date": str(b["date"]), "start": hm(t), "end": hm(t + dur), "attendees": sorted(b["busy"])}
os.makedirs("output", exist_ok=True)
json.dump(res, open("output/slot.json", "w"), indent=2)
open("output/invite.md", "w").write(
    f"# Invitation: team sync\n\nHi {', '.join(res['attendees'])},\n\nPlease join a {dur}-minute team sync on "
    f"{res['date']} from {res['start']} to {res['end']}, the first slot when everyone is free.\n\nThanks!\n")
