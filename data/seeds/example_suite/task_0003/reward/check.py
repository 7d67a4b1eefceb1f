import json
import os
import re
import sys

EXPECTED = ["Ben to review the billing export PR", "Book the room for the Friday demo",
            "Draft the Q1 roadmap one-pager", "Ask finance about the travel budget"]

ws = sys.argv[1] if len(sys.argv) > 1 else "."
path = os.path.join(ws, "output", "todos.md")
checks = {"file_exists": os.path.isfile(path), "all_items_present": False, "order_correct": False,
          "no_extra_items": False, "checkbox_format": False}
if checks["file_exists"]:
    text = open(path, encoding="utf-8", errors="ignore").read()
    items = [m.group(1).strip() for m in re.finditer(r"^\s*-\s*\[ \]\s*(.+)$", text, re.M)]
    checks["checkbox_format"] = len(items) > 0 and not any(i.startswith("TODO") for i in items)
    checks["all_items_present"] = all(e in items for e in EXPECTED)
    checks["order_correct"] = [i for i in items if i in EXPECTED] == EXPECTED
    checks["no_extra_items"] = len(items) == len(EXPECTED)
passed = sum(1 for v in checks.values() if v)
result = {"reward": passed / len(checks)}
result.update(checks)
print(json.dumps(result))
