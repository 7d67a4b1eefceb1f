"""Three small self-contained tasks with reference solutions and grade() checks (`demo_tasks`), used by the agent
tests, the rollout benchmark and smoke runs when no synthetic tasks exist yet (write+exec, edit, read+exec+write).
The demo's experiment plan is clawgym.train.demo_plan.
"""

from __future__ import annotations

from clawgym.tasks.model import File, Task, ToolCall, Verifier

_SUM_CHECK = '''
import json, os
def grade(transcript, workspace_path):
    p = os.path.join(workspace_path, "output", "total.json")
    ok_file = os.path.exists(p)
    try:
        d = json.load(open(p))
    except Exception:
        d = {}
    return {"file_exists": ok_file, "total_correct": d.get("total") == 1234.5, "count_correct": d.get("count") == 4}
'''

_CONFIG_CHECK = '''
import os
def grade(transcript, workspace_path):
    t = open(os.path.join(workspace_path, "config", "app.ini")).read()
    return {"port_changed": "port = 8443" in t, "old_port_gone": "port = 8080" not in t,
            "rest_kept": "name = billing" in t and "debug = false" in t}
'''

_SORT_CHECK = '''
import os
def grade(transcript, workspace_path):
    p = os.path.join(workspace_path, "output", "attendees_sorted.txt")
    if not os.path.exists(p):
        return {"exists": 0.0, "sorted": 0.0, "deduped": 0.0}
    lines = [l for l in open(p).read().splitlines() if l.strip()]
    return {"exists": 1.0, "sorted": float(lines == ["Ada Lovelace", "Alan Turing", "Grace Hopper", "Linus Torvalds"]),
            "deduped": float(len(lines) == len(set(lines)))}
'''


def demo_tasks() -> list[Task]:
    """The three demo tasks (sum a CSV column, change a config port, sort attendees), each with a reference
    solution."""
    sales = "region,amount\nnorth,100.5\nsouth,234\neast,400\nwest,500\n"
    return [
        Task(task_id="demo_sum_sales", category="analysis_reasoning", family="demo", route="procedural",
             instruction="Sum the `amount` column of input/sales.csv and write "
                         "output/total.json as {\"total\": <sum>, \"count\": <number of rows>}.",
             files=[File(path="input/sales.csv", content=sales.encode())],
             verifier=Verifier(kind="grade", code=_SUM_CHECK),
             reference=[
                 ToolCall(name="read", arguments={"path": "input/sales.csv"}),
                 ToolCall(name="exec", arguments={"command": "mkdir -p output && python3 -c \"import csv,json;"
                          "r=list(csv.DictReader(open('input/sales.csv')));"
                          "json.dump({'total':sum(float(x['amount']) for x in r),'count':len(r)},"
                          "open('output/total.json','w'))\""}),
             ]),
        Task(task_id="demo_config_port", category="systems_automation", family="demo", route="procedural",
             instruction="In config/app.ini change the port from 8080 to 8443 and leave everything else as is.",
             files=[File(path="config/app.ini", content=b"[server]\nname = billing\nport = 8080\ndebug = false\n")],
             verifier=Verifier(kind="grade", code=_CONFIG_CHECK),
             reference=[
                 ToolCall(name="read", arguments={"path": "config/app.ini"}),
                 ToolCall(name="edit", arguments={"path": "config/app.ini", "oldText": "port = 8080",
                                                  "newText": "port = 8443"}),
             ]),
        Task(task_id="demo_sort_attendees", category="productivity_collaboration", family="demo",
             route="procedural",
             instruction="input/attendees.txt lists meeting attendees, one per line, with duplicates. Write "
                         "output/attendees_sorted.txt with each name once, sorted alphabetically.",
             files=[File(path="input/attendees.txt",
                         content=b"Grace Hopper\nAlan Turing\nLinus Torvalds\nAda Lovelace\nAlan Turing\n")],
             verifier=Verifier(kind="grade", code=_SORT_CHECK),
             reference=[
                 ToolCall(name="ls", arguments={"path": "input"}),
                 ToolCall(name="exec", arguments={"command": "sort -u input/attendees.txt"}),
                 ToolCall(name="write", arguments={"path": "output/attendees_sorted.txt",
                                                   "content": "Ada Lovelace\nAlan Turing\nGrace Hopper\n"
                                                              "Linus Torvalds\n"}),
             ]),
    ]


__all__ = ["demo_tasks"]
