import csv
import json
import os
import re
import sys

EXPECTED = {"travel": 430.50, "software": 65.00, "meals": 74.95}
GRAND = 570.45


def grade(transcript, workspace_path):
    scores = {"totals_exists": 0.0, "header_exact": 0.0, "totals_correct": 0.0, "sorted_desc": 0.0,
              "summary_correct": 0.0}
    path = os.path.join(workspace_path, "output", "category_totals.csv")
    if os.path.isfile(path):
        scores["totals_exists"] = 1.0
        try:
            with open(path, encoding="utf-8") as f:
                rows = list(csv.reader(f))
        except Exception:
            rows = []
        if rows and [c.strip() for c in rows[0]] == ["category", "total_eur"]:
            scores["header_exact"] = 1.0
            body = [r for r in rows[1:] if r]
            try:
                got = {r[0].strip(): float(r[1]) for r in body}
            except (ValueError, IndexError):
                got = {}
            if set(got) == set(EXPECTED) and all(abs(got[k] - v) < 0.005 for k, v in EXPECTED.items()):
                scores["totals_correct"] = 1.0
                vals = [float(r[1]) for r in body]
                if vals == sorted(vals, reverse=True):
                    scores["sorted_desc"] = 1.0
    spath = os.path.join(workspace_path, "output", "summary.txt")
    if os.path.isfile(spath):
        text = open(spath, encoding="utf-8", errors="ignore").read()
        m = re.search(r"Grand total:\s*([0-9]+(?:\.[0-9]+)?)\s*EUR", text)
        if m and abs(float(m.group(1)) - GRAND) < 0.005:
            scores["summary_correct"] = 1.0
    return scores


if __name__ == "__main__":
    print(json.dumps(grade([], sys.argv[1] if len(sys.argv) > 1 else ".")))
