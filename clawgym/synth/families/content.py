"""Content & Domain Support families (SEO, newsletters, social posts, legal, medical, finance, security)."""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any

from clawgym.synth.families.base import Ctx, csv_text, dirty_text, family, json_text, people, r2
from clawgym.tasks.model import RubricProxy


def _proxy(ctx: Ctx, **kw) -> None:
    """Attach deterministic offline-judge checks to the last rubric rule."""
    ctx.rubric[-1] = ctx.rubric[-1].model_copy(update={"proxy": RubricProxy(**kw)})


def _append(path: str, text: str):
    def fn(ov: dict) -> dict:
        ov = dict(ov)
        ov[path] = (ov.get(path) or b"") + text.encode()
        return ov
    return fn


def _replace(path: str, old: str, new: str):
    def fn(ov: dict) -> dict:
        ov = dict(ov)
        body = ov[path].decode()
        if old not in body:
            raise ValueError("mutation does not apply")
        ov[path] = body.replace(old, new, 1).encode()
        return ov
    return fn

CAT = "content_domain_support"

_WORDS = ["guide", "pricing", "tips", "garden", "budget", "coffee", "remote", "travel", "python", "privacy",
          "checklist", "winter", "startup", "recipes", "fitness", "hiring", "design", "security", "cloud", "camera",
          "beginner", "advanced", "ultimate", "review", "2026", "best", "how", "to", "choose", "a", "for", "your"]


def _title(rng, target: int) -> str:
    out: list[str] = []
    while len(" ".join(out)) < target:
        out.append(rng.choice(_WORDS))
    return " ".join(out).capitalize()


# ----------------------------------------------------------------------------------------------
@family("seo_meta_audit", CAT, "SEO and page optimization", ["read", "extract", "filter", "compute", "write"],
        ["jsonl", "yaml", "csv", "json"], "Audit page metadata in a JSONL crawl against SEO rules; write a per-page "
        "issue table and a summary.", difficulty=3)
def seo_meta_audit(ctx: Ctx) -> None:
    rng = ctx.rng
    rules = {"title_max": rng.choice([55, 60, 65]), "description_min": rng.choice([60, 70]),
             "description_max": rng.choice([150, 160]), "min_words": rng.choice([250, 300, 400])}
    expected: list[dict[str, Any]]
    pages, expected = [], []
    n = rng.randint(8, 12)
    for i in range(n):
        slug = f"/blog/{rng.choice(_WORDS)}-{rng.choice(_WORDS)}-{i + 1}"
        title = _title(rng, rng.randint(25, 80))
        desc = "" if rng.random() < 0.2 else _title(rng, rng.randint(40, 180)) + "."
        h1 = "" if rng.random() < 0.2 else title
        words = rng.choice([rng.randint(80, 240), rng.randint(300, 2400)])
        pages.append({"url": slug, "title": dirty_text(rng, title, 0.25) if title else title,
                      "meta_description": desc, "h1": h1,
                      "word_count": f"{words:,}" if rng.random() < 0.3 else words})
        t, d = title.strip(), desc.strip()
        issues = []
        if len(t) > rules["title_max"]:
            issues.append("TITLE_TOO_LONG")
        if not d:
            issues.append("DESC_MISSING")
        elif len(d) < rules["description_min"]:
            issues.append("DESC_TOO_SHORT")
        elif len(d) > rules["description_max"]:
            issues.append("DESC_TOO_LONG")
        if not h1.strip():
            issues.append("H1_MISSING")
        if words < rules["min_words"]:
            issues.append("THIN_CONTENT")
        issues.sort()
        expected.append({"url": slug, "issue_count": len(issues), "issues": ";".join(issues)})
    if not any(e["issue_count"] for e in expected):
        pages[0]["h1"] = ""
        expected[0]["issues"] = ";".join(sorted(expected[0]["issues"].split(";") + ["H1_MISSING"]) if expected[0]["issues"] else ["H1_MISSING"])
        expected[0]["issue_count"] += 1
    expected.sort(key=lambda e: (-e["issue_count"], e["url"]))
    totals: dict[str, int] = {}
    for e in expected:
        for c in filter(None, e["issues"].split(";")):
            totals[c] = totals.get(c, 0) + 1
    lines = [json.dumps(p) for p in pages]
    lines.insert(rng.randint(1, len(lines) - 1), "")  # a blank line in the crawl export
    ctx.file("input/crawl.jsonl", "\n".join(lines) + "\n")
    ctx.yaml("input/seo_rules.yaml", {"title": {"max_chars": rules["title_max"]},
                                      "meta_description": {"min_chars": rules["description_min"],
                                                           "max_chars": rules["description_max"]},
                                      "h1": {"required": True}, "content": {"min_words": rules["min_words"]},
                                      "notes": "Measure lengths after trimming surrounding whitespace."})
    ctx.distractors(2)
    ctx.ask(
        "Please audit the crawl export in input/crawl.jsonl against the rules in input/seo_rules.yaml. "
        "Issue codes: TITLE_TOO_LONG, DESC_MISSING, DESC_TOO_SHORT, DESC_TOO_LONG, H1_MISSING, THIN_CONTENT "
        "(word_count may be written with thousands separators). Write output/seo_audit.csv with columns "
        "url,issue_count,issues — one row per page, issues joined with ';' in alphabetical order (empty when none), "
        "sorted by issue_count descending then url. Also write output/seo_summary.json with pages_total, "
        "pages_with_issues and issue_totals (code -> number of pages).")
    summary = {"pages_total": n, "pages_with_issues": sum(1 for e in expected if e["issue_count"]),
               "issue_totals": dict(sorted(totals.items()))}
    ctx.expect("rows", expected)
    ctx.expect("order", [e["url"] for e in expected])
    ctx.expect("summary", summary)
    a, s = "output/seo_audit.csv", "output/seo_summary.json"
    ctx.check("audit_rows", f"rows_score(C({a!r}), E['rows'], 'url', ['issue_count', 'issues'])")
    ctx.check("audit_order", f"list_equal([r.get('url') for r in C({a!r})], E['order'])")
    ctx.check("summary_counts", f"J({s!r})['pages_total'] == E['summary']['pages_total'] and "
                                f"J({s!r})['pages_with_issues'] == E['summary']['pages_with_issues']")
    ctx.check("issue_totals", f"{{k: to_num(v) for k, v in J({s!r})['issue_totals'].items()}} == "
                              "{k: float(v) for k, v in E['summary']['issue_totals'].items()}")
    ctx.check("cross_file", f"sum(1 for r in C({a!r}) if to_num(r.get('issue_count')) > 0) == "
                            f"J({s!r})['pages_with_issues'] == E['summary']['pages_with_issues']")
    ctx.read("input/seo_rules.yaml")
    ctx.read("input/crawl.jsonl")
    ctx.write(a, csv_text(["url", "issue_count", "issues"], [[e["url"], e["issue_count"], e["issues"]] for e in expected]))
    ctx.write(s, json_text(summary))
    ctx.verify_json(s)


# ----------------------------------------------------------------------------------------------
_FEATURES = ["Dark mode for the dashboard", "Bulk edit for invoices", "Calendar sync with Outlook",
             "Two-factor login via authenticator apps", "Saved searches", "Keyboard shortcuts in the editor",
             "CSV import for contacts", "Weekly digest emails", "Custom fields on projects", "Offline drafts"]
_FIXES = ["CSV export drops the last row", "Timezone shown wrong in reminders", "Search ignores accented letters",
          "Avatar upload fails for PNG files", "Duplicate notifications after reconnect",
          "Report totals rounded incorrectly", "Sidebar flickers on resize", "Password reset link expires early"]
_INTERNAL = ["Bump eslint to 9", "Refactor billing service", "Migrate CI to new runners", "Rename feature flags",
             "Upgrade postgres driver"]


@family("release_newsletter", CAT, "general content writing", ["read", "extract", "filter", "write"], ["md"],
        "Turn the latest release section of a changelog into a customer newsletter (sections, counts, no internal "
        "items).")
def release_newsletter(ctx: Ctx) -> None:
    rng = ctx.rng
    major, minor = rng.randint(1, 6), rng.randint(0, 12)
    cur, prev = f"{major}.{minor + 1}.0", f"{major}.{minor}.{rng.randint(1, 4)}"
    feats = rng.sample(_FEATURES, rng.randint(2, 4))
    fixes = rng.sample(_FIXES, rng.randint(2, 4))
    internal = rng.sample(_INTERNAL, 2)
    old = rng.sample([f for f in _FEATURES if f not in feats], 2)
    items = [("feature", f) for f in feats] + [("fix", f) for f in fixes] + [("internal", f) for f in internal]
    rng.shuffle(items)
    d1 = dt.date(2026, rng.randint(1, 12), rng.randint(1, 28))
    log = ["# Changelog\n", f"## v{cur} ({d1.isoformat()})\n"] + [f"- [{k}] {t}\n" for k, t in items] + [
        f"\n## v{prev} ({(d1 - dt.timedelta(days=rng.randint(20, 60))).isoformat()})\n"] + [
        f"- [feature] {t}\n" for t in old] + ["- [fix] Typo in onboarding email\n"]
    ctx.file("CHANGELOG.md", "".join(log))
    limit = rng.choice([180, 200, 250])
    ctx.file("docs/style_guide.md", f"# Newsletter style\n\n- Friendly, plain language, no jargon.\n- At most {limit} "
                                    "words.\n- Never mention internal/engineering-only changes.\n")
    ctx.distractors(2)
    out = "output/newsletter.md"
    ctx.ask(
        f"Can you write the customer newsletter for our latest release from CHANGELOG.md? Follow docs/style_guide.md. "
        f"Save it as {out}: a top heading with the version (v{cur}), one intro sentence that says how many new "
        "features and then how many fixes it ships (as digits, no other numbers), then a '## New features' section and a '## Fixes' section "
        "with one bullet per item. Only the latest release, and leave out [internal] entries.")
    ctx.expect("version", cur)
    ctx.expect("feats", feats)
    ctx.expect("fixes", fixes)
    ctx.expect("banned", internal + old)
    ctx.expect("nf", len(feats))
    ctx.expect("nx", len(fixes))
    ctx.expect("limit", limit)
    ctx.grade.helper(
        "def _section(text, name):\n"
        "    m = _re.search(r'^##\\s+' + name + r'\\s*$(.*?)(?=^#|\\Z)', text or '', _re.M | _re.S | _re.I)\n"
        "    return m.group(1) if m else ''\n")
    ctx.check("version_heading", f"md_headings(T({out!r})) and E['version'] in md_headings(T({out!r}))[0]")
    ctx.check("features_section", f"contains_all(_section(T({out!r}), 'New features'), E['feats'])")
    ctx.check("fixes_section", f"contains_all(_section(T({out!r}), 'Fixes'), E['fixes'])")
    ctx.grade.helper(
        "def _intro(text):\n"
        "    head = (text or '').split('\\n## ')[0] if '\\n## ' in (text or '') else ''\n"
        "    return ' '.join(l for l in head.splitlines() if not l.lstrip().startswith('#'))\n")
    ctx.check("counts_stated", f"numbers_in(_intro(T({out!r}))) == [E['nf'], E['nx']]")
    ctx.check("no_internal_or_old", f"len(md_bullets(T({out!r}))) == E['nf'] + E['nx'] and "
                                    f"contains_none(T({out!r}), E['banned'])")
    # a format constraint any short bulleted file meets (the changelog copied over): support only
    ctx.check("word_limit", f"len(md_bullets(T({out!r}))) >= 2 and len(T({out!r}).split()) <= E['limit']",
              support=True)
    ctx.rubric_rule("tone", out, {"0": "missing or not a newsletter", "0.25": "mostly jargon or copied changelog lines",
                                  "0.5": "readable but flat", "0.75": "friendly and clear with minor issues",
                                  "1": "friendly, plain-language, customer-focused"})
    _proxy(ctx, required_headings=["New features", "Fixes"], forbidden_phrases=["[internal]", "[feature]", "[fix]",
                                                                              "refactor", "eslint"],
           required_phrases=[f"v{cur}"], max_words=limit)
    ctx.mutation("internal_item_leaked", _append(out, f"- {internal[0]}\n"))
    ctx.mutation("fix_dropped", _replace(out, f"- {fixes[-1]}\n", ""))
    ctx.read("CHANGELOG.md")
    ctx.read("docs/style_guide.md")
    body = (f"# What's new in v{cur}\n\nThis release ships {len(feats)} new features and {len(fixes)} fixes.\n\n"
            "## New features\n\n" + "".join(f"- {f}\n" for f in feats) + "\n## Fixes\n\n" +
            "".join(f"- {f}\n" for f in fixes))
    ctx.write(out, body)
    ctx.exec(f"wc -w {out}")


# ----------------------------------------------------------------------------------------------
@family("social_post_check", CAT, "social content creation", ["read", "compute", "filter", "sort", "write"],
        ["yaml", "csv", "txt"], "Check draft social posts against per-channel length/hashtag limits; list approved "
        "posts in schedule order.")
def social_post_check(ctx: Ctx) -> None:
    rng = ctx.rng
    limits = {"x": {"max_chars": rng.choice([140, 160, 200]), "max_hashtags": 2},
              "linkedin": {"max_chars": rng.choice([220, 260, 300]), "max_hashtags": rng.choice([3, 4])},
              "instagram": {"max_chars": rng.choice([240, 320]), "max_hashtags": rng.choice([5, 6])}}
    tags = ["#launch", "#tips", "#productivity", "#remote", "#design", "#ai", "#smallbiz", "#community", "#events"]
    exp: list[dict[str, Any]]
    rows, exp = [], []
    base = dt.date(2026, rng.randint(1, 11), rng.randint(1, 20))
    for i in range(rng.randint(8, 12)):
        ch = rng.choice(list(limits))
        words = [rng.choice(_WORDS) for _ in range(rng.randint(8, 50))]
        text = " ".join(words).capitalize() + "! " + " ".join(rng.sample(tags, rng.randint(0, 7)))
        text = text.strip()
        when = base + dt.timedelta(days=rng.randint(0, 14))
        pid = f"P{i + 1:03d}"
        rows.append([pid, dirty_text(rng, ch.capitalize() if rng.random() < 0.3 else ch, 0.3), when.isoformat(), text])
        n_chars, n_tags = len(text), len(re.findall(r"#\w+", text))
        st = [s for s, bad in (("too_long", n_chars > limits[ch]["max_chars"]),
                               ("too_many_hashtags", n_tags > limits[ch]["max_hashtags"])) if bad]
        exp.append({"id": pid, "channel": ch, "chars": n_chars, "hashtags": n_tags, "status": ";".join(st) or "ok",
                    "when": when.isoformat()})
    if all(e["status"] != "ok" for e in exp) or all(e["status"] == "ok" for e in exp):
        e, r = exp[0], rows[0]
        r[3] = "Quick tip for your week! #tips" if e["status"] != "ok" else r[3] + " " + "x" * 400
        e["chars"], e["hashtags"] = len(r[3]), len(re.findall(r"#\w+", r[3]))
        e["status"] = "ok" if e["status"] != "ok" else "too_long"
        if e["hashtags"] > limits[e["channel"]]["max_hashtags"]:
            e["status"] = "too_long;too_many_hashtags"
    ctx.yaml("input/channels.yaml", limits)
    ctx.csv("input/drafts.csv", ["id", "channel", "scheduled", "text"], rows)
    ctx.distractors(2)
    ctx.ask(
        "I drafted posts in input/drafts.csv; channel limits are in input/channels.yaml (channel names in the CSV are "
        "messy — normalise case/whitespace). For every draft compute chars (length of the text) and hashtags (count of "
        "#words), and a status: ok, too_long, too_many_hashtags, or both joined as 'too_long;too_many_hashtags'. Write "
        "output/post_check.csv with columns id,channel,chars,hashtags,status, and output/approved.txt with the ids of "
        "the ok posts, one per line, in scheduled order (ties by id).")
    ok = sorted((e for e in exp if e["status"] == "ok"), key=lambda e: (e["when"], e["id"]))
    ctx.expect("rows", [{k: e[k] for k in ("id", "channel", "chars", "hashtags", "status")} for e in exp])
    ctx.expect("approved", [e["id"] for e in ok])
    pc, ap = "output/post_check.csv", "output/approved.txt"
    ctx.check("lengths", f"rows_score(C({pc!r}), E['rows'], 'id', ['chars'])")
    ctx.check("hashtags", f"rows_score(C({pc!r}), E['rows'], 'id', ['hashtags', 'channel'])")
    ctx.check("status", f"rows_score(C({pc!r}), E['rows'], 'id', ['status'])")
    ctx.check("approved_list", f"list_equal([l.strip() for l in T({ap!r}).splitlines() if l.strip()], E['approved'])")
    ctx.check("cross_file", f"set(l.strip() for l in T({ap!r}).splitlines() if l.strip()) == "
                            f"set(r['id'] for r in C({pc!r}) if norm(r.get('status')) == 'ok') == set(E['approved'])")
    ctx.read("input/channels.yaml")
    ctx.read("input/drafts.csv")
    ctx.write(pc, csv_text(["id", "channel", "chars", "hashtags", "status"],
                           [[e["id"], e["channel"], e["chars"], e["hashtags"], e["status"]] for e in exp]))
    ctx.write(ap, "".join(e["id"] + "\n" for e in ok))
    ctx.exec(f"wc -l {ap} && head -3 {pc}")


# ----------------------------------------------------------------------------------------------
_CLAUSES = {
    "Term": "This Agreement starts on the Effective Date and continues for {n} months.",
    "Payment": "Invoices are payable within {n} days of receipt.",
    "Confidentiality": "Each party keeps the other party's confidential information secret for {n} years.",
    "Termination": "Either party may terminate with {n} days' written notice.",
    "Limitation of Liability": "Liability of either party is capped at the fees paid in the prior {n} months.",
    "Governing Law": "This Agreement is governed by the laws of the State of Delaware.",
    "Data Protection": "The Supplier processes personal data only on documented instructions.",
    "Intellectual Property": "Each party retains ownership of its pre-existing intellectual property.",
    "Indemnification": "The Supplier indemnifies the Customer against third-party IP claims.",
}
_FORBIDDEN = ["unlimited liability", "automatically renews", "non-refundable deposit", "sole discretion",
              "perpetual license", "waives all rights"]


@family("contract_clause_review", CAT, "legal and compliance review", ["read", "extract", "verify", "write"],
        ["md", "yaml", "json"], "Check a contract against a clause policy: missing required clauses, forbidden "
        "terms per clause, verdict + memo.", difficulty=3)
def contract_clause_review(ctx: Ctx) -> None:
    rng = ctx.rng
    names = list(_CLAUSES)
    present = rng.sample(names, rng.randint(5, 7))
    required = sorted(rng.sample(names, 5))
    missing = sorted(c for c in required if c not in present)
    terms = rng.sample(_FORBIDDEN, 4)
    flagged = []
    parts = [f"# Services Agreement\n\nBetween {people(rng, 1)[0]} Consulting LLC and the Customer.\n"]
    for i, c in enumerate(present, 1):
        body = _CLAUSES[c].format(n=rng.choice([3, 6, 12, 24, 30, 60]))
        if rng.random() < 0.45:
            t = rng.choice(terms)
            body += f" The Customer accepts that this clause {t} as described in Schedule B."
            flagged.append({"clause": i, "term": t})
        parts.append(f"\n## {i}. {c}\n\n{body}\n")
    if not flagged and not missing:
        t = terms[0]
        parts[1] = parts[1].rstrip("\n") + f" Fees are a non-binding estimate; renewal {t}.\n"
        flagged.append({"clause": 1, "term": t})
    ctx.file("input/contract.md", "".join(parts))
    ctx.yaml("input/policy.yaml", {"required_clauses": required, "forbidden_terms": terms,
                                   "note": "Match clause titles and terms case-insensitively."})
    ctx.distractors(2)
    compliant = not missing and not flagged
    ctx.ask(
        "Please review input/contract.md against our policy in input/policy.yaml. Write output/review.json with "
        "missing_clauses (required clause titles that are absent, alphabetical), flagged (a list of {clause: <clause "
        "number>, term: <forbidden term>} for every forbidden term found, by clause number) and compliant "
        "(true only if nothing is missing or flagged). Then write a short memo for the account manager in "
        "output/memo.md that names each flagged clause as 'Clause N' and each missing clause.")
    ctx.expect("missing", missing)
    ctx.expect("flagged", [f"{f['clause']}|{f['term']}" for f in flagged])
    ctx.expect("compliant", compliant)
    ctx.expect("memo_items", [f"Clause {f['clause']}" for f in flagged] + missing)
    rv, mm = "output/review.json", "output/memo.md"
    ctx.check("missing_clauses", f"set_score(J({rv!r})['missing_clauses'], E['missing']) if E['missing'] else "
                                 f"(J({rv!r})['missing_clauses'] == [] and 1.0)")
    ctx.check("flagged_terms", f"set_score([str(f['clause']) + '|' + str(f['term']) for f in J({rv!r})['flagged']], "
                               "E['flagged']) if E['flagged'] else float(J(" + repr(rv) + ")['flagged'] == [])")
    ctx.check("verdict", f"J({rv!r})['compliant'] is E['compliant']")
    ctx.check("memo_mentions", f"contains_all(T({mm!r}), E['memo_items']) if E['memo_items'] else "
                               f"float(len(T({mm!r}).split()) > 15)",
              support=True)  # clause titles (Term, Payment) are in any echoed instruction / copied contract
    ctx.rubric_rule("memo_clarity", mm, {"0": "missing", "0.25": "unclear or wrong", "0.5": "lists issues without "
                                         "explanation", "0.75": "clear with minor gaps", "1": "concise, accurate, "
                                         "actionable memo"})
    _proxy(ctx, required_phrases=[f"Clause {f['clause']}" for f in flagged] + missing, min_words=15, max_words=400,
           any_phrases=["not compliant", "compliant"])
    ctx.mutation("verdict_flipped", _replace(rv, f'"compliant": {str(compliant).lower()}',
                                             f'"compliant": {str(not compliant).lower()}'))
    ctx.read("input/policy.yaml")
    ctx.read("input/contract.md")
    ctx.exec("grep -n -i -E '" + "|".join(terms) + "' input/contract.md || true")
    ctx.write(rv, json_text({"missing_clauses": missing, "flagged": flagged, "compliant": compliant}))
    memo = ["# Contract review memo\n", f"\nVerdict: {'compliant' if compliant else 'not compliant'}.\n"]
    memo += [f"- Clause {f['clause']} contains the forbidden term \"{f['term']}\"; ask legal to strike it.\n"
             for f in flagged]
    memo += [f"- The required clause \"{m}\" is missing; request it from the supplier.\n" for m in missing]
    if compliant:
        memo.append("All required clauses are present and no forbidden terms were found in the agreement text.\n")
    ctx.write(mm, "".join(memo))


# ----------------------------------------------------------------------------------------------
_FREQ = {"QD": 1, "BID": 2, "TID": 3, "QID": 4, "q6h": 4, "q8h": 3, "q12h": 2}
_DRUGS = {"amoxicillin": 3000, "ibuprofen": 3200, "paracetamol": 4000, "metformin": 2550, "naproxen": 1500,
          "cetirizine": 10, "omeprazole": 40}
_DOSES = {"amoxicillin": [250, 500, 875], "ibuprofen": [200, 400, 600, 800], "paracetamol": [500, 650, 1000],
          "metformin": [500, 850, 1000], "naproxen": [250, 500], "cetirizine": [5, 10], "omeprazole": [20, 40]}


@family("dose_schedule_check", CAT, "medical and health analysis", ["read", "extract", "compute", "verify", "write"],
        ["csv", "yaml", "json"], "Compute daily totals and end dates from a prescription list with frequency "
        "abbreviations; flag totals over the listed daily maximum.", difficulty=3)
def dose_schedule_check(ctx: Ctx) -> None:
    rng = ctx.rng
    drugs = rng.sample(list(_DRUGS), rng.randint(4, 6))
    exp: list[dict[str, Any]]
    rows, exp, ends = [], [], {}
    for d in drugs:
        dose = rng.choice(_DOSES[d])
        fq = rng.choice(list(_FREQ))
        start = dt.date(2026, rng.randint(1, 12), rng.randint(1, 28))
        days = rng.choice([5, 7, 10, 14, 30])
        rows.append([dirty_text(rng, d.capitalize(), 0.3), rng.choice([f"{dose} mg", f"{dose}mg", str(dose)]), fq,
                     start.strftime(rng.choice(["%Y-%m-%d", "%d/%m/%Y"])), days])
        total = dose * _FREQ[fq]
        exp.append({"drug": d, "daily_mg": total, "max_mg": _DRUGS[d], "over_limit": "yes" if total > _DRUGS[d] else "no"})
        ends[d] = (start + dt.timedelta(days=days - 1)).isoformat()
    if all(e["over_limit"] == "no" for e in exp):
        r, e = rows[0], exp[0]
        r[1], r[2] = str(_DRUGS[e["drug"]]), "BID"
        e["daily_mg"], e["over_limit"] = _DRUGS[e["drug"]] * 2, "yes"
    ctx.csv("input/prescriptions.csv", ["drug", "dose", "frequency", "start_date", "days"], rows)
    ctx.yaml("input/daily_limits.yaml", {"max_daily_mg": {d: _DRUGS[d] for d in drugs},
                                         "frequency_codes": dict(_FREQ),
                                         "date_formats": ["YYYY-MM-DD", "DD/MM/YYYY"]})
    ctx.file("input/README.txt", "Personal medication list exported from the pharmacy app. Not medical advice.\n")
    ctx.distractors(1)
    ctx.ask(
        "From input/prescriptions.csv and input/daily_limits.yaml, work out for each drug the total mg per day "
        "(dose x doses per day from the frequency code), and write output/daily_totals.csv with columns "
        "drug,daily_mg,max_mg,over_limit (yes/no), drug names in lower case, sorted by drug. Also write "
        "output/end_dates.json mapping each drug to the date of its last day (start date counts as day 1), ISO format.")
    exp.sort(key=lambda e: e["drug"])
    ctx.expect("rows", exp)
    ctx.expect("ends", ends)
    ctx.expect("order", [e["drug"] for e in exp])
    dtot, de = "output/daily_totals.csv", "output/end_dates.json"
    ctx.check("daily_totals", f"rows_score(C({dtot!r}), E['rows'], 'drug', ['daily_mg', 'max_mg'])")
    ctx.check("over_limit_flags", f"rows_score(C({dtot!r}), E['rows'], 'drug', ['over_limit'])")
    # row order only: passes on input/prescriptions.csv copied over when it is already sorted by drug
    ctx.check("sorted_by_drug", f"list_equal([r.get('drug') for r in C({dtot!r})], E['order'])", support=True)
    ctx.check("end_dates", f"frac(sum(1 for k, v in E['ends'].items() if str(J({de!r}).get(k)) == v), len(E['ends']))"
                           f" * float(len(J({de!r})) == len(E['ends']))")
    ctx.read("input/daily_limits.yaml")
    ctx.read("input/prescriptions.csv")
    ctx.write(dtot, csv_text(["drug", "daily_mg", "max_mg", "over_limit"],
                             [[e["drug"], e["daily_mg"], e["max_mg"], e["over_limit"]] for e in exp]))
    ctx.write(de, json_text(dict(sorted(ends.items()))))
    ctx.verify_json(de)


# ----------------------------------------------------------------------------------------------
@family("invoice_payment_match", CAT, "financial analysis and support", ["read", "extract", "match", "compute",
        "write"], ["csv", "jsonl", "json"], "Reconcile bank payments (invoice refs written many ways) against open "
        "invoices: paid/partial/unpaid/overpaid balances and unmatched payments.", difficulty=4)
def invoice_payment_match(ctx: Ctx) -> None:
    rng = ctx.rng
    clients = rng.sample(["Acme Ltd", "Bluebird GmbH", "Cedar & Co", "Delta Foods", "Evergreen LLC", "Fjord AS",
                          "Granite Inc", "Harbor Studio"], 5)
    invs, pays, exp = [], [], []
    n = rng.randint(6, 9)
    base = rng.randint(100, 900)
    for i in range(n):
        num = base + i
        amt = round(rng.uniform(120, 4800), 2)
        invs.append([f"INV-{num:04d}", rng.choice(clients), f"{amt:.2f}", f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"])
        kind = rng.choice(["paid", "paid", "partial", "unpaid", "split", "over"])
        parts = {"paid": [amt], "partial": [round(amt * rng.choice([0.3, 0.5]), 2)], "unpaid": [],
                 "split": [round(amt * 0.4, 2), round(amt - round(amt * 0.4, 2), 2)],
                 "over": [round(amt + rng.choice([10, 25.5, 100]), 2)]}[kind]
        for pamt in parts:
            ref = rng.choice([f"INV-{num:04d}", f"inv {num}", f"Invoice #{num}", f"payment for INV{num:04d}"])
            pays.append({"amount": pamt, "memo": f"{ref} {rng.choice(['thanks', '', 'ref ok', 'Q2'])}".strip()})
        paid = round(sum(parts), 2)
        bal = round(amt - paid, 2)
        st = "unpaid" if paid == 0 else "paid" if bal == 0 else "partial" if bal > 0 else "overpaid"
        exp.append({"invoice": f"INV-{num:04d}", "paid": paid, "balance": bal, "status": st})
    stray = [{"amount": round(rng.uniform(20, 300), 2), "memo": rng.choice(["refund card 4421", "cash deposit",
                                                                             f"INV-{base + n + 50:04d} wrong client"])}
             for _ in range(rng.randint(1, 2))]
    pays += stray
    rng.shuffle(pays)
    lines = []
    unmatched = []
    for k, p in enumerate(pays, 1):
        pid = f"P{k:03d}"
        lines.append({"id": pid, "date": f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}", **p})
        if p in stray:
            unmatched.append(pid)
    ctx.csv("finance/invoices.csv", ["invoice", "client", "amount", "issued"], invs)
    ctx.file("finance/bank_payments.jsonl", "".join(json.dumps(l) + "\n" for l in lines))
    ctx.file("finance/README.md", "Payments reference invoices inconsistently: 'INV-0123', 'inv 123', 'Invoice #123', "
                                  "'INV0123' all mean INV-0123. A reference to an invoice number that is not in "
                                  "invoices.csv is unmatched.\n")
    ctx.distractors(1)
    ctx.ask(
        "Please reconcile finance/bank_payments.jsonl against finance/invoices.csv (see finance/README.md for how "
        "payments reference invoices). Write output/reconciliation.csv with columns invoice,paid,balance,status for "
        "every invoice in invoices.csv order (paid = sum of matched payments, balance = amount - paid, 2 decimals; "
        "status = paid, partial, unpaid or overpaid) and output/unmatched_payments.json with the sorted list of "
        "payment ids that match no invoice.")
    ctx.expect("rows", exp)
    ctx.expect("unmatched", sorted(unmatched))
    rc, um = "output/reconciliation.csv", "output/unmatched_payments.json"
    ctx.check("paid_amounts", f"rows_score(C({rc!r}), E['rows'], 'invoice', ['paid'])")
    ctx.check("balances", f"rows_score(C({rc!r}), E['rows'], 'invoice', ['balance'])")
    ctx.check("statuses", f"rows_score(C({rc!r}), E['rows'], 'invoice', ['status'])")
    ctx.check("row_order", f"list_equal([r.get('invoice') for r in C({rc!r})], [e['invoice'] for e in E['rows']])", support=True)
    ctx.check("unmatched", f"list_equal(J({um!r}), E['unmatched'])")
    ctx.read("finance/README.md")
    ctx.read("finance/invoices.csv")
    ctx.read("finance/bank_payments.jsonl")
    ctx.write(rc, csv_text(["invoice", "paid", "balance", "status"],
                           [[e["invoice"], f"{e['paid']:.2f}", f"{e['balance']:.2f}", e["status"]] for e in exp]))
    ctx.write(um, json_text(sorted(unmatched)))
    ctx.verify_json(um)


# ----------------------------------------------------------------------------------------------
@family("vuln_triage", CAT, "security and risk assessment", ["read", "filter", "compute", "sort", "write"],
        ["jsonl", "yaml", "csv", "json"], "Rank open, confirmed scanner findings by CVSS x asset criticality; "
        "summarise by severity band.", difficulty=3)
def vuln_triage(ctx: Ctx) -> None:
    rng = ctx.rng
    hosts = rng.sample(["web-01", "web-02", "db-01", "cache-01", "vpn-gw", "build-01", "mail-01", "hr-app"], 5)
    crit = {h: rng.choice(["high", "medium", "low"]) for h in hosts}
    weights = {"high": 1.5, "medium": 1.0, "low": 0.5}
    finds: list[dict[str, Any]]
    keep: list[dict[str, Any]]
    finds, keep = [], []
    for i in range(rng.randint(10, 16)):
        f: dict[str, Any] = {"id": f"F-{100 + i}", "host": rng.choice(hosts), "cve": f"CVE-2026-{rng.randint(1000, 49999)}",
             "cvss": round(rng.uniform(2.0, 10.0), 1), "status": rng.choice(["open", "open", "fixed"]),
             "false_positive": rng.random() < 0.15}
        finds.append(f)
        if f["status"] == "open" and not f["false_positive"]:
            keep.append({**f, "risk": r2(f["cvss"] * weights[crit[f["host"]]])})
    if not keep:
        finds[0].update(status="open", false_positive=False)
        keep.append({**finds[0], "risk": r2(finds[0]["cvss"] * weights[crit[finds[0]["host"]]])})
    keep.sort(key=lambda f: (-f["risk"], f["id"]))
    bands = {"critical": 0, "high": 0, "medium": 0, "low": 0}
    for f in keep:
        c = f["cvss"]
        bands["critical" if c >= 9.0 else "high" if c >= 7.0 else "medium" if c >= 4.0 else "low"] += 1
    host_risk: dict[str, float] = {}
    for f in keep:
        host_risk[f["host"]] = r2(host_risk.get(f["host"], 0) + f["risk"])
    top = sorted(host_risk.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
    ctx.file("input/scan_results.jsonl", "".join(json.dumps({**f, "status": f["status"].upper() if rng.random() < 0.2
                                                             else f["status"]}) + "\n" for f in finds))
    ctx.yaml("input/assets.yaml", {"criticality": crit, "weights": weights})
    ctx.distractors(2)
    ctx.ask(
        "Triage input/scan_results.jsonl: keep only findings whose status is open (any case) and that are not false "
        "positives. risk = cvss x the weight of the host's criticality from input/assets.yaml, rounded to 2 decimals. "
        "Write output/triage.csv with columns rank,id,host,cvss,risk sorted by risk descending (ties by id), and "
        "output/triage_summary.json with open_findings, by_severity (critical >= 9.0, high >= 7.0, medium >= 4.0, "
        "low otherwise; counts of the kept findings) and top_host (the host with the largest total risk).")
    ctx.expect("rows", [{"id": f["id"], "host": f["host"], "cvss": f["cvss"], "risk": f["risk"], "rank": i + 1}
                        for i, f in enumerate(keep)])
    ctx.expect("summary", {"open_findings": len(keep), "by_severity": bands, "top_host": top})
    tp, sp = "output/triage.csv", "output/triage_summary.json"
    ctx.check("kept_findings", f"set_score([r.get('id') for r in C({tp!r})], [r['id'] for r in E['rows']])")
    ctx.check("risk_values", f"rows_score(C({tp!r}), E['rows'], 'id', ['risk', 'cvss', 'host'])")
    ctx.check("ranking", f"list_equal([r.get('id') for r in C({tp!r})], [r['id'] for r in E['rows']]) and "
                         f"rows_score(C({tp!r}), E['rows'], 'id', ['rank']) == 1.0")
    ctx.check("summary_counts", f"J({sp!r})['open_findings'] == E['summary']['open_findings'] and "
                                f"{{k: to_num(v) for k, v in J({sp!r})['by_severity'].items() if to_num(v)}} == "
                                "{k: float(v) for k, v in E['summary']['by_severity'].items() if v}")
    ctx.check("top_host", f"norm(J({sp!r})['top_host']) == E['summary']['top_host'] and len(C({tp!r})) == "
                          "E['summary']['open_findings']")
    ctx.read("input/assets.yaml")
    ctx.read("input/scan_results.jsonl")
    ctx.write(tp, csv_text(["rank", "id", "host", "cvss", "risk"],
                           [[i + 1, f["id"], f["host"], f["cvss"], f"{f['risk']:.2f}"] for i, f in enumerate(keep)]))
    ctx.write(sp, json_text({"open_findings": len(keep), "by_severity": bands, "top_host": top}))
    ctx.verify_json(sp)


# ----------------------------------------------------------------------------------------------
_FAQ = {
    "shipping": ("How long does shipping take?", "Orders placed before {cut} ship the same day; delivery takes "
                 "{n} business days."),
    "returns": ("What is your return policy?", "You can return unused items within {n} days for a full refund."),
    "warranty": ("Is there a warranty?", "Every product has a {n}-month warranty against manufacturing defects."),
    "invoice": ("Can I get an invoice?", "Invoices are available in your account under Orders within {n} hours."),
}


@family("support_reply_drafts", CAT, "email and communication writing", ["read", "classify", "write", "verify"],
        ["jsonl", "md", "csv"], "Draft one reply per customer email from an FAQ (facts must be copied exactly), skip "
        "spam, and index what was answered.", difficulty=3)
def support_reply_drafts(ctx: Ctx) -> None:
    rng = ctx.rng
    facts = {k: a.format(n=rng.choice([2, 3, 5, 14, 30, 12, 24, 48]), cut=rng.choice(["2 pm", "3 pm", "noon"]))
             for k, (q, a) in _FAQ.items()}
    names = people(rng, 8)
    msgs, exp = [], []
    asks = {"shipping": "when will my order arrive", "returns": "can I send back the lamp I bought",
            "warranty": "my kettle broke after a month, is it covered", "invoice": "I need an invoice for my company"}
    for i in range(rng.randint(5, 7)):
        mid = f"M{i + 1:02d}"
        if rng.random() < 0.2:
            msgs.append({"id": mid, "from": "promo@deals.example", "name": "", "subject": "You WON a prize!!!",
                         "body": "Click here to claim", "label": "spam"})
            exp.append({"id": mid, "replied": "no", "topic": "spam", "name": ""})
            continue
        topic = rng.choice(list(_FAQ))
        nm = names[i]
        msgs.append({"id": mid, "from": nm.split()[0].lower() + "@example.com", "name": nm,
                     "subject": asks[topic].capitalize(), "body": f"Hi, {asks[topic]}? Thanks, {nm.split()[0]}",
                     "label": topic})
        exp.append({"id": mid, "replied": "yes", "topic": topic, "name": nm.split()[0]})
    if all(e["replied"] == "no" for e in exp):
        exp[0].update(replied="yes", topic="returns", name=names[0].split()[0])
        msgs[0] = {"id": exp[0]["id"], "from": "x@example.com", "name": names[0], "subject": "Return",
                   "body": f"Hi, {asks['returns']}?", "label": "returns"}
    ctx.file("input/inbox.jsonl", "".join(json.dumps(m) + "\n" for m in msgs))
    ctx.file("input/faq.md", "# Customer FAQ\n\n" + "".join(f"## {q} ({k})\n\n{facts[k]}\n\n" for k, (q, _) in _FAQ.items()))
    ctx.distractors(2)
    ctx.ask(
        "Please draft replies to the emails in input/inbox.jsonl using input/faq.md. For every non-spam email write "
        "output/replies/<id>.md that greets the customer by first name and contains the matching FAQ answer sentence "
        "word for word. Don't reply to spam. Then write output/replies/index.csv with columns id,topic,replied "
        "(yes/no) for every email, in id order (topic 'spam' for spam).")
    ctx.expect("rows", [{k: e[k] for k in ("id", "topic", "replied")} for e in exp])
    ctx.expect("replies", {e["id"]: [f"Hi {e['name']}", facts[e["topic"]]] for e in exp if e["replied"] == "yes"})
    ctx.expect("spam", [e["id"] for e in exp if e["replied"] == "no"])
    ix = "output/replies/index.csv"
    ctx.check("index_rows", f"rows_score(C({ix!r}), E['rows'], 'id', ['topic', 'replied'])")
    ctx.check("reply_facts", "frac(sum(contains_all(T('output/replies/' + k + '.md'), [v[1]]) for k, v in "
                             "E['replies'].items()), len(E['replies']))", support=True)
    ctx.check("reply_greeting", "frac(sum(contains_all(T('output/replies/' + k + '.md'), [v[0]]) for k, v in "
                                "E['replies'].items()), len(E['replies']))")
    first = next(e for e in exp if e["replied"] == "yes")
    ctx.rubric_rule("reply_tone", f"output/replies/{first['id']}.md",
                    {"0": "missing or rude", "0.25": "answers the wrong question", "0.5": "correct but curt",
                     "0.75": "polite and correct", "1": "warm, personal, correct and concise"})
    _proxy(ctx, required_phrases=[f"Hi {first['name']}", facts[first["topic"]]], max_words=150,
           forbidden_phrases=["click here", "prize"])
    ctx.check("no_spam_replies", f"len(C({ix!r})) == len(E['rows']) and "
                                 "not any(exists(ws, 'output/replies/' + k + '.md') for k in E['spam'])", support=True)
    ctx.read("input/faq.md")
    ctx.read("input/inbox.jsonl")
    for e in exp:
        if e["replied"] == "yes":
            ctx.write(f"output/replies/{e['id']}.md", f"Hi {e['name']},\n\nThanks for reaching out. {facts[e['topic']]}"
                                                      "\n\nBest regards,\nCustomer Support\n")
    ctx.write(ix, csv_text(["id", "topic", "replied"], [[e["id"], e["topic"], e["replied"]] for e in exp]))
    ctx.exec("ls output/replies && cat " + ix)
    # the index is the primary deliverable (the generic mutations target it)
    ctx.outputs.remove(ix)
    ctx.outputs.insert(0, ix)


__all__ = ["CAT"]
