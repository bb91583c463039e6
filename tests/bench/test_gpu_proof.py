"""make gpu-proof: without CUDA it says what it needs and exits 0; its rows and result file, on the CPU."""

import json

import pytest

from bench import gpu_proof, gpu_spawn


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


def test_memory_stages_run_first_together_then_each_models_timed_stages_in_the_order_given(tmp_path):
    from dataclasses import replace

    built = {"qwen": (tmp_path, tmp_path), "llama": (tmp_path, tmp_path)}

    def order(stages):
        setup = replace(gpu_proof.GPU_SETUP, stages=stages)
        return [(name, stage) for name, stage, _ in gpu_proof._stages(built, tmp_path, setup)]

    assert order(()) == [("every model", "memory, preference memory"), ("qwen", "time plan"), ("qwen", "tokens/s"),
                         ("llama", "time plan")]  # tokens/s for the first model only (throughput_models)
    assert order(("tokens/s", "time plan")) == [("qwen", "tokens/s"), ("qwen", "time plan"), ("llama", "time plan")]
    assert order(("time plan", "memory")) == [("every model", "memory"), ("qwen", "time plan"), ("llama", "time plan")]


def test_a_failed_measurement_becomes_its_row_and_the_others_are_kept(monkeypatch):
    from dataclasses import replace

    def fake(tasks):  # the pool's results: batch 2 of qwen's sweep raised, llama's ran out of memory at 2
        out = []
        for _fn, (model, batch, _setup) in tasks:
            fits = not (model == "llama" and batch == 2)
            out.append(gpu_spawn.Failed("ValueError: bad") if (model, batch) == ("qwen", 2)
                       else {"batch": batch, "plan_gb": 1.0 * batch, "peak_gb": 0.9 * batch if fits else None, "fits": fits})
        return out

    monkeypatch.setattr(gpu_spawn, "tasks", fake)
    setup = replace(gpu_proof.GPU_SETUP, sweep=(1, 2, 4), preference=())
    rows = gpu_proof._memory_together({"qwen": ("qwen", None), "llama": ("llama", None)}, setup, ("memory",))
    assert rows[0] == {"bench": "gpu_proof", "metric": "qwen: memory", "value": "failed", "note": "ValueError: bad"}
    assert [r["value"] for r in rows[1:]] == ["1.00 / 0.90", "2.00 / out of memory", 1]  # up to the first full batch


def test_each_methods_rows_end_at_its_own_first_batch_out_of_memory():
    rows = [{"method": "dpo", "batch": 1, "fits": True}, {"method": "dpo", "batch": 4, "fits": False},
            {"method": "dpo", "batch": 16, "fits": False}, {"method": "grpo", "batch": 8, "fits": True},
            {"method": "grpo", "batch": 32, "fits": False}]
    assert [(r["method"], r["batch"]) for r in gpu_proof._until_full(rows)] == [
        ("dpo", 1), ("dpo", 4), ("grpo", 8), ("grpo", 32)]


@pytest.mark.integration
def test_the_cpu_setup_builds_runs_and_records(tmp_path):
    """The same code as on a GPU, CUDA-only settings off: twin of Llama-3.2-1B with its real tokenizer, the memory
    sweep, the calibrated run (needs llama-cpp-python's sdist, cached after the first download)."""
    rows = gpu_proof.run(gpu_proof.CPU_SETUP)
    metrics = [r["metric"] for r in rows]
    assert any("largest batch" in m for m in metrics) and any("time plan / actual" in m for m in metrics)
    assert gpu_proof.save(rows, gpu_proof.CPU_SETUP, 1.0, tmp_path).exists()


def test_the_whole_gpu_run_is_arranged_to_end_within_10_minutes():
    """make gpu-proof in one call: its stages planned from what each piece took on an H200 (gpu_proof.COSTS) sum to
    under 9 minutes; a stage not started by setup.minutes is recorded as skipped, not run past the 10."""
    planned = gpu_proof.planned_seconds(gpu_proof.GPU_SETUP)
    assert set(planned) == {"build", "memory", "time plan", "tokens/s"}
    assert sum(planned.values()) <= 9 * 60, planned
    assert gpu_proof.GPU_SETUP.minutes * 60 < 10 * 60 and gpu_proof.GPU_SETUP.steps >= 80  # 02 plans from 80 steps
    more = replace_setup(throughput_rows=256, sweep=tuple(range(1, 20)))
    assert sum(gpu_proof.planned_seconds(more).values()) > 9 * 60  # the arithmetic sees a setup that would not fit


def replace_setup(**changes):
    from dataclasses import replace

    return replace(gpu_proof.GPU_SETUP, **changes)


def test_the_sweep_records_the_loss_each_batch_trained_with_and_replans_with_it():
    rows = gpu_proof.memory_rows("qwen", [{"batch": 1, "plan_gb": 3.0, "peak_gb": 2.9, "fits": True, "loss": "plain"}],
                                 15.0)
    assert rows[0]["loss"] == "plain"


def test_a_recorded_run_is_rerun_with_its_own_evaluation_cadence_and_rows():
    setup, replan = gpu_proof._setup(["--stages", "tokens/s,time plan", "--throughput-rows", "128", "--eval-steps", "10"])
    assert (setup.throughput_rows, setup.eval_steps, setup.stages, replan) == (128, 10, ("tokens/s", "time plan"), None)
    default, _ = gpu_proof._setup([])
    assert (default.throughput_rows, default.eval_steps) == (gpu_proof.GPU_SETUP.throughput_rows, gpu_proof.GPU_SETUP.eval_steps)


def test_replan_prints_the_memory_sweeps_and_the_tokens_s_runs_rows_and_says_when_there_are_none(capsys):
    """--replan plans again every peak a results file records: the memory sweep's rows and the tokens/s runs'; a
    file with only one kind prints that kind, and one with neither (a time-plan run) says so, without a GPU."""
    from pathlib import Path

    results = Path(__file__).resolve().parents[2] / "bench" / "results"
    assert gpu_proof.main(argv=["--replan", str(results / "gpu-nvidia-h200-tokens-s-time-plan.json")]) == 0
    out = capsys.readouterr().out
    assert out.count("memory plan / measured peak, GB, batch") == 4 and "peak/plan" in out
    assert gpu_proof.main(argv=["--replan", str(results / "gpu-nvidia-h200.json")]) == 0
    out = capsys.readouterr().out
    assert "memory plan / measured peak at batch" in out and "memory plan / measured peak, GB, batch" in out
    assert gpu_proof.main(argv=["--replan", str(results / "gpu-nvidia-h200-time-plan.json")]) == 0
    assert "records no memory peak to plan again" in capsys.readouterr().out


def test_an_empty_table_prints_its_header(capsys):
    from bench.__main__ import print_table

    print_table([])  # max() of one column name alone: no TypeError
    assert capsys.readouterr().out.startswith("bench  metric  value  target  note")
