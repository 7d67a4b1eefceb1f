from __future__ import annotations

from clawgym.synth.families import all_families
from clawgym.synth.taxonomy import ATOMIC_OPERATIONS, OFFLINE_EXCLUDED, SUBCATEGORIES, check_family, taxonomy_table
from clawgym.tasks.model import CATEGORIES

MINE = ("productivity", "systems", "analysis")


def test_six_categories_with_subcategories():
    assert tuple(SUBCATEGORIES) == CATEGORIES
    assert all(len(v) >= 4 for v in SUBCATEGORIES.values())
    assert len(taxonomy_table()) == sum(len(v) for v in SUBCATEGORIES.values())
    assert {"read", "write", "edit", "compute", "filter"} <= set(ATOMIC_OPERATIONS)
    assert "web_search" in OFFLINE_EXCLUDED


def test_part_a_families_fit_the_taxonomy():
    fams = [f for f in all_families() if f.build.__module__.rsplit(".", 1)[-1] in MINE]
    assert len(fams) >= 21
    for f in fams:
        assert check_family(f.category, f.subcategory, f.operations) == [], f.name


def test_check_family_reports_problems():
    errs = check_family("analysis_reasoning", "cooking", ["read", "teleport", "web_search"])
    assert (any("cooking" in e for e in errs) and any("teleport" in e for e in errs)
            and any("network" in e for e in errs))
    assert check_family("nope", "x", []) == ["unknown category 'nope'"]


def test_every_registered_family_fits_the_taxonomy():
    bad = {f.name: check_family(f.category, f.subcategory, f.operations) for f in all_families()}
    assert not {k: v for k, v in bad.items() if v}
    cats = {f.category for f in all_families()}
    assert cats <= set(CATEGORIES)
