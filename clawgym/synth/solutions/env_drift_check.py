import os
import json


def env(p):
    """The variables of the .env file `p`."""
    d = {}
    for line in open(p):
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            k, v = line.split("=", 1)
            d[k.strip()] = v.strip()
    return d


s, p = env("deploy/.env.staging"), env("deploy/.env.production")
res = {"missing_in_production": sorted(k for k in s if k not in p),
       "missing_in_staging": sorted(k for k in p if k not in s),
       "different": sorted(k for k in s if k in p and s[k] != p[k])}
os.makedirs("output", exist_ok=True)
json.dump(res, open("output/env_diff.json", "w"), indent=2)
