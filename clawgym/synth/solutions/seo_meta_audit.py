import os
import json
import yaml

r = yaml.safe_load(open("input/seo_rules.yaml"))
rows, tot = [], {}
for line in open("input/crawl.jsonl"):
    if not line.strip():
        continue
    p = json.loads(line)
    t, d = p["title"].strip(), p["meta_description"].strip()
    iss = []
    if len(t) > r["title"]["max_chars"]:
        iss.append("TITLE_TOO_LONG")
    if not d:
        iss.append("DESC_MISSING")
    elif len(d) < r["meta_description"]["min_chars"]:
        iss.append("DESC_TOO_SHORT")
    elif len(d) > r["meta_description"]["max_chars"]:
        iss.append("DESC_TOO_LONG")
    if not p["h1"].strip():
        iss.append("H1_MISSING")
    if int(str(p["word_count"]).replace(",", "")) < r["content"]["min_words"]:
        iss.append("THIN_CONTENT")
    for c in iss:
        tot[c] = tot.get(c, 0) + 1
    rows.append((-len(iss), p["url"], ";".join(sorted(iss))))
rows.sort()
os.makedirs("output", exist_ok=True)
with open("output/seo_audit.csv", "w") as f:
    f.write("url,issue_count,issues\n")
    for n, u, i in rows:
        f.write(f"{u},{-n},{i}\n")
s = {"pages_total": len(rows), "pages_with_issues": sum(1 for x in rows if x[0]),
     "issue_totals": dict(sorted(tot.items()))}
json.dump(s, open("output/seo_summary.json", "w"), indent=2)
