"""analysis_reasoning families: data analysis, ranking/scoring, trends, finance, decision support, logic."""

from __future__ import annotations

import datetime as dt
from collections import Counter, defaultdict
from typing import Any, cast

from clawgym.synth.families.base import (
    PRODUCTS,
    Ctx,
    csv_text,
    dirty_number,
    dirty_text,
    family,
    json_text,
    md_table_text,
    people,
    r2,
)

CAT = "analysis_reasoning"


# ------------------------------------------------------------------------------------------------
@family("sales_rollup", CAT, "data analysis and calculation", ["read", "transform", "compute", "write"],
        ["csv", "json"], "Clean a messy sales export (dirty numbers, duplicate orders) and aggregate it.")
def sales_rollup(ctx: Ctx) -> None:
    """Messy sales export (dirty numbers, duplicate orders) -> aggregated output/summary.json."""
    rng = ctx.rng
    regions = rng.sample(["North", "South", "East", "West", "Central"], rng.randint(3, 4))
    prods = rng.sample(PRODUCTS, 4)
    rows, clean = [], {}
    for i in range(rng.randint(14, 22)):
        oid = f"SO-{1000 + i}"
        reg, prod = rng.choice(regions), rng.choice(prods)
        qty, price = rng.randint(1, 9), r2(rng.uniform(5, 120))
        rows.append([oid, dirty_text(rng, reg), prod, qty, dirty_number(rng, price)])
        clean[oid] = (reg, prod, qty, price)
    for oid in rng.sample(sorted(clean), 3):  # duplicated export lines
        reg, prod, qty, price = clean[oid]
        rows.insert(rng.randrange(len(rows)), [oid, reg, prod, qty, f"{price:.2f}"])
    ctx.csv("input/sales_export.csv", ["order_id", "region", "product", "qty", "unit_price"], rows)
    ctx.distractors(2)
    by_region: dict[str, float] = defaultdict(float)
    by_prod: dict[str, float] = defaultdict(float)
    for reg, prod, qty, price in clean.values():
        by_region[reg] += qty * price
        by_prod[prod] += qty * price
    total = r2(sum(by_region.values()))
    top = max(sorted(by_prod), key=lambda p: by_prod[p])
    result = {"total_revenue": total, "orders": len(clean),
              "revenue_by_region": {k: r2(v) for k, v in sorted(by_region.items())}, "top_product": top}
    ctx.ask("input/sales_export.csv is our raw sales export. Some order lines were exported twice (same order_id) "
            "and the region/price columns are messy (stray spaces, capitalisation, '$' and thousands separators). "
            "Count each order once, revenue = qty * unit_price. Write output/summary.json with keys "
            "total_revenue (number, 2 decimals), orders (distinct orders), revenue_by_region (region name in Title "
            "case -> revenue) and top_product (product with the highest revenue).")
    ctx.expect("r", result)
    ctx.check("total_revenue", "close(J('output/summary.json')['total_revenue'], E['r']['total_revenue'])")
    ctx.check("orders", "J('output/summary.json')['orders'] == E['r']['orders']")
    ctx.check("by_region", "rows_score([{'k': k, 'v': v} for k, v in J('output/summary.json')['revenue_by_region'].items()],"
                           " [{'k': k, 'v': v} for k, v in E['r']['revenue_by_region'].items()], 'k', ['v'])")
    ctx.check("top_product", "norm(J('output/summary.json')['top_product']) == norm(E['r']['top_product'])")
    ctx.read("input/sales_export.csv")
    ctx.exec("python3 -c \"import csv; r=list(csv.DictReader(open('input/sales_export.csv'))); "
             "print(len(r), len({x['order_id'] for x in r}))\"")
    ctx.write("output/summary.json", json_text(result))
    ctx.verify_json("output/summary.json")


# ------------------------------------------------------------------------------------------------
@family("expense_policy_audit", CAT, "transaction and financial analysis", ["read", "filter", "compute", "write"],
        ["csv", "yaml"], "Flag expense lines that break a YAML policy (limits, duplicates, missing receipts).", 3)
def expense_policy_audit(ctx: Ctx) -> None:
    """Expense lines checked against a YAML policy -> output/flagged.csv (id, reason)."""
    rng = ctx.rng
    limits = {"meals": rng.choice([40, 50, 60]), "travel": rng.choice([300, 400, 500]),
              "lodging": rng.choice([150, 180, 220]), "supplies": rng.choice([80, 100])}
    receipt_over = rng.choice([25, 30])
    staff = people(rng, 4)
    rows, flagged = [], []
    seen: set[tuple] = set()
    day0 = dt.date(2026, rng.randint(1, 10), 1)
    for i in range(rng.randint(16, 24)):
        cat = rng.choice(sorted(limits))
        over = rng.random() < 0.2
        amt = r2(limits[cat] * (rng.uniform(1.05, 1.6) if over else rng.uniform(0.2, 0.95)))
        who = rng.choice(staff)
        day = (day0 + dt.timedelta(days=rng.randint(0, 27))).isoformat()
        receipt = "yes" if (amt <= receipt_over or rng.random() < 0.8) else "no"
        eid = f"E{200 + i}"
        rows.append([eid, who, day, cat, f"{amt:.2f}", receipt])
        if rng.random() < 0.12 and i > 0:  # duplicate submission of the same expense
            prev = rows[-2]
            rows[-1] = [eid, prev[1], prev[2], prev[3], prev[4], prev[5]]
            who, day, cat, amt, receipt = prev[1], prev[2], prev[3], float(prev[4]), prev[5]
        key = (who, day, cat, f"{amt:.2f}")
        reasons = []
        if key in seen:
            reasons.append("duplicate")
        seen.add(key)
        if amt > limits[cat]:
            reasons.append("over_limit")
        if receipt == "no" and amt > receipt_over:
            reasons.append("missing_receipt")
        if reasons:
            flagged.append({"id": eid, "reason": ";".join(reasons)})
    if not flagged:  # guarantee at least one
        rows[0][3], rows[0][4] = "meals", f"{limits['meals'] * 1.5:.2f}"
        flagged.insert(0, {"id": rows[0][0], "reason": "over_limit"})
    ctx.csv("input/expenses.csv", ["id", "employee", "date", "category", "amount", "receipt"], rows)
    ctx.yaml("input/policy.yaml", {"limits_per_item": limits, "receipt_required_above": receipt_over,
                                   "duplicates": "same employee, date, category and amount = duplicate; "
                                                 "the first occurrence is fine, later ones are flagged"})
    ctx.distractors(2)
    ctx.ask("Audit input/expenses.csv against input/policy.yaml. Write output/flagged.csv with columns id,reason "
            "listing every expense that breaks the policy, in the original order. reason is one or more of "
            "duplicate, over_limit, missing_receipt joined by ';' in that order. Do not list compliant lines.")
    ctx.expect("flagged", flagged)
    ctx.check("flagged_rows", "rows_score(C('output/flagged.csv'), E['flagged'], 'id', ['reason'])")
    ctx.check("order", "[r['id'] for r in C('output/flagged.csv')] == [f['id'] for f in E['flagged']]")
    ctx.keep_inputs("input/expenses.csv")
    ctx.read("input/policy.yaml")
    ctx.read("input/expenses.csv")
    ctx.write("output/flagged.csv", csv_text(["id", "reason"], [[f["id"], f["reason"]] for f in flagged]))
    ctx.exec("wc -l output/flagged.csv && head -3 output/flagged.csv")


# ------------------------------------------------------------------------------------------------
@family("weighted_ranking", CAT, "classification, ranking, and scoring", ["read", "compute", "sort", "write"],
        ["json", "yaml", "csv"], "Rank options with a weighted scoring rubric, normalising scales first.")
def weighted_ranking(ctx: Ctx) -> None:
    """Options ranked by a weighted rubric after normalising scales -> output/ranking.csv."""
    rng = ctx.rng
    kind = rng.choice(["vendor", "candidate", "apartment"])
    crits = {"vendor": ["price", "support", "quality", "delivery"],
             "candidate": ["experience", "interview", "skills", "references"],
             "apartment": ["rent", "commute", "space", "light"]}[kind]
    lower_better = {"price", "rent", "commute", "delivery"}
    raw = [rng.randint(1, 5) for _ in crits]
    weights = {c: round(w / sum(raw), 2) for c, w in zip(crits, raw)}
    weights[crits[-1]] = round(1 - sum(weights[c] for c in crits[:-1]), 2)
    names = people(rng, rng.randint(5, 7)) if kind == "candidate" else \
        [f"{kind.title()} {chr(65 + i)}" for i in range(rng.randint(5, 7))]
    opts: list[dict[str, Any]] = []
    for n in names:
        opts.append({"name": n, "scores": {c: rng.randint(1, 10) for c in crits}})
    ranked: list[dict[str, Any]] = []
    for o in opts:
        s = sum(weights[c] * ((11 - o["scores"][c]) if c in lower_better else o["scores"][c]) for c in crits)
        ranked.append({"name": o["name"], "score": r2(s)})
    ranked.sort(key=lambda r: (-r["score"], r["name"]))
    for i, r in enumerate(ranked, 1):
        r["rank"] = i
    ctx.json(f"input/{kind}s.json", opts)
    ctx.yaml("input/rubric.yaml", {"scale": "1-10 for every criterion",
                                   "weights": weights,
                                   "lower_is_better": sorted(c for c in crits if c in lower_better),
                                   "note": "for lower-is-better criteria use (11 - value) before weighting"})
    ctx.distractors(2)
    ctx.ask(f"Rank the {kind}s in input/{kind}s.json using input/rubric.yaml. Write output/ranking.csv with "
            "columns rank,name,score (score = weighted sum, 2 decimals), best first; break ties by name A-Z.")
    ctx.expect("ranked", ranked)
    ctx.check("scores", "rows_score(C('output/ranking.csv'), E['ranked'], 'name', ['score'])")
    ctx.check("ranks", "rows_score(C('output/ranking.csv'), E['ranked'], 'name', ['rank'])")
    ctx.check("order", "[norm(r['name']) for r in C('output/ranking.csv')] == [norm(r['name']) for r in E['ranked']]")
    ctx.read("input/rubric.yaml")
    ctx.read(f"input/{kind}s.json")
    ctx.write("output/ranking.csv", csv_text(["rank", "name", "score"],
                                             [[r["rank"], r["name"], f"{r['score']:.2f}"] for r in ranked]))
    ctx.exec("column -s, -t < output/ranking.csv | head -5")


# ------------------------------------------------------------------------------------------------
@family("metric_trend_alerts", CAT, "trend monitoring and detection", ["read", "compute", "compare", "write"],
        ["csv", "json"], "Compare week-over-week averages of daily metrics and flag the ones that moved too much.")
def metric_trend_alerts(ctx: Ctx) -> None:
    """Week-over-week averages of daily metrics -> output/trends.json and output/alerts.txt."""
    rng = ctx.rng
    metrics = rng.sample(["signups", "churned", "tickets", "page_views", "refunds", "orders", "errors"], 4)
    threshold = rng.choice([15, 20, 25])
    start = dt.date(2026, rng.randint(1, 9), rng.randint(1, 20))
    series: dict[str, list[int]] = {m: [] for m in metrics}
    base = {m: rng.randint(40, 400) for m in metrics}
    shift = {m: rng.choice([0.0, 0.05, -0.08, 0.3, -0.35, 0.5]) for m in metrics}
    rows: list[list[Any]] = []
    for d in range(14):
        day = start + dt.timedelta(days=d)
        row: list[Any] = [day.isoformat()]
        for m in metrics:
            f = 1 + (shift[m] if d >= 7 else 0)
            v = max(0, int(base[m] * f * rng.uniform(0.93, 1.07)))
            series[m].append(v)
            row.append(v)
        rows.append(row)
    out = {}
    for m in metrics:
        prev, cur = sum(series[m][:7]) / 7, sum(series[m][7:]) / 7
        pct = r2((cur - prev) / prev * 100) if prev else 0.0
        out[m] = {"prev_avg": r2(prev), "curr_avg": r2(cur), "pct_change": pct, "alert": abs(pct) >= threshold}
    rows.insert(rng.randrange(3, 12), ["# export paused 03:00-03:05 UTC"] + [""] * len(metrics))
    ctx.csv("input/daily_metrics.csv", ["date", *metrics], rows)
    ctx.distractors(2)
    ctx.ask(f"input/daily_metrics.csv has 14 days of metrics (ignore comment lines starting with '#'). For each metric "
            "compare the average of the first 7 days (prev) with the last 7 days (curr). Write output/trends.json "
            "mapping metric -> {prev_avg, curr_avg, pct_change, alert}, numbers rounded to 2 decimals, pct_change = "
            f"(curr-prev)/prev*100, alert = true when |pct_change| >= {threshold}. Also write output/alerts.txt with "
            "the alerting metric names, one per line, alphabetical (empty file if none).")
    ctx.expect("t", out)
    ctx.expect("alerts", sorted(m for m in metrics if out[m]["alert"]))
    ctx.check("averages", "rows_score([dict(v, m=k) for k, v in J('output/trends.json').items()],"
                          " [dict(v, m=k) for k, v in E['t'].items()], 'm', ['prev_avg', 'curr_avg'])")
    ctx.check("pct_change", "rows_score([dict(v, m=k) for k, v in J('output/trends.json').items()],"
                            " [dict(v, m=k) for k, v in E['t'].items()], 'm', ['pct_change'])")
    ctx.check("alert_flags", "all(bool(J('output/trends.json')[k]['alert']) == v['alert'] for k, v in E['t'].items())")
    ctx.check("alerts_file", "exists(ws, 'output/trends.json') and T('output/alerts.txt') is not None and "
                             "[l.strip() for l in T('output/alerts.txt').splitlines() if l.strip()] == E['alerts']")
    ctx.read("input/daily_metrics.csv")
    ctx.exec("grep -v '^#' input/daily_metrics.csv | head -3")
    ctx.write("output/trends.json", json_text(out))
    ctx.write("output/alerts.txt", "".join(m + "\n" for m in sorted(m for m in metrics if out[m]["alert"])))
    ctx.verify_json("output/trends.json")


# ------------------------------------------------------------------------------------------------
@family("plan_cost_decision", CAT, "lifestyle decision support", ["read", "compute", "compare", "write"],
        ["json", "md"], "Pick the cheapest plan for a usage profile and justify it with a cost table.")
def plan_cost_decision(ctx: Ctx) -> None:
    """Cheapest plan for a year's usage, justified with a cost table -> output/decision.md."""
    rng = ctx.rng
    kind = rng.choice(["mobile", "gym", "electricity", "cloud storage"])
    unit = {"mobile": "GB", "gym": "visit", "electricity": "kWh", "cloud storage": "GB"}[kind]
    plans: list[dict[str, Any]] = []
    for i in range(rng.randint(3, 5)):
        plans.append({"name": f"{rng.choice(['Basic', 'Plus', 'Flex', 'Max', 'Saver', 'Go'])} {i + 1}",
                      "monthly_fee": r2(rng.uniform(5, 45)), "included": rng.choice([0, 5, 10, 20, 50]),
                      "per_extra_unit": r2(rng.uniform(0.1, 3)), "setup_fee": rng.choice([0, 0, 10, 25, 49])})
    usage = [rng.randint(2, 60) for _ in range(12)]
    table = []
    for p in plans:
        extra = sum(max(0, u - p["included"]) * p["per_extra_unit"] for u in usage)
        table.append({"plan": p["name"], "annual_cost": r2(12 * p["monthly_fee"] + extra + p["setup_fee"])})
    table.sort(key=lambda r: (r["annual_cost"], r["plan"]))
    ctx.json("input/plans.json", {"unit": unit, "plans": plans})
    ctx.csv("input/usage_last_year.csv", ["month", f"{unit}s_used"], [[m + 1, u] for m, u in enumerate(usage)])
    ctx.distractors(1)
    ctx.ask(f"I'm choosing a {kind} plan. Assuming next year's usage equals input/usage_last_year.csv, compute each "
            "plan's annual cost from input/plans.json (12 x monthly_fee + setup_fee + for every month the units above "
            "'included' x per_extra_unit). Write output/decision.md with a markdown table with columns plan and "
            "annual_cost (cheapest first, 2 decimals), followed by a line 'Recommendation: <plan name>'.")
    ctx.expect("table", table)
    ctx.check("costs", "rows_score(md_table(T('output/decision.md')), E['table'], 'plan', ['annual_cost'])")
    ctx.check("order", "[norm(r['plan']) for r in md_table(T('output/decision.md'))] == [norm(r['plan']) for r in E['table']]")
    ctx.check("recommendation", "norm(re_find(r'recommendation:\\s*(.+)', T('output/decision.md'))) == norm(E['table'][0]['plan'])")
    ctx.grade.helper("def re_find(p, t):\n    m = _re.search(p, t or '', _re.I)\n    return m.group(1).strip().strip('*') if m else None")
    ctx.rubric_rule("justification", "output/decision.md",
                    {"0": "no justification", "0.5": "mentions cost only", "1": "explains cost drivers for the usage profile"})
    md = f"# {kind.title()} plan decision\n\n" + md_table_text(
        ["plan", "annual_cost"], [[r["plan"], f"{r['annual_cost']:.2f}"] for r in table]) + \
        f"\nRecommendation: {table[0]['plan']}\n\nIt has the lowest annual cost for last year's usage profile.\n"
    ctx.read("input/plans.json")
    ctx.read("input/usage_last_year.csv")
    ctx.exec("python3 -c \"import csv; print(sum(int(r['" + unit + "s_used']) for r in csv.DictReader(open('input/usage_last_year.csv'))))\"")
    ctx.write("output/decision.md", md)


# ------------------------------------------------------------------------------------------------
@family("gradebook_finals", CAT, "data analysis and calculation", ["read", "transform", "compute", "write"],
        ["csv", "yaml"], "Compute weighted final grades with dropped-lowest and excused entries, then letter grades.", 3)
def gradebook_finals(ctx: Ctx) -> None:
    """Weighted final grades (dropped-lowest, excused entries) and letters -> output/finals.csv."""
    rng = ctx.rng
    hw = [f"hw{i}" for i in range(1, rng.randint(4, 6))]
    w_hw, w_exam = rng.choice([(0.4, 0.6), (0.5, 0.5), (0.3, 0.7)])
    cut = {"A": 90, "B": 80, "C": 70, "D": 60}
    students = people(rng, rng.randint(6, 9))
    rows, expected = [], []
    for s in students:
        marks = [rng.choice([rng.randint(50, 100)] * 5 + ["EX"]) for _ in hw]
        exam = rng.randint(45, 100)
        rows.append([s, *marks, exam])
        nums = cast("list[int]", [m for m in marks if m != "EX"])  # every mark but "EX" is an int
        if len(nums) > 1:
            nums.remove(min(nums))
        hw_avg = sum(nums) / len(nums) if nums else 0
        final = r2(w_hw * hw_avg + w_exam * exam)
        letter = next((k for k, v in cut.items() if final >= v), "F")
        expected.append({"student": s, "final": final, "letter": letter})
    ctx.csv("input/gradebook.csv", ["student", *hw, "exam"], rows)
    ctx.yaml("input/grading_policy.yaml", {"weights": {"homework": w_hw, "exam": w_exam},
                                           "homework": "drop the single lowest numeric homework score; EX = excused "
                                                       "(ignored, not zero)", "letter_cutoffs": cut})
    ctx.distractors(2)
    ctx.ask("Compute final grades for input/gradebook.csv following input/grading_policy.yaml. Write output/finals.csv "
            "with columns student,final,letter (final rounded to 2 decimals), same student order as the gradebook.")
    ctx.expect("rows", expected)
    ctx.check("finals", "rows_score(C('output/finals.csv'), E['rows'], 'student', ['final'])")
    ctx.check("letters", "rows_score(C('output/finals.csv'), E['rows'], 'student', ['letter'])")
    ctx.check("order", "[norm(r['student']) for r in C('output/finals.csv')] == [norm(r['student']) for r in E['rows']]", support=True)
    ctx.read("input/grading_policy.yaml")
    ctx.read("input/gradebook.csv")
    ctx.write("output/finals.csv", csv_text(["student", "final", "letter"],
                                            [[e["student"], f"{e['final']:.2f}", e["letter"]] for e in expected]))
    ctx.exec("cat output/finals.csv")


# ------------------------------------------------------------------------------------------------
@family("budget_variance", CAT, "transaction and financial analysis", ["read", "join", "compute", "write"],
        ["csv", "md"], "Join budget and actuals by cost centre, compute variances and summarise overruns.")
def budget_variance(ctx: Ctx) -> None:
    """Budget vs actuals per cost centre -> output/variance.csv and output/overruns.md."""
    rng = ctx.rng
    centres = rng.sample(["Marketing", "Engineering", "Sales", "Support", "Facilities", "HR", "Legal", "IT"], 6)
    budget = {c: rng.randint(20, 200) * 500 for c in centres}
    actual_lines = []
    actual = cast("dict[str, float]", Counter())  # float amounts: a Counter as a float tally
    for c in centres:
        tgt = budget[c] * rng.uniform(0.7, 1.3)
        parts = rng.randint(2, 4)
        for _k in range(parts):
            amt = r2(tgt / parts * rng.uniform(0.8, 1.2))
            actual[c] += amt
            actual_lines.append([rng.choice(["2026-0%d" % m for m in range(1, 4)]), dirty_text(rng, c),
                                 dirty_number(rng, amt)])
    rng.shuffle(actual_lines)
    rows: list[dict[str, Any]] = []
    for c in sorted(centres):
        a = r2(actual[c])
        rows.append({"cost_centre": c, "budget": budget[c], "actual": a, "variance": r2(a - budget[c]),
                     "variance_pct": r2((a - budget[c]) / budget[c] * 100)})
    over = sorted([r for r in rows if r["variance"] > 0], key=lambda r: -r["variance"])
    ctx.csv("input/budget_q1.csv", ["cost_centre", "budget"], [[c, budget[c]] for c in centres])
    ctx.csv("input/actuals_q1.csv", ["month", "cost_centre", "amount"], actual_lines)
    ctx.distractors(2)
    ctx.ask("Compare Q1 spend with budget. input/actuals_q1.csv has many lines per cost centre (names and amounts "
            "are messy). Write output/variance.csv with columns cost_centre,budget,actual,variance,variance_pct "
            "(variance = actual - budget; pct of budget; 2 decimals), cost centres A-Z. Then write output/overruns.md: "
            "a bullet list '- <cost centre>: <variance>' of the centres over budget, largest overrun first.")
    ctx.expect("rows", rows)
    ctx.expect("over", [r["cost_centre"] for r in over])
    ctx.check("actuals", "rows_score(C('output/variance.csv'), E['rows'], 'cost_centre', ['budget', 'actual'])")
    ctx.check("variance", "rows_score(C('output/variance.csv'), E['rows'], 'cost_centre', ['variance', 'variance_pct'])")
    ctx.check("overruns", "[norm(b.split(':')[0]) for b in md_bullets(T('output/overruns.md'))] == [norm(c) for c in E['over']]"
                          " if E['over'] else (T('output/overruns.md') is not None and not md_bullets(T('output/overruns.md'))"
                          " and exists(ws, 'output/variance.csv') and len(C('output/variance.csv') or []) == len(E['rows']))")
    ctx.read("input/budget_q1.csv")
    ctx.read("input/actuals_q1.csv")
    ctx.exec("cut -d, -f2 input/actuals_q1.csv | sort | uniq -c")
    ctx.write("output/variance.csv", csv_text(
        ["cost_centre", "budget", "actual", "variance", "variance_pct"],
        [[r["cost_centre"], r["budget"], f"{r['actual']:.2f}", f"{r['variance']:.2f}", f"{r['variance_pct']:.2f}"]
         for r in rows]))
    ctx.write("output/overruns.md", "# Q1 overruns\n\n" + "".join(f"- {r['cost_centre']}: {r['variance']:.2f}\n" for r in over))
