# args: [Tt]oday is (\d{4}-\d\d-\d\d)\..*?and (\d+) days from today
import os
import csv
import sys
import datetime as dt

today = dt.date.fromisoformat(sys.argv[1])
last = today + dt.timedelta(days=int(sys.argv[2]))


def day(s):
    """The date of s, written as ISO, dd/mm/yyyy or 'Mon DD, YYYY'."""
    for f in ("%Y-%m-%d", "%d/%m/%Y", "%b %d, %Y"):
        try:
            return dt.datetime.strptime(s.strip(), f).date()
        except ValueError:
            pass


out = []
for r in csv.DictReader(open("input/renewals.csv")):
    d = day(r["renews_on"])
    if today <= d <= last:
        rem = max(today, d - dt.timedelta(days=int(r["notice_days"])))
        out.append((rem.isoformat(), r["service"].strip(), d.isoformat()))
os.makedirs("output", exist_ok=True)
with open("output/reminders.csv", "w") as f:
    f.write("service,renews_on,remind_on\n")
    for rem, s, d in sorted(out):
        f.write(f"{s},{d},{rem}\n")
