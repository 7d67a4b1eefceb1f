import os
import re

log = open("CHANGELOG.md").read().split("\n## ")[1]
ver = log.split()[0]
feats = re.findall(r"^- \[feature\] (.+)$", log, re.M)
fixes = re.findall(r"^- \[fix\] (.+)$", log, re.M)
t = f"# What's new in {ver}\n\n"
t += f"This release ships {len(feats)} new features and {len(fixes)} fixes.\n\n## New features\n\n"
t += "".join(f"- {x}\n" for x in feats) + "\n## Fixes\n\n" + "".join(f"- {x}\n" for x in fixes)
os.makedirs("output", exist_ok=True)
open("output/newsletter.md", "w").write(t)
