"""Running a notebook's .py as a script with parameters from the command line or a file."""

import json
import os
import subprocess
import sys

import pytest

from nbutils.train.launch import build_script, parse_overrides

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
    out = subprocess.run([sys.executable, "-m", "nbutils.train.launch", str(notebook), "--steps", "3"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "(3, 0.5, 'embedded', False)"


def test_decide_follows_gpu_count_memory_plan_and_launcher():
    from nbutils.train.launch import decide

    assert decide(gpu_count=0, env={}).mode == "single"
    assert decide(gpu_count=1, env={}).processes == 1
    two = decide(gpu_count=2, memory_plan={"fits": True}, env={})  # Kaggle 2xT4, model fits one T4
    assert (two.mode, two.processes, two.world_size) == ("ddp", 2, 2)
    assert decide(gpu_count=2, memory_plan={"fits": False}, env={}).mode == "split"  # only both T4s together hold it
    assert decide("ddp", gpu_count=2, memory_plan={"fits": False}, env={}).mode == "ddp"  # asked for: the user knows
    assert decide("split", gpu_count=2, env={}).processes == 1
    assert decide(num_processes=1, gpu_count=2, env={}).mode == "single"
    cpu = decide(num_processes=2, gpu_count=0, env={})  # what the tests run: two CPU processes over gloo
    assert (cpu.mode, cpu.processes) == ("ddp", 2) and "gloo" in cpu.why
    ranked = decide(gpu_count=2, env={"WORLD_SIZE": "2"})  # already one rank of `accelerate launch`: start nothing
    assert (ranked.mode, ranked.processes, ranked.world_size) == ("ddp", 1, 2)
    with pytest.raises(ValueError, match="multi_gpu='both' is not one of"):
        decide("both")
    with pytest.raises(ValueError, match="num_processes=4 but 2 GPU"):
        decide(num_processes=4, gpu_count=2, env={})


def test_run_in_processes_runs_here_for_one_and_refuses_a_touched_kernel(monkeypatch):
    from nbutils.train.launch import run_in_processes

    assert run_in_processes(lambda: 42, 1) == 42
    monkeypatch.setitem(sys.modules, "bitsandbytes", object())  # as `from transformers import Trainer` does
    with pytest.raises(RuntimeError, match="bitsandbytes was imported in an earlier cell.*Restart the kernel"):
        run_in_processes(lambda: 42, 2)


def test_processes_started_from_the_notebook_count_the_time_budget_from_the_kernel_start(monkeypatch):
    import accelerate

    from nbutils.runtime.environment import process_start_time
    from nbutils.train.launch import run_in_processes

    seen = {}

    def fake_launcher(fn, num_processes, use_port):  # stands in for the fork: what would the processes inherit?
        seen.update(start=os.environ.get("NBUTILS_SESSION_START"), n=num_processes, port=int(use_port))

    monkeypatch.setattr(accelerate, "notebook_launcher", fake_launcher)
    monkeypatch.setenv("KAGGLE_KERNEL_RUN_TYPE", "Batch")
    monkeypatch.delenv("NBUTILS_SESSION_START", raising=False)
    monkeypatch.delitem(sys.modules, "bitsandbytes", raising=False)  # imported by earlier tests in this process
    assert run_in_processes(lambda: None, 2) is None
    assert float(seen["start"]) == pytest.approx(process_start_time(), abs=1) and seen["n"] == 2 and seen["port"] > 0
    assert "NBUTILS_SESSION_START" not in os.environ  # restored: a later run in this kernel decides afresh


def test_a_cuda_failure_in_the_forked_processes_becomes_a_clear_error(monkeypatch):
    import accelerate

    from nbutils.train.launch import run_in_processes

    def failing_launcher(fn, num_processes, use_port):  # what elastic_launch raises, in short (seen on an H100)
        raise RuntimeError("each_process FAILED ... torch.AcceleratorError: CUDA error: initialization error")

    monkeypatch.setattr(accelerate, "notebook_launcher", failing_launcher)
    monkeypatch.delitem(sys.modules, "bitsandbytes", raising=False)
    with pytest.raises(RuntimeError, match="CUDA was touched in this kernel before the launch.*Restart the kernel"):
        run_in_processes(lambda: None, 2)
    monkeypatch.setattr(accelerate, "notebook_launcher", lambda *a, **k: (_ for _ in ()).throw(ValueError("other")))
    with pytest.raises(ValueError, match="other"):  # anything else goes through unchanged
        run_in_processes(lambda: None, 2)


def test_the_one_parser_of_the_parameters_cell_names_every_assignment():
    """The harness passes a parameter only if this parser names it, so computed and annotated defaults count too."""
    from nbutils.train.launch import parameter_defaults

    source = "a = 1\nb: int = 2\nc = os.environ.get('X', '')\nd = e = 'x'\nfor i in range(2):\n    f = i\n"
    assert parameter_defaults(source) == {"a": 1, "b": 2, "c": None, "d": "x", "e": "x"}
