# args: renaming `(\w+)\.(\w+)` to `\w+\.(\w+)`
import os
import re
import sys
import json

mod, old, new = sys.argv[1:4]
src = open(f"{mod}.py").read()
params = re.search(rf"def {old}\((.*)\):", src)[1]
args = ", ".join(p.split("=")[0].strip() for p in params.split(","))
src = src.replace(f"def {old}(", f"def {new}(")
src += (f"\n\ndef {old}({params}):\n    \"\"\"Deprecated alias of {new}.\"\"\"\n    import warnings\n\n"
        f"    warnings.warn(\"{old}() is deprecated; use {new}()\", DeprecationWarning, stacklevel=2)\n"
        f"    return {new}({args})\n")
open(f"{mod}.py", "w").write(src)
changed, n = [f"{mod}.py"], 0
for f in ["report.py", "cli.py", f"tests/test_{mod}.py"]:
    t, k = re.subn(rf"\b{mod}\.{old}\(", f"{mod}.{new}(", open(f).read())
    open(f, "w").write(t)
    n += k
    if k:
        changed.append(f)
os.makedirs("output", exist_ok=True)
rep = {"old_name": old, "new_name": new, "files_changed": sorted(changed), "call_sites_updated": n}
json.dump(rep, open("output/rename_report.json", "w"), indent=2)
