import subprocess

out = []
for line in open("Makefile").read().splitlines():
    if line.startswith(".PHONY:"):
        line += " stats clean"
    if line.startswith("all:"):
        line += " stats"
    out.append(line)
out += ["", "stats:", "\tmkdir -p output", "\tpython3 scripts/wordstats.py $(wildcard docs/*.txt) > output/stats.json",
        "", "clean:", "\trm -rf output"]
open("Makefile", "w").write("\n".join(out) + "\n")
subprocess.run(["make", "stats"], check=True)
