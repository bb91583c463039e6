"""bench/throughput_bench.compare: a recipe that runs out of GPU memory becomes a row; the others are still compared."""

import torch

from bench import throughput_bench


def test_a_recipe_out_of_memory_is_a_row_and_the_rest_still_compare(monkeypatch):
    def fake(recipe, model_path, rows, batch, max_len, precision, chunked_loss):
        if recipe == "plain":
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 4.64 GiB.")
        return {"runtime_s": 2.0 if chunked_loss == "plain" else 1.0, "peak_bytes": 2**30, "strategy": "packed"}

    monkeypatch.setattr(throughput_bench, "_in_process", fake)
    from nbutils import embedded

    rows = throughput_bench.compare("embedded", embedded.resolve_model("embedded"), n=8, batch=2, max_len=64, repeats=2)
    by_metric = {r["metric"].split(" (")[0]: r for r in rows}
    assert by_metric["plain recipe: real target tokens/s"]["value"] == "out of memory"
    assert "4.64 GiB" in by_metric["plain recipe: real target tokens/s"]["note"]
    assert by_metric["ratio auto = chunked / plain loss at equal batching, tokens/s"]["value"] == 2.0  # a CPU: chunked
    assert not any(r["metric"].startswith("ratio this suite / plain recipe") for r in rows)
    assert sum(r["metric"].startswith("plain recipe") for r in rows) == 1  # tried once, not again in the next round


def test_the_gpu_plan_rows_compare_the_plans_allocations_with_the_measured_peak(tmp_path):
    """max_memory_allocated never counts the CUDA context: the row compares the plan without its overhead."""
    from transformers import AutoConfig

    from nbutils.train import memory

    config = AutoConfig.for_model(**throughput_bench.GPU_SHAPES["Qwen2.5-1.5B"])
    config.save_pretrained(tmp_path)
    plan = memory.plan(config, 512, 4, 16, 15.0, loss="chunked")
    runs = {"this suite": {"strategy": "length_grouped", "peak_bytes": plan["allocated_gb"] * 2**30}}
    out = throughput_bench._plan_rows(runs, [{"length": 300}, {"length": 512}], str(tmp_path), 4, 1024, "qwen",
                                      "chunked")
    assert out[0]["value"] == 1.0 and "allocations" in out[0]["metric"]
    assert plan["estimate_gb"] > plan["allocated_gb"]  # the overhead the row leaves out
