"""Running a notebook's .py as a script with parameters from the command line or a file."""

import json
import subprocess
import sys

import pytest

from nbutils.launch import build_script, parse_overrides

NB = """# %% [markdown]
# # Title

# %% tags=["parameters"]
steps = 10
rate = 0.5
name = "embedded"
smoke = False

# %%
!pip list
result = (steps, rate, name, smoke)
print(repr(result))
"""


@pytest.fixture()
def notebook(tmp_path):
    path = tmp_path / "nb.py"
    path.write_text(NB)
    return path


def test_overrides_are_injected_after_parameters_and_cast(notebook):
    script, values = build_script(notebook, {"steps": "20", "rate": "1e-3", "smoke": "true", "name": "gpt2"})
    assert values == {"steps": 20, "rate": 1e-3, "smoke": True, "name": "gpt2"}
    assert script.index("steps = 20") > script.index("steps = 10")
    assert "!pip" not in script  # shell magics are notebook-only


def test_unknown_parameter_is_an_error(notebook):
    with pytest.raises(ValueError, match="unknown parameter.*stepz"):
        build_script(notebook, {"stepz": "1"})


def test_config_file_then_command_line(tmp_path):
    cfg = tmp_path / "run.json"
    cfg.write_text(json.dumps({"steps": 5, "rate": 0.1}))
    assert parse_overrides(["--steps", "7", "--config", str(cfg)]) == {"steps": "7", "rate": 0.1}


def test_runs_as_a_script(notebook):
    out = subprocess.run([sys.executable, "-m", "nbutils.launch", str(notebook), "--steps", "3"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "(3, 0.5, 'embedded', False)"
