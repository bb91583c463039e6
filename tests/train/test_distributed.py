"""Data-parallel training through accelerate (gloo on the CPU): same result as one process, one writer."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Every test here starts several processes (and one the notebook): the full gate only, not `make test-fast`.
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = str(ROOT / "notebooks" / "02_train_qlora.py")


def _run(cmd, work: Path, **params):
    args = [a for k, v in params.items() for a in (f"--{k}", str(v))]
    env = {**os.environ, "NBUTILS_WORKING_ROOT": str(work), "NBUTILS_INPUT_ROOT": str(work / "input"),
           "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([*cmd, "-m", "nbutils.train.launch", NOTEBOOK, *args], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _summary(out: Path) -> dict:
    return json.loads((out / "training_summary.json").read_text())


@pytest.fixture(scope="module")
def runs(prepared_data, tmp_path_factory):
    work = tmp_path_factory.mktemp("ddp")
    common = dict(data_dir=prepared_data, max_steps=40, eval_steps=20, save_steps=20, probe_prompts=0)
    _run([sys.executable], work, output_dir=work / "one", per_device_batch_size=16, **common)
    two = _run([sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"], work,
               output_dir=work / "two", per_device_batch_size=8, **common)
    return work, two


def test_two_processes_match_one_at_the_same_global_batch(runs):
    work, _ = runs
    one, two = _summary(work / "one"), _summary(work / "two")
    assert one["global_step"] == two["global_step"] == 40
    assert two["world_size"] == 2 and len(set(two["replica_checksums"])) == 1  # LoRA weights identical on both ranks
    assert two["eval_loss"] == pytest.approx(one["eval_loss"], rel=0.5, abs=0.01)


def test_only_the_main_process_writes(runs):
    work, proc = runs
    out = work / "two"
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("checkpoint")) == ["checkpoint"]
    assert len(list(out.glob("training_summary*.json"))) == 1
    assert proc.stdout.count("step 40 (max_steps)") == 1  # logs printed once, not once per rank


def test_resume_under_two_processes(runs, prepared_data):
    work, _ = runs
    _run([sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"], work,
         output_dir=work / "two", per_device_batch_size=8, data_dir=prepared_data, max_steps=60, eval_steps=20,
         save_steps=20, probe_prompts=0)
    summary = _summary(work / "two")
    assert summary["resumed_from_step"] == 40 and summary["global_step"] == 60


# ---- from inside the notebook: accelerate's notebook launcher, under the Kaggle batch simulation ----------------

def _in_notebook(prepared_data, out: Path, **params):
    """02 run by the harness (a Kaggle background run) with num_processes=2: the notebook forks its own processes."""
    import nbformat

    from nbutils.harness import runner

    params = {"data_dir": str(prepared_data), "num_processes": 2, "per_device_batch_size": 8, "probe_prompts": 0,
              "eval_steps": 20, "save_steps": 20, **params}
    [result] = runner.run([ROOT / "notebooks" / "02_train_qlora.ipynb"], out, params, internet=False, time_budget=600)
    assert result.status == "passed", [str(p) for p in result.problems]
    executed = nbformat.read(out / "02_train_qlora.ipynb", as_version=4)
    text = "".join(o.get("text", "") for c in executed.cells if c.cell_type == "code" for o in c.get("outputs", []))
    return out / "sandbox" / "02_train_qlora" / "working" / "train_qlora", text


def test_notebook_launcher_trains_two_processes_like_one(runs, prepared_data, tmp_path):
    work, _ = runs
    out, log = _in_notebook(prepared_data, tmp_path, max_steps=40)
    two, one = _summary(out), _summary(work / "one")
    assert two["global_step"] == one["global_step"] == 40 and two["world_size"] == 2
    assert len(set(two["replica_checksums"])) == 1
    assert two["eval_loss"] == pytest.approx(one["eval_loss"], rel=0.5, abs=0.01)
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("checkpoint")) == ["checkpoint"]
    assert two["checkpoint_complete"]
    assert log.count("[model] LoRA: ") == 1 and log.count("[train] step 40/40") == 1  # one log, not one per process
    assert "ddp: 2 CPU processes (gloo) through the notebook launcher" in log  # the plan's mode row


def test_notebook_launcher_processes_agree_on_the_time_budget(prepared_data, tmp_path, monkeypatch):
    import time

    # The session started 59.8 minutes ago; the forked processes must count from there, not from their own start.
    monkeypatch.setenv("NBUTILS_SESSION_START", str(time.time() - 59.8 * 60))
    out, _ = _in_notebook(prepared_data, tmp_path, max_steps=1000, time_budget_min=60.0)
    summary = _summary(out)
    assert summary["stopped_reason"] == "time_budget" and 0 < summary["global_step"] < 1000
    assert len(set(summary["replica_checksums"])) == 1 and summary["checkpoint_complete"]
