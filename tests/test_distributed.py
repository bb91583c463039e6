"""Data-parallel training through accelerate (gloo on the CPU): same result as one process, one writer."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = str(ROOT / "notebooks" / "02_train_qlora.py")


def _run(cmd, work: Path, **params):
    args = [a for k, v in params.items() for a in (f"--{k}", str(v))]
    env = {**os.environ, "NBUTILS_WORKING_ROOT": str(work), "NBUTILS_INPUT_ROOT": str(work / "input"),
           "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([*cmd, "-m", "nbutils.launch", NOTEBOOK, *args], env=env, capture_output=True, text=True,
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
