"""make gpu-proof: without CUDA it says what it needs and exits 0; its rows and result file, on the CPU."""

import json

import pytest

from bench import gpu_proof


def test_without_cuda_it_says_what_it_needs_and_exits_0(capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_proof.main() == 0
    assert "needs a CUDA GPU" in capsys.readouterr().out


def test_rows_and_the_result_file(tmp_path):
    sweep = [{"batch": 1, "plan_gb": 2.0, "peak_gb": 1.9, "fits": True},
             {"batch": 2, "plan_gb": 3.0, "peak_gb": None, "fits": False}]
    timing = {"total_steps": 60, "predicted_s": 50.0, "actual_s": 52.0, "error": -0.038, "calibration_share": 0.01}
    rows = gpu_proof.rows_for("llama", sweep, timing, 15.0)
    assert rows[0]["value"] == "2.00 / 1.90" and rows[1]["value"] == "3.00 / out of memory"
    assert rows[2]["value"] == 1 and "15 GB" in rows[2]["metric"] and "-3.8%" in rows[3]["value"]
    path = gpu_proof.save(rows, gpu_proof.CPU_SETUP, 12.3, tmp_path)
    saved = json.loads(path.read_text())["gpu_proof"]  # bench.report's shape: {bench: {machine, command, rows}}
    assert path.name.startswith("gpu-") and saved["command"] == "make gpu-proof" and saved["rows"] == rows


def test_stages_run_in_the_order_given(tmp_path):
    from dataclasses import replace

    def order(stages):
        setup = replace(gpu_proof.GPU_SETUP, stages=stages)
        return list(gpu_proof._stages("m", tmp_path, tmp_path, tmp_path, setup, first=True))

    assert order(()) == list(gpu_proof.STAGES)  # all of them: memory first, tokens/s last
    assert order(("tokens/s", "time plan")) == ["tokens/s", "time plan"]  # a partial run: what it names first


def test_a_gpu_run_spawns_each_measurement_the_cpu_run_forks_them_from_a_preloaded_server():
    assert gpu_proof._context(True).get_start_method() == "spawn"  # a process's CUDA context, cap and peak are its own
    assert gpu_proof._context(False).get_start_method() == "forkserver"


@pytest.mark.integration
def test_the_cpu_setup_builds_runs_and_records(tmp_path):
    """The same code as on a GPU, CUDA-only settings off: twin of Llama-3.2-1B with its real tokenizer, the memory
    sweep, the calibrated run (needs llama-cpp-python's sdist, cached after the first download)."""
    rows = gpu_proof.run(gpu_proof.CPU_SETUP)
    metrics = [r["metric"] for r in rows]
    assert any("largest batch" in m for m in metrics) and any("time plan / actual" in m for m in metrics)
    assert gpu_proof.save(rows, gpu_proof.CPU_SETUP, 1.0, tmp_path).exists()
