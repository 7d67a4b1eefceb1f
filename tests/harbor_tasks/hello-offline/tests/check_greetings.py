import json
import sys
from pathlib import Path

ws = Path(sys.argv[1])
names = [n for n in (ws / "names.txt").read_text().splitlines() if n.strip()]
out = ws / "greetings.txt"
lines = out.read_text().splitlines() if out.is_file() else []
exists = 1.0 if out.is_file() else 0.0
exact = 1.0 if lines == [f"Hello, {n}!" for n in names] else 0.0
print(json.dumps({"reward": (exists + exact) / 2, "exists": exists, "exact": exact}))
