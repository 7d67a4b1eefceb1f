import os
import ast
import json

t = '''import inventory


def test_add_stock():
    s = {"A": 1}
    assert inventory.add_stock(s, "A", 2) == {"A": 3}
    assert s == {"A": 1}
    for bad in (0, -1):
        try:
            inventory.add_stock({}, "A", bad)
        except ValueError:
            continue
        raise AssertionError("expected ValueError")


def test_remove_stock():
    assert inventory.remove_stock({"A": 3}, "A", 1) == {"A": 2}
    assert inventory.remove_stock({"A": 3}, "A", 3) == {}
    try:
        inventory.remove_stock({"A": 1}, "A", 2)
    except inventory.OutOfStock:
        return
    raise AssertionError("expected OutOfStock")


def test_reorder_list():
    assert inventory.reorder_list({"A": 5, "B": 6, "C": 1}, {"C": 1}) == ["A", "C"]


def test_stock_value():
    assert inventory.stock_value({"A": 3, "B": 1}, {"A": 0.35, "B": 2.0}) == 3.05
    assert inventory.stock_value({"Z": 4}, {}) == 0
'''
os.makedirs("tests", exist_ok=True)
open("tests/test_inventory.py", "w").write(t)
n = sum(isinstance(x, ast.FunctionDef) and x.name.startswith("test") for x in ast.parse(t).body)
m = ast.parse(open("inventory.py").read()).body
pub = [x.name for x in m if isinstance(x, ast.FunctionDef) and not x.name.startswith("_")]
os.makedirs("output", exist_ok=True)
json.dump({"test_functions": n, "functions_covered": sorted(f for f in pub if f in t)},
          open("output/test_summary.json", "w"), indent=2)
