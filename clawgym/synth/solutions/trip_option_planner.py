import os
import json
import yaml

o = json.load(open("trip/options.json"))
c = yaml.safe_load(open("trip/constraints.yaml"))
fl = [f for f in o["flights"] if f["to"] == c["destination"] and f["stops"] <= c["max_stops"]]
ho = [h for h in o["hotels"] if h["rating"] >= c["min_hotel_rating"] and h["km_from_center"] <= c["max_km_from_center"]]
combos = sorted((f["price_usd"] + h["nightly_usd"] * c["nights"], f["id"], h["id"]) for f in fl for h in ho)
ok = [x for x in combos if x[0] <= c["budget_usd"]]
t, f, h = ok[0]
os.makedirs("output", exist_ok=True)
it = {"flight": f, "hotel": h, "total_usd": t, "remaining_budget_usd": c["budget_usd"] - t}
json.dump(it, open("output/itinerary.json", "w"), indent=2)
with open("output/alternatives.csv", "w") as out:
    out.write("flight,hotel,total_usd\n")
    for t, f, h in ok:
        out.write(f"{f},{h},{t}\n")
