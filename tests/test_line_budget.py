"""tools/line_budget.py finds long modules and long functions (nested ones too) and names them."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("line_budget", ROOT / "tools" / "line_budget.py")
line_budget = importlib.util.module_from_spec(spec)
spec.loader.exec_module(line_budget)


def _function(name: str, body_lines: int, indent: str = "") -> str:
    return f"{indent}def {name}():\n" + f"{indent}    x = 1\n" * (body_lines - 1) + f"{indent}    return x\n"


def test_long_function_and_module_are_named(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(_function("ok", 59) + _function("too_long", 60) + "y = 0\n" * 300)
    found = line_budget.offenders(path)
    assert len(found) == 2
    assert found[0].endswith(f"module has {len(path.read_text().splitlines())} lines (max 400): split it by job")
    assert ":61: function too_long has 61 lines (max 60)" in found[1]


def test_nested_function_counts_on_its_own_and_in_its_parent(tmp_path):
    path = tmp_path / "n.py"
    path.write_text("def outer():\n" + _function("inner", 61, "    ") + "    return inner\n")
    assert [x.split(": ")[1].split(" has")[0] for x in line_budget.offenders(path)] == ["function outer",
                                                                                         "function inner"]


def test_within_budget_is_quiet(tmp_path):
    path = tmp_path / "fine.py"
    path.write_text(_function("f", 59) + "z = 2\n" * 100)
    assert line_budget.offenders(path) == [] and line_budget.main([str(path)]) == 0
