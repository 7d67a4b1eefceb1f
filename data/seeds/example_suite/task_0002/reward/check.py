import json
import os
import sys

ORIGINAL = {"name": "orders-api", "workers": 4, "log_level": "info",
            "database_url": "postgres://db.staging.internal:5432/orders"}


def grade(transcript, workspace_path):
    scores = {"config_valid_json": 0.0, "port_fixed": 0.0, "other_keys_unchanged": 0.0, "note_mentions_port": 0.0}
    path = os.path.join(workspace_path, "output", "service.json")
    data = None
    if os.path.isfile(path):
        try:
            data = json.load(open(path, encoding="utf-8"))
        except Exception:
            data = None
    if isinstance(data, dict):
        scores["config_valid_json"] = 1.0
        if data.get("port") == 8080 and not isinstance(data.get("port"), bool):
            scores["port_fixed"] = 1.0
        if {k: v for k, v in data.items() if k != "port"} == ORIGINAL:
            scores["other_keys_unchanged"] = 1.0
    npath = os.path.join(workspace_path, "output", "fix_note.md")
    if os.path.isfile(npath):
        note = open(npath, encoding="utf-8", errors="ignore").read().lower()
        if "port" in note and "8080" in note:
            scores["note_mentions_port"] = 1.0
    return scores


if __name__ == "__main__":
    print(json.dumps(grade([], sys.argv[1] if len(sys.argv) > 1 else ".")))
