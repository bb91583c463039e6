"""The memory plan: what drives it, the mode it decides on a T4, and the loss that trains (one chunk of logits,
not the whole sequence's)."""

from pathlib import Path

import pytest

from nbutils.train import memory
from tests.train.conftest import LLAMA_8B


def test_chunked_loss_at_least_doubles_the_largest_batch_of_llama_8b_on_a_t4():
    plain, chunked = (memory.plan(LLAMA_8B, seq_len=2048, batch=2, lora_r=16, gpu_memory_gb=16.0, loss=k)
                      for k in ("plain", "chunked"))
    assert chunked["largest_batch_that_fits"] >= 2 * max(1, plain["largest_batch_that_fits"])
    assert chunked["longest_seq_that_fits"] >= 2 * plain["longest_seq_that_fits"]
    assert plain["parts_gb"]["logits"] > 4 * chunked["parts_gb"]["logits"]  # the floor: >= 4x lower
    assert chunked["loss"] == "chunked" and "logits (chunked loss)" in memory.table(chunked)


def test_logits_part_is_one_chunk_not_the_sequence():
    shape = memory.Shape.from_config(LLAMA_8B)
    parts = {b: memory.estimate(shape, 2048, b, 16, "chunked")["logits"] for b in (1, 8)}
    kept = 2048 * 4096 * 2 * 4  # hidden states, their gradient, scaled, scattered back: per row of the batch
    assert parts[8] - parts[1] == pytest.approx(7 * kept)
    assert parts[1] - kept == memory.chunk_rows(128_256) * 128_256 * 6
    with pytest.raises(ValueError, match="loss='fused'"):
        memory.logits_bytes(1, 1, 1, 1, "fused")


@pytest.mark.parametrize("kind", ["plain", "chunked"])
def test_longest_sequence_is_the_edge_of_the_budget(kind):
    p = memory.plan(LLAMA_8B, seq_len=2048, batch=2, lora_r=16, gpu_memory_gb=15.0, loss=kind)
    shape, longest = memory.Shape.from_config(LLAMA_8B), p["longest_seq_that_fits"]
    budget = 15.0 * memory.GB * 0.92
    assert longest > 0 and longest % 64 == 0
    assert memory.estimate(shape, longest, 2, 16, kind)["total"] <= budget
    assert memory.estimate(shape, longest + 64, 2, 16, kind)["total"] > budget
    assert p["fits"] == (longest >= 2048)
    assert memory.longest_sequence(LLAMA_8B, 2, 15.0, loss=kind) == (longest, f"the memory of a 15 GB GPU at batch size 2 "
                                                                              f"({kind} loss)")


def test_memory_plan_on_a_t4_decides_the_mode():
    from nbutils.train.launch import decide

    p = memory.plan(LLAMA_8B, seq_len=2048, batch=2, lora_r=16, gpu_memory_gb=15.0, gpu_count=2, loss="chunked")
    assert 5 < p["estimate_gb"] < 15 and p["fits"] and p["largest_batch_that_fits"] >= 2
    assert decide(gpu_count=2, memory_plan=p, env={}).mode == "ddp"
    # With the full logits (6 GB at 2 x 2048) batch 2 no longer fits one T4: split over two does.
    plain = memory.plan(LLAMA_8B, seq_len=2048, batch=2, lora_r=16, gpu_memory_gb=15.0, gpu_count=2)
    assert not plain["fits"] and plain["split_fits"] and decide(gpu_count=2, memory_plan=plain, env={}).mode == "split"
    huge = memory.plan(LLAMA_8B, seq_len=2048, batch=64, lora_r=16, gpu_memory_gb=15.0, gpu_count=2)
    assert not huge["split_fits"] and "cannot hold it" in decide(gpu_count=2, memory_plan=huge, env={}).why
    big = memory.plan(LLAMA_8B, seq_len=2048, batch=16, lora_r=16, gpu_memory_gb=15.0, gpu_count=2)
    assert not big["fits"] and big["largest_batch_that_fits"] < 16
    table = memory.table({**big, "measured_peak_gb": 7.5})
    assert "estimated peak" in table and "DOES NOT FIT" in table and "measured peak" in table


def test_memory_plan_grows_with_what_drives_it():
    base = memory.estimate(memory.Shape.from_config(LLAMA_8B), seq_len=1024, batch=2, lora_r=16)
    longer = memory.estimate(memory.Shape.from_config(LLAMA_8B), seq_len=2048, batch=2, lora_r=16)
    assert longer["logits"] == 2 * base["logits"] and longer["checkpoints"] == 2 * base["checkpoints"]
    assert longer["layer_backward"] == 2 * base["layer_backward"]
    assert longer["base_weights"] == base["base_weights"]
    # 4-bit weights: about half a byte per linear parameter, far below 16-bit; the two 128,256 x 4,096 matrices
    # of embedding and LM head in fp32 (the k-bit preparation casts them) add 3.9 GB
    shape = memory.Shape.from_config(LLAMA_8B)
    embed = 2 * shape.vocab * shape.hidden
    assert 3.2 < (base["base_weights"] - 4 * embed) / 2**30 < 3.8 and 7 < base["base_weights"] / 2**30 < 8
    assert base["lm_head_copy"] == shape.vocab * shape.hidden * 2 == longer["lm_head_copy"]


def test_the_k_bit_preparation_leaves_what_the_plan_counts_in_fp32():
    """The plan counts the embedding and the LM head at 4 bytes a parameter: peft's k-bit preparation casts the
    16-bit weights a 4-bit load leaves (a trace of a GPU run showed the fp32 embedding live at the peak)."""
    import torch

    from nbutils.harness import notebook_recipe
    from nbutils.train import modeling

    bnb, lora = notebook_recipe.configs("fp16")
    model = modeling.attach_lora(modeling.load_base("embedded", "fp16", bnb), lora)
    assert model.get_input_embeddings().weight.dtype == torch.float32
    assert model.get_output_embeddings().weight.dtype == torch.float32


def test_memory_plan_reads_the_config_without_weights(embedded_dir, no_model_loading):
    from nbutils.runtime.modelsource import load_config

    p = memory.plan(load_config("embedded"), seq_len=64, batch=16, lora_r=16, gpu_memory_gb=15.0)
    assert p["fits"] and p["largest_batch_that_fits"] == 256
    assert no_model_loading == []


def test_a_chunk_of_the_chunked_loss_holds_about_128_mb_of_logits():
    assert memory.chunk_rows(128_256) == 261 and memory.chunk_rows(100) >= 16


def test_the_peak_is_the_loss_step_at_a_small_batch_and_a_layers_backward_at_a_large_one():
    shape = memory.Shape.from_config(LLAMA_8B)
    small, large = (memory.estimate(shape, 1024, b, 16, "chunked") for b in (1, 32))
    assert small["lm_head_copy"] + small["logits"] > small["layer_backward"]
    assert large["layer_backward"] > large["lm_head_copy"] + large["logits"]
    always = sum(small[k] for k in ("base_weights", "lora_and_optimizer", "checkpoints", "overhead"))
    assert small["total"] == always + small["lm_head_copy"] + small["logits"]


@pytest.mark.parametrize("results", sorted((Path(__file__).parents[2] / "bench" / "results").glob("gpu-*.json")),
                         ids=lambda p: p.name)
def test_the_plan_is_within_10_percent_of_every_peak_a_gpu_run_measured(results):
    """make gpu-proof's measured peaks (torch.cuda.max_memory_allocated, fp16, 15 GB cap) against the plan's
    allocations as the plan is now: SFT at batches 1-32, DPO and GRPO, and the tokens/s runs (the plain loss's whole
    logits among them)."""
    from bench import gpu_replan

    rows = gpu_replan.replan(results) + gpu_replan.replan_throughput(results)
    if not rows:
        pytest.skip(f"{results.name} holds no plan / peak rows")
    ratios = [float(r["value"].split("peak/plan ")[1].rstrip(")")) for r in rows]
    assert all(0.9 <= x <= 1.1 for x in ratios), [(r["metric"], r["value"]) for r in rows]


def test_05s_plan_adds_its_judge_pass_and_names_the_largest_batch_that_fits():
    from nbutils.train import preference

    judge = preference.judge_pass(LLAMA_8B, "dpo", 16, 512)
    alone, judged = (memory.plan_preference(LLAMA_8B, "dpo", 512, 2, 16, 4, 16, 15.0, j) for j in (None, judge))
    assert judged["parts_gb"]["judge_pass"] > 0 and judged["estimate_gb"] >= alone["estimate_gb"]
    largest = judged["largest_batch_that_fits"]
    assert largest >= 1 and memory.plan_preference(LLAMA_8B, "dpo", 512, largest, 16, 4, 16, 15.0, judge)["fits"]
    assert not memory.plan_preference(LLAMA_8B, "dpo", 512, largest + 1, 16, 4, 16, 15.0, judge)["fits"]
    grpo = memory.plan_preference(LLAMA_8B, "grpo", 256, 8, 16, 4, 64, 15.0, preference.judge_pass(LLAMA_8B, "grpo", 16, 256))
    assert grpo["largest_batch_that_fits"] % 4 == 0  # whole groups of num_generations


def test_a_dry_run_twin_plans_as_the_model_it_stands_for():
    from types import SimpleNamespace

    twin = SimpleNamespace(**{**vars(LLAMA_8B), "num_hidden_layers": 2, "hidden_size": 256,
                              memory.FULL_SHAPE: memory.full_shape(LLAMA_8B)})
    assert memory.Shape.from_config(twin) == memory.Shape.from_config(LLAMA_8B)
    assert memory.Shape.from_config(twin, own=True).layers == 2


def test_a_multimodal_config_plans_from_its_language_models_fields():
    """Gemma-3 4B/12B's Gemma3Config keeps vocab_size, hidden_size and the layers in its text_config."""
    from transformers import Gemma3Config

    config = Gemma3Config()
    shape = memory.Shape.from_config(config)
    assert shape == memory.Shape.from_config(config.text_config) and shape.vocab == 262_208 and shape.layers == 26
    assert memory.full_shape(config) == memory.full_shape(config.text_config)
    assert memory.plan(config, seq_len=512, batch=2, lora_r=16, gpu_memory_gb=15.0)["fits"]
    assert memory.longest_sequence(config, 2, 15.0, loss="chunked")[0] > 0


def test_01s_cap_is_the_longest_sequence_02s_auto_loss_trains():
    """01's max_seq_len="auto" caps lengths with the loss 02's chunked_loss="auto" takes where the whole logits do not
    fit: Qwen2.5-1.5B at batch 16 trains 2,048 tokens with the chunks, 320 with the whole logits. At the cap, 02's
    plan fits; a model the chunks cannot serve (Gemma-2's soft-capped logits) is capped with the plain loss."""
    from transformers import AutoConfig, Gemma2Config

    from bench import real_models
    from nbutils.train import loss

    qwen = AutoConfig.for_model(**real_models.MODELS["qwen2.5-1.5b-instruct"]["config"])
    cap = {k: memory.longest_sequence(qwen, 16, 15.0, loss=k) for k in ("plain", "chunked")}
    assert cap["plain"][0] == 320 and cap["chunked"] == (2048, "the memory of a 15 GB GPU at batch size 16 (chunked loss)")
    n = cap["chunked"][0]
    whole = memory.plan(qwen, n, 16, 16, 15.0, loss="plain")  # 02's plan at the cap, as planning.plan_run makes it
    chosen = loss.choose("auto", cuda=True, model_config=qwen, plain_fits=whole["fits"])
    assert not whole["fits"] and chosen != "plain" and memory.plan(qwen, n, 16, 16, 15.0, loss=chosen)["fits"]
    assert loss.without_whole_logits(Gemma2Config()) == "plain" and loss.without_whole_logits(qwen) == "chunked"
    with pytest.raises(TypeError, match="loss"):  # no default: the plain loss's cap is 02's only for such models
        memory.longest_sequence(qwen, 16, 15.0)
    source = (Path(__file__).parents[2] / "notebooks" / "01_data_prep.py").read_text()
    assert "loss=lm_loss.without_whole_logits(config))" in source  # what 01 picks the cap's loss by
