from __future__ import annotations

from pathlib import Path

from clawgym.synth.skills import (
    DEFAULT_OPENCLAW_DIR,
    SHIPPED_SKILLS,
    default_skill_dirs,
    load_skills,
    offline_skills,
    parse_skill_md,
)


def _write(root: Path, name: str, text: str) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "SKILL.md").write_text(text)
    return d / "SKILL.md"


def test_shipped_skills_parse_and_annotate():
    skills, errors = load_skills([SHIPPED_SKILLS])
    assert not errors
    by = {s.name: s for s in skills}
    assert len(by) >= 6
    csv = by["csv-report"]
    assert csv.description.startswith("Summarise CSV") and "# CSV report" in csv.body
    assert {"read", "compute", "write"} <= set(csv.operations) and "csv" in csv.file_types
    assert "log" in by["log-triage"].file_types and "filter" in by["log-triage"].operations
    ok, excluded = offline_skills(skills)
    reasons = dict(excluded)
    assert "network" in reasons["shipped:weather-lookup"]
    assert "account" in reasons["shipped:slack-notify"]
    assert "csv-report" in {s.name for s in ok} and len(ok) >= 5


def test_malformed_skill_reports_file_and_field_and_rest_parse(tmp_path):
    good = _write(tmp_path, "good", "---\nname: good\ndescription: Read CSV files and write JSON.\n---\nBody\n")
    no_name = _write(tmp_path, "no-name", "---\ndescription: x\n---\nbody\n")
    bad_yaml = _write(tmp_path, "bad-yaml", "---\nname: [unclosed\n---\nbody\n")
    no_fm = _write(tmp_path, "no-fm", "# just markdown\n")
    no_desc = _write(tmp_path, "no-desc", "---\nname: nd\n---\n")
    skills, errors = load_skills([tmp_path])
    assert [s.name for s in skills] == ["good"] and skills[0].path == str(good)
    msgs = {e.file: (e.field, str(e)) for e in errors}
    assert msgs[str(no_name)][0] == "name"
    assert msgs[str(bad_yaml)][0] == "front matter" and "invalid YAML" in msgs[str(bad_yaml)][1]
    assert msgs[str(no_fm)][0] == "front matter"
    assert msgs[str(no_desc)][0] == "description"
    assert all(e.file in str(e) for e in errors)


def test_openclaw_dir_setting_and_gating(tmp_path, monkeypatch):
    root = tmp_path / "oc" / "node_modules" / "openclaw" / "skills"
    _write(root, "notes", "---\nname: notes\ndescription: Organise markdown notes into an index.\n---\n")
    _write(root, "mac-only",
           '---\nname: mac-only\ndescription: Control an app.\nmetadata: {"openclaw": {"os": ["darwin"]}}\n---\n')
    _write(root, "needs-key",
           '---\nname: needs-key\ndescription: Query a thing.\n'
           'metadata: {"openclaw": {"requires": {"env": ["X_TOKEN"]}}}\n---\n')
    monkeypatch.setenv("CLAWGYM_OPENCLAW_DIR", "/nonexistent")  # library code never reads the environment
    assert default_skill_dirs()[1] == Path(DEFAULT_OPENCLAW_DIR) / "node_modules" / "openclaw" / "skills"
    skills, errors = load_skills(default_skill_dirs(tmp_path / "oc", [tmp_path / "missing"]))
    assert not errors
    oc = {s.name: s for s in skills if s.source == "openclaw"}
    assert set(oc) == {"notes", "mac-only", "needs-key"}
    assert oc["notes"].usable_offline and "md" in oc["notes"].file_types
    assert oc["mac-only"].needs_gui and oc["needs-key"].needs_account
    assert any(s.source == "shipped" for s in skills)


def test_parse_single_file_json_metadata(tmp_path):
    p = _write(tmp_path, "x", '---\nname: x\ndescription: Run shell scripts.\n'
                              'metadata: {"openclaw": {"requires": {"bins": ["curl"]}}}\n---\nuse it\n')
    s = parse_skill_md(p)
    assert s.requires == {"bins": ["curl"]} and s.needs_network and "run" in s.operations
