"""productivity_collaboration families: notes, records, schedules, reminders, contacts, documents."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from clawgym.synth.families.base import (
    Ctx,
    csv_text,
    dirty_text,
    family,
    first_names,
    json_text,
    md_table_text,
    people,
)

CAT = "productivity_collaboration"
TASKS = ["send the revised deck", "book the venue", "update the budget sheet", "email the vendor",
         "draft the press note", "review the contract", "collect survey results", "fix the onboarding doc",
         "schedule the retro", "share the Q3 numbers", "order new badges", "clean up the shared drive",
         "prepare the demo", "confirm the catering", "archive old tickets"]


def _d(s: str) -> dt.date:
    return dt.date.fromisoformat(s)


# ------------------------------------------------------------------------------------------------
@family("action_item_tracker", CAT, "meeting notes and summaries", ["read", "extract", "sort", "write"],
        ["md", "csv"], "Extract action items written in several styles from meeting notes into a sorted tracker.")
def action_item_tracker(ctx: Ctx) -> None:
    """Action items in several styles from meeting notes -> sorted output/action_items.csv."""
    rng = ctx.rng
    team = people(rng, 4)
    first = {p.split()[0]: p for p in team}
    day0 = dt.date(2026, rng.randint(1, 11), rng.randint(1, 20))
    items = []
    for t in rng.sample(TASKS, rng.randint(5, 7)):
        who = rng.choice(list(first))
        due = day0 + dt.timedelta(days=rng.randint(1, 20))
        items.append({"owner": who, "task": t, "due": due.isoformat()})
    lines = [f"# Weekly sync - {day0.isoformat()}", "", f"Attendees: {', '.join(team)}", "", "## Discussion", ""]
    notes = ["Budget is on track.", "Hiring freeze until next quarter.", "Office move slipped a week.",
             "Customer NPS went up.", "We agreed to pause the newsletter."]
    for it in items:
        lines.append(f"- {rng.choice(notes)}")
        d = _d(it["due"])
        style = rng.randrange(3)
        if style == 0:
            lines.append(f"- ACTION: {it['owner']} to {it['task']} by {d.isoformat()}")
        elif style == 1:
            lines.append(f"- [ ] @{it['owner']}: {it['task']} (due {d.strftime('%b')} {d.day})")
        else:
            lines.append(f"- TODO({it['owner']}) {it['task']} -- due {d.strftime('%d/%m/%Y')}")
    lines += ["", "## Parking lot", "", "- Someone should look at the printer (no owner yet)."]
    ctx.file("notes/meeting_notes.md", "\n".join(lines) + "\n")
    ctx.distractors(2)
    items.sort(key=lambda r: (r["due"], r["owner"], r["task"]))
    ctx.ask(f"Go through notes/meeting_notes.md (meeting held {day0.isoformat()}) and pull out every action item with "
            "an owner. They are written in three styles (ACTION:, - [ ] @name:, TODO(name)). Write "
            "output/action_items.csv with columns owner,task,due: owner = first name, task = the action text "
            "exactly as written, due = ISO date (all dates are in the meeting's year; dd/mm/yyyy is day first). "
            "Sort by due date, then owner.")
    ctx.expect("items", items)
    ctx.check("items", "rows_score(C('output/action_items.csv'), E['items'], 'task', ['owner', 'due'])")
    ctx.check("order", "[norm(r['task']) for r in C('output/action_items.csv')] == [norm(i['task']) for i in E['items']]", support=True)
    ctx.check("no_orphans", "len(C('output/action_items.csv')) == len(E['items']) and "
                            "not any('printer' in norm(r.get('task')) for r in C('output/action_items.csv'))", support=True)
    ctx.read("notes/meeting_notes.md")
    ctx.exec("grep -nE 'ACTION:|\\[ \\] @|TODO\\(' notes/meeting_notes.md")
    ctx.write("output/action_items.csv", csv_text(["owner", "task", "due"],
                                                  [[i["owner"], i["task"], i["due"]] for i in items]))
    ctx.exec("cat output/action_items.csv")


# ------------------------------------------------------------------------------------------------
@family("calendar_conflicts", CAT, "meeting coordination and scheduling", ["read", "compare", "compute", "write"],
        ["json"], "Find double-bookings per person across a team calendar export.", 3)
def calendar_conflicts(ctx: Ctx) -> None:
    """Double-bookings per person in a team calendar -> output/conflicts.json and a count."""
    rng = ctx.rng
    team = people(rng, 4)
    day = dt.date(2026, rng.randint(1, 12), rng.randint(1, 25))
    titles = ["Standup", "Design review", "1:1", "Vendor call", "Planning", "Lunch & learn", "Interview",
              "Budget sync", "Demo", "Retro"]
    events: list[dict[str, Any]] = []
    for i, title in enumerate(rng.sample(titles, rng.randint(7, 9))):
        start = rng.randint(9 * 4, 16 * 4) * 15
        length = rng.choice([30, 45, 60, 90])
        st = dt.datetime.combine(day, dt.time()) + dt.timedelta(minutes=start)
        events.append({"id": f"ev{i + 1:02d}", "title": title, "start": st.strftime("%Y-%m-%dT%H:%M"),
                       "end": (st + dt.timedelta(minutes=length)).strftime("%Y-%m-%dT%H:%M"),
                       "attendees": sorted(rng.sample(team, rng.randint(1, 3)))})
    conflicts = []
    for a in range(len(events)):
        for b in range(a + 1, len(events)):
            ea, eb = events[a], events[b]
            if ea["start"] < eb["end"] and eb["start"] < ea["end"]:  # touching end==start is fine
                for p in sorted(set(ea["attendees"]) & set(eb["attendees"])):
                    conflicts.append({"person": p, "event_a": ea["id"], "event_b": eb["id"]})
    conflicts.sort(key=lambda c: (c["person"], c["event_a"], c["event_b"]))
    ctx.json("input/calendar.json", {"timezone": "Europe/Lisbon", "events": rng.sample(events, len(events))})
    ctx.distractors(2)
    ctx.ask("Check input/calendar.json for double-bookings: two events overlap when one starts before the other "
            "ends (back-to-back is fine). Write output/conflicts.json: a JSON list of {person, event_a, event_b} for "
            "every person who attends both overlapping events, event_a < event_b by id, sorted by person then ids. "
            "Write [] if there are none. Also write output/conflict_count.txt containing just the number of entries.")
    ctx.expect("c", conflicts)
    ctx.check("conflicts", "set_score(['|'.join([c['person'], c['event_a'], c['event_b']]) for c in J('output/conflicts.json')],"
                           " ['|'.join([c['person'], c['event_a'], c['event_b']]) for c in E['c']]) if E['c'] else "
                           "(J('output/conflicts.json') == [])")
    ctx.check("sorted", "J('output/conflicts.json') == E['c']")
    ctx.check("count", "T('output/conflict_count.txt') is not None and "
                       "T('output/conflict_count.txt').strip() == str(len(E['c'])) and isinstance(J('output/conflicts.json'), list)")
    ctx.read("input/calendar.json")
    ctx.exec("python3 -c \"import json; e=json.load(open('input/calendar.json'))['events']; "
             "print(sorted((x['start'], x['end'], x['id']) for x in e))\"")
    ctx.write("output/conflicts.json", json_text(conflicts))
    ctx.write("output/conflict_count.txt", f"{len(conflicts)}\n")
    ctx.verify_json("output/conflicts.json")

    def swap_person(ov):
        c = __import__("json").loads(ov["output/conflicts.json"])
        if not c:
            c = [{"person": team[0], "event_a": "ev01", "event_b": "ev02"}]
        else:
            c[0]["person"] = [p for p in team if p != c[0]["person"]][0]
        return {**ov, "output/conflicts.json": json_text(c).encode()}
    ctx.mutation("wrong_person", swap_person)


# ------------------------------------------------------------------------------------------------
@family("contact_merge", CAT, "table and record handling", ["read", "transform", "dedupe", "write"],
        ["csv"], "Merge two contact exports with different headers, dedupe by normalised email.")
def contact_merge(ctx: Ctx) -> None:
    """Two contact exports with different headers, deduped by email -> output/contacts.csv."""
    rng = ctx.rng
    names = people(rng, rng.randint(8, 11))
    recs = {}
    for n in names:
        email = f"{n.split()[0].lower()}.{n.split()[1].lower()}@{rng.choice(['acme.io', 'mail.com', 'corp.net'])}"
        phone = "".join(str(rng.randint(0, 9)) for _ in range(9))
        recs[email] = {"name": n, "phone": phone}
    emails = sorted(recs)
    crm_only = set(rng.sample(emails, 3))
    phone_only = set(rng.sample([e for e in emails if e not in crm_only], 3))
    crm_rows, ph_rows = [], []

    def fmt_phone(p):
        return rng.choice([p, f"+1 {p[:3]}-{p[3:6]}-{p[6:]}", f"({p[:3]}) {p[3:6]} {p[6:]}"])
    for e in emails:
        r = recs[e]
        if e not in phone_only:
            crm_rows.append([r["name"], dirty_text(rng, e.upper() if rng.random() < .3 else e), ""])
            if rng.random() < 0.5 or e in crm_only:
                crm_rows[-1][2] = fmt_phone(r["phone"])
        if e not in crm_only:
            nick = r["name"].split()[0] if rng.random() < .5 else r["name"]
            ph_rows.append([nick, fmt_phone(r["phone"]), f" {e} " if rng.random() < .3 else e])
    rng.shuffle(crm_rows)
    rng.shuffle(ph_rows)
    merged = []
    for e in emails:
        r = recs[e]
        p = r["phone"]
        merged.append({"email": e, "name": r["name"], "phone": ("1" + p) if False else p})
    ctx.csv("input/crm_export.csv", ["Name", "E-mail", "Phone"], crm_rows)
    ctx.csv("input/phone_contacts.csv", ["full_name", "mobile", "email"], ph_rows)
    ctx.distractors(2)
    ctx.ask("Merge input/crm_export.csv and input/phone_contacts.csv into one list. The same person can appear in "
            "both; match on email (case and surrounding spaces don't matter). Prefer the CRM name when both exist; "
            "the phone comes from whichever file has one, written as the last 9 digits only. Write "
            "output/contacts.csv with columns email,name,phone: lower-case emails, one row per person, sorted by email.")
    ctx.expect("m", merged)
    # the asked columns first: a copied input (phone_contacts.csv has an email column) earns nothing
    ctx.check("people", "set(C('output/contacts.csv')[0]) >= {'email', 'name', 'phone'} and "
                        "set_score([r['email'] for r in C('output/contacts.csv')], [m['email'] for m in E['m']])")
    ctx.check("names", "rows_score(C('output/contacts.csv'), E['m'], 'email', ['name'])")
    ctx.check("phones", "rows_score(C('output/contacts.csv'), E['m'], 'email', ['phone'])")
    ctx.check("sorted_unique", "[r['email'] for r in C('output/contacts.csv')] == [m['email'] for m in E['m']]")
    ctx.read("input/crm_export.csv")
    ctx.read("input/phone_contacts.csv")
    ctx.exec("python3 - <<'EOF'\nimport csv\nfor f in ['input/crm_export.csv','input/phone_contacts.csv']:\n"
             "    print(f, len(list(csv.reader(open(f))))-1)\nEOF")
    ctx.write("output/contacts.csv", csv_text(["email", "name", "phone"],
                                              [[m["email"], m["name"], m["phone"]] for m in merged]))
    ctx.exec("sort -c -t, -k1,1 <(tail -n +2 output/contacts.csv) && echo sorted")


# ------------------------------------------------------------------------------------------------
@family("meeting_slot_finder", CAT, "meeting coordination and scheduling", ["read", "compute", "write"],
        ["yaml", "json", "md"], "Find the earliest common free slot across several busy calendars and draft the invite.", 3)
def meeting_slot_finder(ctx: Ctx) -> None:
    """Earliest common free slot across busy calendars -> output/slot.json and output/invite.md."""
    rng = ctx.rng
    team = people(rng, rng.randint(3, 4))
    dur = rng.choice([30, 45, 60])
    start_h, end_h = 9 * 60, 17 * 60
    busy = {}
    for p in team:
        blocks = []
        for _ in range(rng.randint(2, 4)):
            s = rng.randint(start_h // 15, (end_h - 30) // 15) * 15
            blocks.append((s, min(end_h, s + rng.choice([30, 60, 90, 120]))))
        busy[p] = sorted(blocks)
    day = dt.date(2026, rng.randint(1, 12), rng.randint(1, 25))
    lunch = (12 * 60, 13 * 60)
    allb = sorted([b for bl in busy.values() for b in bl] + [lunch])
    slot = None
    t = start_h
    while t + dur <= end_h:
        if all(not (t < e and s < t + dur) for s, e in allb):
            slot = t
            break
        t += 15
    hm = lambda m: f"{m // 60:02d}:{m % 60:02d}"  # noqa: E731
    if slot is None:  # make the day solvable: free the last hour
        for p in team:
            busy[p] = [(s, min(e, end_h - 60)) for s, e in busy[p] if s < end_h - 60]
        return meeting_slot_finder_retry(ctx, team, busy, day, dur, lunch)
    _emit_slot(ctx, team, busy, day, dur, lunch, slot, hm)


def meeting_slot_finder_retry(ctx, team, busy, day, dur, lunch):
    """meeting_slot_finder on a day made solvable: the slot is the first 15-minute step from 09:00 clear of
    every busy block and lunch."""
    hm = lambda m: f"{m // 60:02d}:{m % 60:02d}"  # noqa: E731
    allb = sorted([b for bl in busy.values() for b in bl] + [lunch])
    t = 9 * 60
    while any(t < e and s < t + dur for s, e in allb):
        t += 15
    _emit_slot(ctx, team, busy, day, dur, lunch, t, hm)


def _emit_slot(ctx, team, busy, day, dur, lunch, slot, hm):
    ctx.yaml("input/busy.yaml", {"date": day.isoformat(), "working_hours": "09:00-17:00",
                                 "busy": {p: [f"{hm(s)}-{hm(e)}" for s, e in bl] for p, bl in busy.items()}})
    ctx.file("input/team_rules.md", "# Team rules\n\n- Nobody meets during lunch (12:00-13:00).\n"
                                    "- Meetings start on a quarter hour.\n- Stay inside working hours.\n")
    ctx.distractors(2)
    res = {"date": day.isoformat(), "start": hm(slot), "end": hm(slot + dur), "attendees": sorted(team)}
    ctx.ask(f"Find the earliest {dur}-minute slot on {day.isoformat()} when everyone in input/busy.yaml is free, "
            "respecting input/team_rules.md. Write output/slot.json with keys date, start, end (HH:MM) and attendees "
            "(sorted names), and draft the invitation in output/invite.md mentioning the date, the start-end time and "
            "every attendee by name.")
    ctx.expect("s", res)
    ctx.check("start", "J('output/slot.json')['start'] == E['s']['start'] and J('output/slot.json')['date'] == E['s']['date']")
    ctx.check("end", "J('output/slot.json')['end'] == E['s']['end']")
    ctx.check("attendees", "list_equal(J('output/slot.json')['attendees'], E['s']['attendees'])")
    ctx.check("invite", "contains_all(T('output/invite.md'), [E['s']['start'], E['s']['end']] + E['s']['attendees'])"
                        " * (1.0 if (E['s']['date'] in (T('output/invite.md') or '')) else 0.0)")
    ctx.rubric_rule("invite_tone", "output/invite.md", {"0": "missing or rude", "0.5": "usable but bare",
                                                       "1": "clear, polite, states purpose, time and attendees"})
    ctx.read("input/busy.yaml")
    ctx.read("input/team_rules.md")
    ctx.write("output/slot.json", json_text(res))
    ctx.write("output/invite.md", f"# Invitation: team sync\n\nHi {', '.join(team)},\n\nLet's meet on {res['date']} "
                                  f"from {res['start']} to {res['end']} - the first slot where everyone is free.\n\n"
                                  "Thanks!\n")
    ctx.verify_json("output/slot.json")


# ------------------------------------------------------------------------------------------------
@family("task_board_report", CAT, "team collaboration and synchronization", ["read", "filter", "aggregate", "write"],
        ["jsonl", "md"], "Summarise a task-board export per owner and list overdue work as of a date.")
def task_board_report(ctx: Ctx) -> None:
    """Task-board export summarised per owner with overdue work as of a date -> output/status.md."""
    rng = ctx.rng
    team = first_names(rng, 4)
    as_of = dt.date(2026, rng.randint(2, 11), rng.randint(1, 28))
    statuses = ["todo", "in_progress", "done", "blocked"]
    recs = []
    for i in range(rng.randint(12, 18)):
        st = rng.choice(statuses)
        due = as_of + dt.timedelta(days=rng.randint(-10, 12))
        recs.append({"id": f"T-{101 + i}", "title": rng.choice(TASKS), "owner": rng.choice(team),
                     "status": st, "due": due.isoformat()})
    lines = []
    for r in recs:
        shown = dict(r, status=rng.choice([r["status"], r["status"].upper(), r["status"].replace("_", " ")]))
        lines.append(json_text(shown).replace("\n", " ").strip())
    ctx.file("input/board_export.jsonl", "\n".join(lines) + "\n")
    ctx.distractors(2)
    table = []
    for o in sorted({r["owner"] for r in recs}):  # owners the export shows (one who owns nothing is nowhere to read)
        mine = [r for r in recs if r["owner"] == o]
        table.append({"owner": o, "open": sum(r["status"] != "done" for r in mine),
                      "done": sum(r["status"] == "done" for r in mine),
                      "overdue": sum(r["status"] != "done" and r["due"] < as_of.isoformat() for r in mine)})
    overdue = sorted([r for r in recs if r["status"] != "done" and r["due"] < as_of.isoformat()],
                     key=lambda r: (r["due"], r["id"]))
    ctx.ask(f"Make a status report from input/board_export.jsonl as of {as_of.isoformat()} (status spelling is "
            "inconsistent: 'IN PROGRESS' = in_progress etc.). Write output/status.md with a markdown table with "
            "columns owner, open, done, overdue (one row per owner, A-Z; open = not done; overdue = not done and due "
            "before the as-of date), then a section '## Overdue' listing each overdue task as '- <id> <title> "
            "(<owner>)', oldest due date first.")
    ctx.expect("table", table)
    ctx.expect("overdue", [r["id"] for r in overdue])
    ctx.check("counts", "rows_score(md_table(T('output/status.md')), E['table'], 'owner', ['open', 'done'])")
    ctx.check("overdue_counts", "rows_score(md_table(T('output/status.md')), E['table'], 'owner', ['overdue'])")
    ctx.check("overdue_list", "[b.split()[0] for b in md_bullets(T('output/status.md').split('## Overdue', 1)[1])] == E['overdue']")
    ctx.read("input/board_export.jsonl")
    ctx.exec("python3 -c \"import json; [print(json.loads(l)['status']) for l in open('input/board_export.jsonl')]\" | sort | uniq -c")
    md = f"# Task board status ({as_of.isoformat()})\n\n" + md_table_text(
        ["owner", "open", "done", "overdue"], [[t["owner"], t["open"], t["done"], t["overdue"]] for t in table])
    md += "\n## Overdue\n\n" + ("".join(f"- {r['id']} {r['title']} ({r['owner']})\n" for r in overdue) or "None.\n")
    ctx.write("output/status.md", md)


# ------------------------------------------------------------------------------------------------
@family("renewal_reminders", CAT, "notifications, reminders, and follow-up", ["read", "transform", "filter", "write"],
        ["csv"], "Normalise renewal dates in mixed formats and schedule reminders inside a window.")
def renewal_reminders(ctx: Ctx) -> None:
    """Renewal dates in mixed formats, reminders inside a window -> output/reminders.csv."""
    rng = ctx.rng
    as_of = dt.date(2026, rng.randint(1, 10), rng.randint(1, 28))
    window = rng.choice([45, 60, 90])
    services = rng.sample(["Domain name", "Office lease", "Car insurance", "Cloud backup", "Gym", "Antivirus",
                           "Magazine", "Parking permit", "Software licence", "Passport", "Phone plan",
                           "Home insurance", "Music streaming"], rng.randint(8, 10))
    rows, exp = [], []
    for s in services:
        d = as_of + dt.timedelta(days=rng.randint(-20, 160))
        notice = rng.choice([7, 14, 30])
        fmt = rng.choice(["%Y-%m-%d", "%d/%m/%Y", "%b %d, %Y"])
        rows.append([s, d.strftime(fmt), notice])
        if as_of <= d <= as_of + dt.timedelta(days=window):
            rem = max(as_of, d - dt.timedelta(days=notice))
            exp.append({"service": s, "renews_on": d.isoformat(), "remind_on": rem.isoformat()})
    exp.sort(key=lambda r: (r["remind_on"], r["service"]))
    if not exp:
        d = as_of + dt.timedelta(days=10)
        rows.append(["Library card", d.strftime("%d/%m/%Y"), 7])
        exp.append({"service": "Library card", "renews_on": d.isoformat(), "remind_on": (d - dt.timedelta(days=7)).isoformat()})
    ctx.csv("input/renewals.csv", ["service", "renews_on", "notice_days"], rows)
    ctx.distractors(2)
    ctx.ask(f"Today is {as_of.isoformat()}. From input/renewals.csv (dates are ISO, dd/mm/yyyy or 'Mon DD, YYYY'), "
            f"list the renewals due between today and {window} days from today (inclusive). For each, remind_on = "
            "renews_on minus notice_days, but never earlier than today. Write output/reminders.csv with columns "
            "service,renews_on,remind_on (ISO dates), sorted by remind_on then service.")
    ctx.expect("r", exp)
    # the asked columns first: input/renewals.csv copied over (every service listed) earns nothing
    ctx.check("selection", "set(C('output/reminders.csv')[0]) >= {'service', 'renews_on', 'remind_on'} and "
                           "set_score([r['service'] for r in C('output/reminders.csv')], [r['service'] for r in E['r']])")
    ctx.check("dates", "rows_score(C('output/reminders.csv'), E['r'], 'service', ['renews_on', 'remind_on'])")
    ctx.check("order", "[norm(r['service']) for r in C('output/reminders.csv')] == [norm(r['service']) for r in E['r']]", support=True)
    ctx.read("input/renewals.csv")
    ctx.exec("date -d '" + as_of.isoformat() + f" + {window} days' +%F")
    ctx.write("output/reminders.csv", csv_text(["service", "renews_on", "remind_on"],
                                               [[r["service"], r["renews_on"], r["remind_on"]] for r in exp]))
    ctx.exec("cat output/reminders.csv")


# ------------------------------------------------------------------------------------------------
@family("glossary_rename", CAT, "document writing and editing", ["read", "edit", "count", "write"],
        ["md", "csv", "json"], "Apply a renaming glossary to a handbook (whole words only) and report the changes.")
def glossary_rename(ctx: Ctx) -> None:
    """Glossary renames applied to a handbook (whole words) -> output/handbook.md and output/changes.json."""
    rng = ctx.rng
    pairs = rng.sample([("TaskPad", "Planboard"), ("QuickSync", "FlowSync"), ("HelpHub", "SupportCenter"),
                        ("DataVault", "Archive"), ("TeamTalk", "Huddle"), ("BudgetBot", "SpendWise"),
                        ("DocuFlow", "PaperTrail")], 3)
    sent = ["Open {a} from the sidebar to start.", "Every team uses {a} daily.", "{a} replaces the old intranet.",
            "Ask IT if {a} does not load.", "Version 2 of {a} ships in spring.", "Export reports from {a} weekly.",
            "Do not confuse {a} with {a}Legacy, which stays as is."]
    paras = [f"# Employee handbook v{rng.randint(2, 9)}", ""]
    for _ in range(rng.randint(6, 9)):
        a, _b = rng.choice(pairs)
        paras.append(rng.choice(sent).format(a=a))
    text = "\n".join(paras) + "\n"
    new = text
    counts = {}
    for a, b in pairs:
        counts[a] = len(re.findall(rf"\b{a}\b", new))
        new = re.sub(rf"\b{a}\b", b, new)
    ctx.file("docs/handbook.md", text)
    ctx.csv("docs/glossary.csv", ["old_name", "new_name"], [list(p) for p in pairs])
    ctx.distractors(2)
    ctx.ask("We renamed some products (docs/glossary.csv). Produce output/handbook.md: docs/handbook.md with every "
            "old name replaced by the new one, whole words only (e.g. TaskPadLegacy stays unchanged), nothing else "
            "changed. Leave docs/handbook.md as it is. Also write output/changes.json mapping each old name to the "
            "number of replacements made.")
    ctx.expect("text", new)
    ctx.expect("counts", counts)
    ctx.check("renamed", "T('output/handbook.md') is not None and T('output/handbook.md').strip() == E['text'].strip()")
    ctx.check("legacy_kept", "len(T('output/handbook.md') or '') > 40 and all(w in T('output/handbook.md') for w in "
                             "_re.findall(r'\\b\\w+Legacy\\b', E['text'])) and not _re.search("
                             "r'\\b(' + '|'.join(E['counts']) + r')\\b', T('output/handbook.md'))", support=True)
    ctx.check("counts", "rows_score([{'k': k, 'v': v} for k, v in J('output/changes.json').items()], "
                        "[{'k': k, 'v': v} for k, v in E['counts'].items()], 'k', ['v'])")
    ctx.output("output/handbook.md")
    ctx.keep_inputs("docs/handbook.md")
    ctx.read("docs/glossary.csv")
    ctx.read("docs/handbook.md")
    sed = "; ".join(f"s/\\b{a}\\b/{b}/g" for a, b in pairs)
    ctx.exec(f"mkdir -p output && sed -E '{sed}' docs/handbook.md > output/handbook.md")
    ctx.write("output/changes.json", json_text(counts))
    ctx.exec("diff docs/handbook.md output/handbook.md; true")
