# args: as of (\d{4}-\d\d-\d\d)
import os
import sys
import json

as_of = sys.argv[1]
rows = [json.loads(line) for line in open("input/board_export.jsonl") if line.strip()]
for r in rows:
    r["status"] = r["status"].strip().lower().replace(" ", "_")
    r["late"] = r["status"] != "done" and r["due"] < as_of
md = f"# Task board status ({as_of})\n\n| owner | open | done | overdue |\n|---|---|---|---|\n"
for o in sorted({r["owner"] for r in rows}):
    mine = [r for r in rows if r["owner"] == o]
    done = sum(r["status"] == "done" for r in mine)
    md += f"| {o} | {len(mine) - done} | {done} | {sum(r['late'] for r in mine)} |\n"
md += "\n## Overdue\n\n"
for r in sorted([r for r in rows if r["late"]], key=lambda r: (r["due"], r["id"])):
    md += f"- {r['id']} {r['title']} ({r['owner']})\n"
os.makedirs("output", exist_ok=True)
open("output/status.md", "w").write(md)
