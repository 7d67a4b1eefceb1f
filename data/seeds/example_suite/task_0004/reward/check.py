import json
import os
import re
import sys

SECTIONS = {"done": ["OPS-101", "OPS-104"], "in progress": ["OPS-102", "OPS-105"], "blocked": ["OPS-103"]}


def split_sections(text):
    out, cur = {}, None
    for line in text.splitlines():
        m = re.match(r"^\s*#+\s*(.+?)\s*$", line)
        if m:
            cur = m.group(1).strip().lower()
            out[cur] = []
        elif cur is not None:
            out[cur].append(line)
    return {k: "\n".join(v) for k, v in out.items()}


def grade(transcript, workspace_path):
    scores = {"file_exists": 0.0, "has_sections": 0.0, "tickets_in_right_section": 0.0, "open_count": 0.0,
              "under_200_words": 0.0}
    path = os.path.join(workspace_path, "output", "status_update.md")
    if not os.path.isfile(path):
        return scores
    text = open(path, encoding="utf-8", errors="ignore").read()
    scores["file_exists"] = 1.0
    secs = split_sections(text)
    if all(s in secs for s in SECTIONS):
        scores["has_sections"] = 1.0
        ok = all(t in secs[s] for s, ts in SECTIONS.items() for t in ts)
        wrong = any(t in secs[o] for s, ts in SECTIONS.items() for t in ts for o in SECTIONS if o != s)
        scores["tickets_in_right_section"] = 1.0 if ok and not wrong else 0.0
    m = re.search(r"Open tickets:\s*(\d+)", text)
    scores["open_count"] = 1.0 if m and int(m.group(1)) == 3 else 0.0
    scores["under_200_words"] = 1.0 if 0 < len(text.split()) < 200 else 0.0
    return scores


if __name__ == "__main__":
    print(json.dumps(grade([], sys.argv[1] if len(sys.argv) > 1 else ".")))
