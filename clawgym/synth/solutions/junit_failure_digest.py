import os
import glob
import json
import xml.etree.ElementTree as ET

n = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
failed = set()
for f in sorted(glob.glob("ci/reports/*.xml")):
    for c in ET.parse(f).getroot().iter("testcase"):
        n["tests"] += 1
        for k, tag in [("failures", "failure"), ("errors", "error"), ("skipped", "skipped")]:
            if c.find(tag) is not None:
                n[k] += 1
                if k != "skipped":
                    failed.add(f"{c.get('classname')}::{c.get('name')}")
ok = n["tests"] - n["failures"] - n["errors"] - n["skipped"]
n["pass_rate"] = round(ok / n["tests"] * 100, 2)
n["failed_tests"] = sorted(failed)
os.makedirs("output", exist_ok=True)
json.dump(n, open("output/ci_digest.json", "w"), indent=2)
