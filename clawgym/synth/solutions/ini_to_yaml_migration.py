import os
import configparser
import yaml

ini = configparser.ConfigParser()
ini.read("config/app.ini")
ren = {"db_host": "host", "db_port": "port", "ttl_seconds": "ttl"}
drop = ["db_pool", "legacy_mode"]
out = {"version": 2}
for s in ini.sections():
    out[s] = {}
    for k, v in ini[s].items():
        if k in drop:
            continue
        if v.lower() in ("yes", "on", "true"):
            v = True
        elif v.lower() in ("no", "off", "false"):
            v = False
        elif v.isdigit():
            v = int(v)
        out[s][ren.get(k, k)] = v
out["logging"]["level"] = out["logging"]["level"].lower()
os.makedirs("output", exist_ok=True)
yaml.safe_dump(out, open("output/app.yaml", "w"), sort_keys=False)
