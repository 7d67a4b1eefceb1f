import os
import re
import json

faq = dict((k, a.strip()) for k, a in re.findall(r"^## .+\((\w+)\)\n\n(.+)$", open("input/faq.md").read(), re.M))
rows = []
os.makedirs("output/replies", exist_ok=True)
for line in open("input/inbox.jsonl"):
    if not line.strip():
        continue
    m = json.loads(line)
    t = m["label"]
    if t == "spam":
        rows.append((m["id"], "spam", "no"))
        continue
    rows.append((m["id"], t, "yes"))
    first = m["name"].split()[0]
    body = f"Hi {first},\n\nThanks for reaching out. {faq[t]}\n\nBest regards,\nCustomer Support\n"
    open(f"output/replies/{m['id']}.md", "w").write(body)
with open("output/replies/index.csv", "w") as f:
    f.write("id,topic,replied\n")
    for r in sorted(rows):
        f.write(",".join(r) + "\n")
