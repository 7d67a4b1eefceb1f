"""Planning & Knowledge Management families (scheduling, capacity, actions, curricula, knowledge bases)."""

from __future__ import annotations

import datetime as dt
import heapq
from typing import Any

from clawgym.synth.families.base import Ctx, csv_text, dirty_text, family, json_text, md_table_text, people

CAT = "planning_knowledge"

_TASKS = ["Kickoff", "Requirements", "Design", "Vendor quotes", "Prototype", "Data migration", "API build",
          "UI build", "Security review", "Load test", "Docs", "Training", "Pilot", "Launch", "Retro"]


def _dag(rng, n: int, max_deps: int = 2) -> tuple[list[str], dict[str, list[str]]]:
    ids = [f"T{i + 1:02d}" for i in range(n)]
    deps: dict[str, list[str]] = {ids[0]: []}
    for i in range(1, n):
        deps[ids[i]] = sorted(rng.sample(ids[:i], rng.randint(1 if i > 1 else 0, min(max_deps, i))))
    return ids, deps


# ----------------------------------------------------------------------------------------------
@family("project_critical_path", CAT, "task planning and decomposition", ["read", "compute", "sort", "write"],
        ["yaml", "csv", "json"], "Forward/backward pass over a task dependency graph: earliest start/finish, "
        "slack, project length and critical tasks.", difficulty=4)
def project_critical_path(ctx: Ctx) -> None:
    rng = ctx.rng
    n = rng.randint(7, 10)
    ids, deps = _dag(rng, n)
    names = rng.sample(_TASKS, n)
    days = {t: rng.randint(1, 8) for t in ids}
    es: dict[str, int]
    ef: dict[str, int]
    es, ef = {}, {}
    for t in ids:
        es[t] = max((ef[d] for d in deps[t]), default=0)
        ef[t] = es[t] + days[t]
    total = max(ef.values())
    succ = {t: [s for s in ids if t in deps[s]] for t in ids}
    lf: dict[str, int]
    ls: dict[str, int]
    lf, ls = {}, {}
    for t in reversed(ids):
        lf[t] = min((ls[s] for s in succ[t]), default=total)
        ls[t] = lf[t] - days[t]
    slack = {t: ls[t] - es[t] for t in ids}
    crit = sorted(t for t in ids if slack[t] == 0)
    listing = [{"id": t, "name": names[i], "duration": rng.choice([f"{days[t]}d", days[t], f"{days[t]} days"]),
                "depends_on": deps[t]} for i, t in enumerate(ids)]
    rng.shuffle(listing)
    ctx.yaml("plan/tasks.yaml", {"project": f"{rng.choice(['Website', 'CRM', 'Warehouse', 'Intranet'])} relaunch",
                                 "unit": "working days", "tasks": listing})
    ctx.file("plan/notes.md", "# Planning notes\n\n- Durations are in working days; ignore weekends.\n"
                              "- A task starts when all of its dependencies have finished (day 0 = project start).\n")
    ctx.distractors(2)
    rows = sorted(ids, key=lambda t: (es[t], t))
    ctx.ask(
        "Could you schedule the project in plan/tasks.yaml (read plan/notes.md first)? Write output/schedule.csv with "
        "columns id,earliest_start,earliest_finish,slack for every task, sorted by earliest_start then id, and "
        "output/plan_summary.json with project_days (total length) and critical_tasks (ids with zero slack, sorted).")
    ctx.expect("rows", [{"id": t, "earliest_start": es[t], "earliest_finish": ef[t], "slack": slack[t]} for t in rows])
    ctx.expect("order", rows)
    ctx.expect("total", total)
    ctx.expect("crit", crit)
    sc, sm = "output/schedule.csv", "output/plan_summary.json"
    ctx.check("start_finish", f"rows_score(C({sc!r}), E['rows'], 'id', ['earliest_start', 'earliest_finish'])")
    ctx.check("slack", f"rows_score(C({sc!r}), E['rows'], 'id', ['slack'])")
    ctx.check("row_order", f"list_equal([r.get('id') for r in C({sc!r})], E['order'])")
    ctx.check("project_days", f"to_num(J({sm!r})['project_days']) == E['total']")
    ctx.check("critical_tasks", f"list_equal(J({sm!r})['critical_tasks'], E['crit'])")
    ctx.check("cross_file", f"sorted(r['id'] for r in C({sc!r}) if to_num(r.get('slack')) == 0) == "
                            f"sorted(J({sm!r})['critical_tasks']) == E['crit']")
    ctx.read("plan/notes.md")
    ctx.read("plan/tasks.yaml")
    ctx.write(sc, csv_text(["id", "earliest_start", "earliest_finish", "slack"],
                           [[t, es[t], ef[t], slack[t]] for t in rows]))
    ctx.write(sm, json_text({"project_days": total, "critical_tasks": crit}))
    ctx.verify_json(sm)


# ----------------------------------------------------------------------------------------------
_STORIES = ["Export to PDF", "SSO login", "Audit log", "Bulk upload", "Dark mode", "Email templates",
            "Usage dashboard", "Webhooks", "Role permissions", "Search filters", "Mobile layout", "Rate limiting",
            "Invoice reminders", "Data retention job", "CSV import"]


@family("sprint_capacity_plan", CAT, "task planning and decomposition", ["read", "filter", "sort", "compute", "write"],
        ["csv", "yaml", "json", "md"], "Greedy sprint planning: team capacity x focus factor, eligible stories by "
        "priority, skip what does not fit.", difficulty=3)
def sprint_capacity_plan(ctx: Ctx) -> None:
    rng = ctx.rng
    team = {nm: rng.choice([6, 8, 10]) for nm in people(rng, rng.randint(3, 5))}
    focus = rng.choice([0.6, 0.7, 0.8])
    cap = int(sum(team.values()) * focus)
    items: list[dict[str, Any]]
    rows, items = [], []
    for i, title in enumerate(rng.sample(_STORIES, rng.randint(9, 13))):
        sid = f"S-{rng.randint(10, 99)}{i}"
        pts = rng.choice([1, 2, 3, 5, 8, 13])
        pr = rng.choice(["P1", "P2", "P3"])
        st = rng.choice(["todo", "todo", "todo", "done", "blocked"])
        rows.append([sid, title, pts, dirty_text(rng, pr.lower() if rng.random() < 0.3 else pr, 0.2),
                     dirty_text(rng, st.upper() if rng.random() < 0.25 else st, 0.2)])
        items.append({"id": sid, "title": title, "points": pts, "priority": pr, "status": st})
    elig = sorted((it for it in items if it["status"] == "todo"), key=lambda it: (it["priority"], it["id"]))
    sel, left = [], cap
    for it in elig:
        if it["points"] <= left:
            sel.append(it)
            left -= it["points"]
    deferred = sorted(it["id"] for it in elig if it not in sel)
    ctx.csv("backlog/backlog.csv", ["id", "title", "points", "priority", "status"], rows)
    ctx.yaml("backlog/team.yaml", {"sprint_days": 10, "members": [{"name": k, "capacity_points": v}
                                                                  for k, v in team.items()], "focus_factor": focus})
    ctx.distractors(2)
    ctx.ask(
        "Plan next sprint from backlog/backlog.csv and backlog/team.yaml. Capacity = sum of member capacity_points x "
        "focus_factor, rounded down. Only 'todo' stories are eligible (status/priority text is messy). Go through "
        "eligible stories by priority (P1 first) then id, and take each one that still fits in the remaining capacity "
        "(skip ones that don't, keep going). Write output/sprint_plan.json with capacity, selected (ids in that order), "
        "committed_points and deferred (eligible ids not taken, sorted), plus output/sprint_plan.md with a markdown "
        "table id | title | points of the selected stories.")
    ctx.expect("cap", cap)
    ctx.expect("sel", [it["id"] for it in sel])
    ctx.expect("pts", sum(it["points"] for it in sel))
    ctx.expect("deferred", deferred)
    pj, pm = "output/sprint_plan.json", "output/sprint_plan.md"
    ctx.check("capacity", f"to_num(J({pj!r})['capacity']) == E['cap']")
    ctx.check("selected", f"list_equal(J({pj!r})['selected'], E['sel'])")
    ctx.check("committed_points", f"to_num(J({pj!r})['committed_points']) == E['pts']")
    ctx.check("deferred", f"set_score(J({pj!r})['deferred'], E['deferred']) if E['deferred'] else "
                          f"float(J({pj!r})['deferred'] == [])")
    ctx.check("md_table", f"[r.get('id') for r in md_table(T({pm!r}))] == E['sel']")
    ctx.read("backlog/team.yaml")
    ctx.read("backlog/backlog.csv")
    ctx.write(pj, json_text({"capacity": cap, "selected": [it["id"] for it in sel],
                             "committed_points": sum(it["points"] for it in sel), "deferred": deferred}))
    ctx.write(pm, f"# Sprint plan\n\nCapacity: {cap} points\n\n" +
              md_table_text(["id", "title", "points"], [[it["id"], it["title"], it["points"]] for it in sel]))
    ctx.verify_json(pj)


# ----------------------------------------------------------------------------------------------
_OBJ = {"Grow the customer base": ["New paying customers", "Trial-to-paid conversion %", "Referral signups"],
        "Make the product faster": ["p95 page load (ms)", "Crash-free sessions %", "Slow queries fixed"],
        "Build a great team": ["Engineers hired", "Onboarding survey score", "Internal talks given"],
        "Improve support": ["Median first reply (min)", "Tickets closed", "Help articles published"]}


@family("okr_progress_rollup", CAT, "information synthesis and summarization", ["read", "compute", "aggregate",
        "classify", "write"], ["yaml", "csv", "json"], "Roll up OKR key results (including lower-is-better ones) into "
        "progress, objective scores and status bands.", difficulty=3)
def okr_progress_rollup(ctx: Ctx) -> None:
    rng = ctx.rng
    objs = rng.sample(list(_OBJ), rng.randint(2, 4))
    bands = {"on_track": rng.choice([0.7, 0.75]), "at_risk": rng.choice([0.4, 0.5])}
    doc, rows, obj_scores = [], [], {}
    k = 0
    for o in objs:
        krs, progs = [], []
        for name in _OBJ[o]:
            k += 1
            kid = f"KR{k}"
            lower = name.startswith(("p95", "Median"))
            if lower:
                start = rng.randint(300, 2000)
                target = int(start * rng.choice([0.5, 0.6, 0.75]))
                current = rng.randint(target - (start - target) // 3, start)
                prog = (start - current) / (start - target)
            else:
                start = rng.randint(0, 40)
                target = start + rng.randint(10, 120)
                current = rng.randint(start, target + (target - start) // 4)
                prog = (current - start) / (target - start)
            prog = round(min(1.0, max(0.0, prog)), 3)
            progs.append(prog)
            krs.append({"id": kid, "name": name, "start": start, "target": target, "current": current,
                        "direction": "decrease" if lower else "increase"})
            rows.append({"id": kid, "objective": o, "progress": prog})
        score = round(sum(progs) / len(progs), 3)
        obj_scores[o] = {"score": score, "status": "on_track" if score >= bands["on_track"] else
                         "at_risk" if score >= bands["at_risk"] else "off_track"}
        doc.append({"objective": o, "owner": people(rng, 1)[0], "key_results": krs})
    ctx.yaml("okrs/q3_okrs.yaml", {"quarter": "2026-Q3", "objectives": doc})
    ctx.file("okrs/scoring.md", "# OKR scoring\n\n- progress = (current - start) / (target - start) for increase KRs,"
                                "\n  (start - current) / (start - target) for decrease KRs; clamp to [0, 1]; round to "
                                f"3 decimals.\n- objective score = mean of its KR progress (3 decimals).\n- status: "
                                f"on_track >= {bands['on_track']}, at_risk >= {bands['at_risk']}, otherwise off_track.\n")
    ctx.distractors(2)
    ctx.ask(
        "Please roll up our quarter's OKRs in okrs/q3_okrs.yaml using the method in okrs/scoring.md. Write "
        "output/kr_progress.csv with columns id,objective,progress (one row per key result, in file order) and "
        "output/okr_summary.json mapping each objective to {score, status}.")
    ctx.expect("rows", rows)
    ctx.expect("objs", obj_scores)
    kp, osm = "output/kr_progress.csv", "output/okr_summary.json"
    ctx.check("kr_progress", f"rows_score(C({kp!r}), E['rows'], 'id', ['progress'], tol=0.0015)")
    ctx.check("kr_objectives", f"rows_score(C({kp!r}), E['rows'], 'id', ['objective'])")
    ctx.check("objective_scores", f"frac(sum(1 for o, v in E['objs'].items() if close(J({osm!r})[o]['score'], "
                                  "v['score'], 0.0015)), len(E['objs']))")
    ctx.check("statuses", f"frac(sum(1 for o, v in E['objs'].items() if norm(J({osm!r})[o]['status']) == v['status']), "
                          f"len(E['objs'])) * float(len(J({osm!r})) == len(E['objs']))")
    ctx.read("okrs/scoring.md")
    ctx.read("okrs/q3_okrs.yaml")
    ctx.write(kp, csv_text(["id", "objective", "progress"], [[r["id"], r["objective"], r["progress"]] for r in rows]))
    ctx.write(osm, json_text(obj_scores))
    ctx.verify_json(osm)


# ----------------------------------------------------------------------------------------------
_MODULES = ["Foundations", "Data types", "Control flow", "Functions", "Testing", "Files & IO", "Packaging",
            "Databases", "Web APIs", "Concurrency", "Profiling", "Deployment", "Security basics", "Capstone"]


@family("curriculum_week_plan", CAT, "curriculum and content design", ["read", "compute", "sort", "write"],
        ["yaml", "json", "md"], "Order course modules by prerequisites (smallest id first) and pack them into weeks "
        "under an hours cap.", difficulty=4)
def curriculum_week_plan(ctx: Ctx) -> None:
    rng = ctx.rng
    n = rng.randint(7, 10)
    cap = rng.choice([6, 8, 10])
    titles = rng.sample(_MODULES, n)
    ids = [f"M{i + 1:02d}" for i in range(n)]
    _, deps0 = _dag(rng, n, 2)
    deps = {ids[i]: [ids[int(d[1:]) - 1] for d in deps0[f"T{i + 1:02d}"]] for i in range(n)}
    hours = {m: rng.randint(2, cap) for m in ids}
    # Kahn with smallest available id
    indeg = {m: len(deps[m]) for m in ids}
    heap = [m for m in ids if indeg[m] == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        m = heapq.heappop(heap)
        order.append(m)
        for s in ids:
            if m in deps[s]:
                indeg[s] -= 1
                if indeg[s] == 0:
                    heapq.heappush(heap, s)
    weeks: list[dict] = []
    for m in order:
        if not weeks or weeks[-1]["hours"] + hours[m] > cap:
            weeks.append({"week": len(weeks) + 1, "modules": [], "hours": 0})
        weeks[-1]["modules"].append(m)
        weeks[-1]["hours"] += hours[m]
    mods = [{"id": m, "title": titles[i], "hours": hours[m], "prerequisites": deps[m]} for i, m in enumerate(ids)]
    rng.shuffle(mods)
    ctx.yaml("course/modules.yaml", {"course": "Practical Python", "modules": mods})
    ctx.yaml("course/constraints.yaml", {"max_hours_per_week": cap, "ordering": "prerequisites first; among modules "
                                         "that are ready, the smallest id first", "packing": "fill the current week in "
                                         "order; when the next module does not fit, start a new week"})
    ctx.distractors(2)
    ctx.ask(
        "I'm planning a course: modules are in course/modules.yaml and the rules in course/constraints.yaml. Please "
        "produce output/curriculum.json with total_weeks and weeks (a list of {week, modules (ids in order), hours}), "
        "and output/curriculum.md with a markdown table week | module | title | hours (one row per module).")
    ctx.expect("order", order)
    ctx.expect("weeks", weeks)
    ctx.expect("hours", hours)
    cj, cm = "output/curriculum.json", "output/curriculum.md"
    ctx.check("module_order", f"list_equal([m for w in J({cj!r})['weeks'] for m in w['modules']], E['order'])")
    ctx.check("week_assignment", f"[w['modules'] for w in J({cj!r})['weeks']] == [w['modules'] for w in E['weeks']]")
    ctx.check("week_hours", f"[to_num(w['hours']) for w in J({cj!r})['weeks']] == [float(w['hours']) for w in E['weeks']]")
    ctx.check("total_weeks", f"to_num(J({cj!r})['total_weeks']) == len(E['weeks'])")
    ctx.check("md_table", f"[(r.get('module'), to_num(r.get('week')), to_num(r.get('hours'))) for r in md_table(T({cm!r}))]"
                          " == [(m, float(w['week']), float(E['hours'][m])) for w in E['weeks'] for m in w['modules']]")
    ctx.read("course/constraints.yaml")
    ctx.read("course/modules.yaml")
    ctx.write(cj, json_text({"total_weeks": len(weeks), "weeks": weeks}))
    tmap = {m["id"]: m["title"] for m in mods}
    ctx.write(cm, "# Curriculum\n\n" + md_table_text(["week", "module", "title", "hours"],
                                                     [[w["week"], m, tmap[m], hours[m]] for w in weeks for m in w["modules"]]))
    ctx.verify_json(cj)


# ----------------------------------------------------------------------------------------------
_NOTES = ["Onboarding", "Expense Policy", "VPN Setup", "Release Process", "Incident Runbook", "Brand Guide",
          "Hiring Loop", "Travel Booking", "Code Review", "Backup Strategy", "Office Wifi", "Holiday Calendar"]
_TAGS = ["hr", "it", "finance", "eng", "ops", "design", "howto"]


@family("kb_link_index", CAT, "memory and knowledge organization", ["read", "extract", "verify", "write"],
        ["md", "json", "csv", "txt"], "Index a folder of wiki notes: tags from front matter, broken [[wiki links]], "
        "orphan notes.", difficulty=3)
def kb_link_index(ctx: Ctx) -> None:
    rng = ctx.rng
    titles = rng.sample(_NOTES, rng.randint(6, 9))
    fname = {t: "kb/" + t.lower().replace(" ", "-") + ".md" for t in titles}
    ghosts = rng.sample([n for n in _NOTES if n not in titles], 2)
    tags, links, line_no = {}, {}, {}
    for t in titles:
        tags[t] = sorted(rng.sample(_TAGS, rng.randint(0, 3)))
        links[t] = sorted(set(rng.sample([x for x in titles if x != t], rng.randint(0, 2)) +
                              (rng.sample(ghosts, 1) if rng.random() < 0.35 else [])))
    if not any(g in links[t] for t in titles for g in ghosts):
        links[titles[0]] = sorted(set(links[titles[0]] + [ghosts[0]]))
    for t in titles:
        fm = "---\ntitle: " + t + "\ntags: [" + ", ".join(tags[t]) + "]\n---\n"
        body = [f"# {t}", ""] + [rng.choice(["Owner: ops team.", "Last reviewed in spring.", "Ask in #help.",
                                             "Draft, needs review."]) for _ in range(rng.randint(1, 3))] + [""]
        ls = list(links[t])
        rng.shuffle(ls)
        for l in ls:
            body.append(f"- related: [[{l}]]")
            line_no[(fname[t], l)] = 4 + len(body)
        ctx.file(fname[t], fm + "\n".join(body) + "\n")
    index: dict[str, list[str]] = {}
    for t in titles:
        for g in tags[t]:
            index.setdefault(g, []).append(fname[t])
    index = {k: sorted(v) for k, v in sorted(index.items())}
    broken = sorted((fname[t], l) for t in titles for l in links[t] if l not in titles)
    inbound = {t: 0 for t in titles}
    for t in titles:
        for l in links[t]:
            if l in inbound:
                inbound[l] += 1
    orphans = sorted(fname[t] for t in titles if inbound[t] == 0)
    ctx.file("kb/.templates/note.md", "---\ntitle: \ntags: []\n---\n# Title\n")
    ctx.distractors(2)
    ctx.ask(
        "Please tidy up my wiki in kb/ (ignore kb/.templates/). Write output/tag_index.json mapping every tag (from the "
        "front matter) to the sorted list of note paths that carry it; output/broken_links.csv with columns note,link,line "
        "for every [[link]] whose target title has no note (line = 1-based line number in the file; sorted by note, "
        "then link); and output/orphans.txt with "
        "the paths of notes that no other note links to, one per line, sorted.")
    ctx.expect("index", index)
    ctx.expect("broken", [{"note": a, "link": b, "key": f"{a}|{b}", "line": line_no[(a, b)]} for a, b in broken])
    ctx.expect("orphans", orphans)
    ti, bl, orp = "output/tag_index.json", "output/broken_links.csv", "output/orphans.txt"
    ctx.check("tag_index", f"frac(sum(1 for k, v in E['index'].items() if list_equal(J({ti!r}).get(k), v)), "
                           f"len(E['index'])) * float(len(J({ti!r})) == len(E['index']))")
    ctx.check("broken_links", f"set_score([r.get('note', '') + '|' + r.get('link', '') for r in C({bl!r})], "
                              "[b['key'] for b in E['broken']])")
    ctx.check("orphans", f"set_score([l.strip() for l in T({orp!r}).splitlines() if l.strip()], E['orphans']) "
                         "if E['orphans'] else float(" + f"T({orp!r}).strip() == '' and exists(ws, {ti!r}))")
    ctx.check("link_lines", f"rows_score([dict(r, key=r.get('note', '') + '|' + r.get('link', '')) for r in "
                            f"C({bl!r})], E['broken'], 'key', ['line'])")
    ctx.check("sorted_outputs", f"list_equal([r.get('note', '') + '|' + r.get('link', '') for r in C({bl!r})], "
                                "[b['key'] for b in E['broken']])")
    for t in titles:
        ctx.read(fname[t])
    ctx.exec("grep -n -o '\\[\\[[^]]*\\]\\]' -r kb/")
    ctx.write(ti, json_text(index))
    ctx.write(bl, csv_text(["note", "link", "line"], [[a, b, line_no[(a, b)]] for a, b in broken]))
    ctx.write(orp, "".join(o + "\n" for o in orphans))
    ctx.outputs.remove(bl)
    ctx.outputs.insert(0, bl)


# ----------------------------------------------------------------------------------------------
@family("trip_option_planner", CAT, "task planning and decomposition", ["read", "filter", "compute", "rank",
        "write"], ["json", "yaml", "csv"], "Choose the cheapest flight+hotel combination that meets constraints; list "
        "runner-up combinations.", difficulty=3)
def trip_option_planner(ctx: Ctx) -> None:
    rng = ctx.rng
    city = rng.choice(["Lisbon", "Osaka", "Toronto", "Berlin", "Nairobi"])
    nights = rng.randint(3, 6)
    cons: dict[str, Any] = {"nights": nights, "max_stops": rng.choice([0, 1]), "min_hotel_rating": rng.choice([3.5, 4.0]),
            "max_km_from_center": rng.choice([3, 5]), "budget_usd": 0}
    flights: list[dict[str, Any]] = [{"id": f"FL{i + 1}", "to": city if rng.random() > 0.1 else "Elsewhere", "price_usd": rng.randint(280, 900),
                "stops": rng.choice([0, 0, 1, 2])} for i in range(rng.randint(5, 7))]
    hotels: list[dict[str, Any]] = [{"id": f"H{i + 1}", "city": city, "nightly_usd": rng.randint(70, 260),
               "rating": rng.choice([3.0, 3.5, 3.8, 4.0, 4.2, 4.5, 4.8]),
               "km_from_center": round(rng.uniform(0.3, 8.0), 1)} for i in range(rng.randint(5, 7))]
    ok_f = [f for f in flights if f["to"] == city and f["stops"] <= cons["max_stops"]]
    ok_h = [h for h in hotels if h["rating"] >= cons["min_hotel_rating"] and h["km_from_center"] <= cons["max_km_from_center"]]
    if not ok_f:
        flights[0].update(to=city, stops=0)
        ok_f = [flights[0]]
    if not ok_h:
        hotels[0].update(rating=4.5, km_from_center=1.0)
        ok_h = [hotels[0]]
    combos = sorted((f["price_usd"] + h["nightly_usd"] * nights, f["id"], h["id"]) for f in ok_f for h in ok_h)
    cons["budget_usd"] = combos[0][0] + rng.randint(0, 300)
    within = [c for c in combos if c[0] <= cons["budget_usd"]]
    best = within[0]
    ctx.json("trip/options.json", {"flights": flights, "hotels": hotels, "currency": "USD"})
    ctx.yaml("trip/constraints.yaml", {"destination": city, **cons})
    ctx.distractors(2)
    ctx.ask(
        f"Help me pick my {city} trip. Options are in trip/options.json and my constraints in trip/constraints.yaml "
        "(flight must go to the destination with at most max_stops stops; hotel rating >= min_hotel_rating and "
        "within max_km_from_center; total = flight price + nightly rate x nights; total must fit the budget). Write "
        "output/itinerary.json with flight, hotel, total_usd and remaining_budget_usd for the cheapest valid combo "
        "(ties by flight id then hotel id), and output/alternatives.csv with columns flight,hotel,total_usd listing "
        "every valid combo within budget, cheapest first.")
    ctx.expect("best", {"flight": best[1], "hotel": best[2], "total": best[0], "remaining": cons["budget_usd"] - best[0]})
    ctx.expect("alts", [{"key": f"{c[1]}|{c[2]}", "total_usd": c[0]} for c in within])
    it, al = "output/itinerary.json", "output/alternatives.csv"
    ctx.check("choice", f"J({it!r})['flight'] == E['best']['flight'] and J({it!r})['hotel'] == E['best']['hotel']")
    ctx.check("total", f"close(J({it!r})['total_usd'], E['best']['total'], 0.01) and "
                       f"close(J({it!r})['remaining_budget_usd'], E['best']['remaining'], 0.01)")
    ctx.check("alternatives", f"rows_score([dict(r, key=r.get('flight', '') + '|' + r.get('hotel', '')) for r in "
                              f"C({al!r})], E['alts'], 'key', ['total_usd'])")
    ctx.check("alt_order", f"list_equal([r.get('flight', '') + '|' + r.get('hotel', '') for r in C({al!r})], "
                           "[a['key'] for a in E['alts']])")
    ctx.read("trip/constraints.yaml")
    ctx.read("trip/options.json")
    ctx.write(it, json_text({"flight": best[1], "hotel": best[2], "total_usd": best[0],
                             "remaining_budget_usd": cons["budget_usd"] - best[0]}))
    ctx.write(al, csv_text(["flight", "hotel", "total_usd"], [[c[1], c[2], c[0]] for c in within]))
    ctx.verify_json(it)


# ----------------------------------------------------------------------------------------------
_CARDS = ["mitochondria", "photosynthesis", "osmosis", "enzyme", "ribosome", "allele", "mitosis", "meiosis",
          "homeostasis", "catalyst", "isotope", "covalent bond", "entropy", "vector", "integral"]


@family("spaced_review_schedule", CAT, "memory and knowledge organization", ["read", "compute", "transform",
        "aggregate", "write"], ["csv", "md", "json"], "Apply a spaced-repetition rule (again/good/easy) to flashcard "
        "reviews; schedule next due dates and a per-day load.", difficulty=3)
def spaced_review_schedule(ctx: Ctx) -> None:
    rng = ctx.rng
    ease_bonus = rng.choice([1.3, 1.5])
    good_mult = rng.choice([2.0, 2.5])
    cards = rng.sample(_CARDS, rng.randint(8, 12))
    exp: list[dict[str, Any]]
    rows, exp = [], []
    day = dt.date(2026, rng.randint(1, 12), rng.randint(1, 28))
    for c in cards:
        interval = rng.choice([1, 2, 3, 4, 6, 10])
        res = rng.choice(["again", "good", "good", "easy"])
        rows.append([c, day.strftime(rng.choice(["%Y-%m-%d", "%Y/%m/%d"])), interval, dirty_text(rng, res, 0.3)])
        if res == "again":
            new = 1
        elif res == "good":
            new = int(round(interval * good_mult))
        else:
            new = int(round(interval * good_mult * ease_bonus))
        exp.append({"card": c, "new_interval": new, "next_due": (day + dt.timedelta(days=new)).isoformat()})
    ctx.csv("study/reviews.csv", ["card", "reviewed_on", "interval_days", "result"], rows)
    ctx.file("study/rules.md", f"# Review rule\n\n- again: new interval = 1 day\n- good: new interval = interval x "
                               f"{good_mult}\n- easy: new interval = interval x {good_mult} x {ease_bonus}\n\nRound the "
                               "new interval to the nearest whole day (halves round to even, as Python's round does). "
                               "next_due = reviewed_on + new interval.\n")
    ctx.distractors(2)
    load: dict[str, int] = {}
    for e in exp:
        load[e["next_due"]] = load.get(e["next_due"], 0) + 1
    load = dict(sorted(load.items()))
    ctx.ask(
        "I logged today's flashcard reviews in study/reviews.csv (results are messy text). Apply the rule in "
        "study/rules.md and write output/next_reviews.csv with columns card,new_interval,next_due (ISO dates), sorted "
        "by next_due then card, and output/daily_load.json mapping each due date to how many cards are due then.")
    exp.sort(key=lambda e: (e["next_due"], e["card"]))
    ctx.expect("rows", exp)
    ctx.expect("load", load)
    nr, dl = "output/next_reviews.csv", "output/daily_load.json"
    ctx.check("intervals", f"rows_score(C({nr!r}), E['rows'], 'card', ['new_interval'])")
    ctx.check("due_dates", f"rows_score(C({nr!r}), E['rows'], 'card', ['next_due'])")
    ctx.check("order", f"list_equal([r.get('card') for r in C({nr!r})], [e['card'] for e in E['rows']])")
    ctx.check("daily_load", f"{{k: to_num(v) for k, v in J({dl!r}).items()}} == {{k: float(v) for k, v in E['load'].items()}}")
    ctx.read("study/rules.md")
    ctx.read("study/reviews.csv")
    ctx.write(nr, csv_text(["card", "new_interval", "next_due"], [[e["card"], e["new_interval"], e["next_due"]] for e in exp]))
    ctx.write(dl, json_text(load))
    ctx.verify_json(dl)


__all__ = ["CAT"]
