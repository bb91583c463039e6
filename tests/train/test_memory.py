"""The memory plan: what drives it, the mode it decides on a T4, and the loss that trains (one chunk of logits,
not the whole sequence's)."""

from pathlib import Path
from types import SimpleNamespace

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


def published(name: str):
    """The published configs (config.json's numbers, no download) of models whose attention is not hidden wide
    (heads x head_dim != hidden: Qwen3 wider, Gemma-2 narrower), and of models whose attention is hidden wide."""
    from transformers import Gemma2Config, LlamaConfig, MistralConfig, Phi3Config, Qwen2Config, Qwen3Config

    qwen3 = dict(vocab_size=151_936, head_dim=128, tie_word_embeddings=True)
    made = {
        "qwen3-0.6b": lambda: Qwen3Config(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                                          num_attention_heads=16, num_key_value_heads=8, **qwen3),
        "qwen3-4b": lambda: Qwen3Config(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                                        num_attention_heads=32, num_key_value_heads=8, **qwen3),
        "gemma-2-2b": lambda: Gemma2Config(vocab_size=256_000, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                                           num_attention_heads=8, num_key_value_heads=4, head_dim=256, tie_word_embeddings=True),
        "llama-3.2-1b": lambda: LlamaConfig(vocab_size=128_256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                                            num_attention_heads=32, num_key_value_heads=8, head_dim=64, tie_word_embeddings=True),
        "llama-3.2-3b": lambda: LlamaConfig(vocab_size=128_256, hidden_size=3072, intermediate_size=8192, num_hidden_layers=28,
                                            num_attention_heads=24, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True),
        "qwen2.5-1.5b": lambda: Qwen2Config(vocab_size=151_936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                                            num_attention_heads=12, num_key_value_heads=2, tie_word_embeddings=True),
        "qwen2.5-7b": lambda: Qwen2Config(vocab_size=152_064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                                          num_attention_heads=28, num_key_value_heads=4, tie_word_embeddings=False),
        "smollm2-135m": lambda: LlamaConfig(vocab_size=49_152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                                            num_attention_heads=9, num_key_value_heads=3, tie_word_embeddings=True),
        "smollm2-1.7b": lambda: LlamaConfig(vocab_size=49_152, hidden_size=2048, intermediate_size=8192, num_hidden_layers=24,
                                            num_attention_heads=32, num_key_value_heads=32, tie_word_embeddings=True),
        "mistral-7b": lambda: MistralConfig(vocab_size=32_768, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                            num_attention_heads=32, num_key_value_heads=8, head_dim=128),
        "phi-3.5-mini": lambda: Phi3Config(vocab_size=32_064, hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
                                           num_attention_heads=32, num_key_value_heads=32, tie_word_embeddings=False),
    }
    return made[name]()


NOT_HIDDEN_WIDE = ("qwen3-0.6b", "qwen3-4b", "gemma-2-2b")


def _linears_of(config) -> list[tuple[int, int]]:
    """(in, out) of one layer's q, k, v, o, gate, up, down as transformers builds them (on the meta device: no memory)."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        layer = AutoModelForCausalLM.from_config(config).model.layers[0]
    return [(m.in_features, m.out_features) for m in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj,
                                                      layer.self_attn.o_proj, layer.mlp.gate_proj, layer.mlp.up_proj,
                                                      layer.mlp.down_proj)]


@pytest.mark.parametrize("name", NOT_HIDDEN_WIDE)
def test_the_plans_linear_layers_and_lora_are_the_models_own_where_heads_x_head_dim_is_not_hidden(name):
    """q is hidden x heads*head_dim, k and v hidden x kv_heads*head_dim, o heads*head_dim x hidden: Qwen3-4B's q is
    2,560 x 4,096, not 2,560 x 2,560; the weights and the LoRA adapters (r x (in + out)) follow."""
    config = published(name)
    shape = memory.Shape.from_config(config)
    real = _linears_of(config)
    assert shape.linears()[:7] == real and len(shape.linears()) == 7 * config.num_hidden_layers
    assert shape.head_dim == config.head_dim and shape.attention != shape.hidden
    parts = memory.estimate(shape, 512, 2, 16, "chunked")
    assert parts["lora_and_optimizer"] == 16 * 16 * sum(i + o for i, o in real) * config.num_hidden_layers
    embed = shape.vocab * shape.hidden
    assert parts["base_weights"] == pytest.approx(sum(i * o for i, o in real) * config.num_hidden_layers * 0.53 + embed * 4)


def test_grpos_cache_is_kv_heads_x_head_dim_wide():
    """05's GRPO generation: Qwen3-0.6B keeps 8 x 128 keys per position and layer, not 1,024 x 8 / 16 = 512."""
    config = published("qwen3-0.6b")
    p = memory.plan_preference(config, "grpo", 256, 8, 16, 4, 512, 14.7)
    assert p["parts_gb"]["kv_cache"] == round(28 * 2 * 8 * (256 + 512) * 8 * 128 * 2 / memory.GB, 3)


# 02's, 03's and 05's plans of models whose attention is hidden wide, in bytes, as the plan made them before it read
# head_dim (for such a model head_dim = hidden / heads): training (chunked loss, batch 4 x 1,024), 03 (16 x (512 +
# 1,024) generated, 16,384 tokens scored), GRPO (8 x (256 + 512)), DPO (2 pairs x 512).
BEFORE_HEAD_DIM = {
    "llama-3.2-1b": (3766736650.2400002, 3139210506.2400002, 4499691274.24, 3389347594.2400002),
    "llama-3.2-3b": (6601923031.04, 6458213335.040001, 7799088087.04, 5865087959.04),
    "mistral-7b": (9779103662.08, 9245378478.08, 11792369582.08, 8101382062.08),
    "phi-3.5-mini": (6431524782.08, 13349175214.08, 8782432174.08, 5250828206.08),
    "qwen2.5-1.5b": (4085917941.76, 3262604533.76, 4918946037.76, 3613698293.76),
    "qwen2.5-7b": (12522713251.84, 9211756707.84, 14391275683.84, 11360465059.84),
    "smollm2-1.7b": (3834097172.48, 7144975892.48, 4728532500.48, 3084365332.48),
    "smollm2-135m": (1451655168.0, 1460871168.0, 1682710528.0, 1251024896.0),
}


@pytest.mark.parametrize("name", sorted(BEFORE_HEAD_DIM))
def test_every_planned_figure_is_unchanged_where_heads_x_head_dim_is_hidden(name):
    from nbutils.train import evalmemory

    config = published(name)
    shape = memory.Shape.from_config(config)
    assert config.num_attention_heads * (getattr(config, "head_dim", None) or 0) in (0, config.hidden_size)
    train = memory.estimate(shape, 1024, 4, 16, "chunked")["total"]
    infer = evalmemory.peak_bytes(shape, quantized=True, lora_r=16, n_adapters=1, rows=16, prompt=512, new_tokens=1024,
                                  tokens=16384)
    grpo, dpo = (peak_of(shape, m, s, b, c) for m, s, b, c in (("grpo", 256, 8, 512), ("dpo", 512, 2, 0)))
    assert (train, infer, grpo, dpo) == pytest.approx(BEFORE_HEAD_DIM[name], rel=1e-12)


def peak_of(shape, method, seq_len, batch, completion_len) -> float:
    return memory.peak(memory._preference_parts(shape, method, seq_len, batch, 16, 4, completion_len))


def test_a_twin_recorded_without_head_dim_plans_with_hidden_over_heads():
    """A twin's FULL_SHAPE written before head_dim was kept: head_dim falls back to hidden // heads."""
    from types import SimpleNamespace

    recorded = {k: v for k, v in memory.full_shape(LLAMA_8B).items() if k != "head_dim"}
    twin = SimpleNamespace(**{**vars(LLAMA_8B), "num_hidden_layers": 2, memory.FULL_SHAPE: recorded})
    assert memory.Shape.from_config(twin).head_dim == 128 == memory.Shape.from_config(published("qwen3-4b")).head_dim
    assert memory.full_shape(published("qwen3-4b"))["head_dim"] == 128


GEMMA2_9B = SimpleNamespace(vocab_size=256000, hidden_size=3584, intermediate_size=14336, num_hidden_layers=42,
                            num_attention_heads=16, num_key_value_heads=8, tie_word_embeddings=True, head_dim=256)
QWEN25_7B = SimpleNamespace(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                            num_attention_heads=28, num_key_value_heads=4, tie_word_embeddings=False)


@pytest.mark.parametrize("config, seq, batch, loss", [(GEMMA2_9B, 1024, 4, "plain"), (QWEN25_7B, 2048, 8, "chunked")])
def test_split_over_two_t4s_counts_the_loss_step_and_the_lm_head_on_one_gpu(config, seq, batch, loss):
    """device_map="auto" divides the weights, adapters and checkpoints, not the moments: the loss step (LM head copy
    and logits: Gemma-2-9B's 11.7 GB at 4 x 1024) and a layer's backward run whole on one GPU, beside the fp32 LM
    head (tied: the embedding). Halving the whole peak approved these on 2 T4s; each would OOM at its first step."""
    from nbutils.train import planning
    from nbutils.train.launch import decide

    p = memory.plan(config, seq, batch, 16, 14.7, 2, loss=loss)
    parts = {k: v * memory.GB for k, v in p["parts_gb"].items()}
    moment = max(parts["lm_head_copy"] + parts["logits"], parts["layer_backward"])
    live = parts["base_weights"] + parts["lora_and_optimizer"] + parts["checkpoints"]
    assert live / 2 + moment + parts["overhead"] > memory.budget_bytes(14.7)  # the repro's figure: no room even so
    assert not p["fits"] and not p["split_fits"] and p["split_estimate_gb"] > 14.7 * memory.MARGIN
    launch = decide(gpu_count=2, memory_plan=p, env={})
    assert launch.mode == "split" and "cannot hold it" in launch.why
    said = planning.memory_problem(p, launch.mode)
    assert said and f"per_device_batch_size={batch} does not fit 2 GPUs of 14.7 GB together" in said
    most = p["split_largest_batch"]
    assert 0 < most < batch and f"the largest that fits is {most}" in said
    assert memory.plan(config, seq, most, 16, 14.7, 2, loss=loss)["split_fits"]


def test_a_precision_fp32_run_is_planned_with_fp32_activations_on_the_gpu():
    """precision="fp32" computes in fp32 on the GPU: its layer backward twice the 16-bit one, no 16-bit LM head copy,
    the CUDA context still counted (unlike the CPU's fp32 estimate)."""
    half, full = (memory.plan(LLAMA_8B, 1024, 2, 16, 14.7, compute_bytes=cb) for cb in (2, 4))
    assert full["parts_gb"]["overhead"] == half["parts_gb"]["overhead"] == round(memory.OVERHEAD / memory.GB, 3)
    assert full["parts_gb"]["lm_head_copy"] == 0 < half["parts_gb"]["lm_head_copy"]
    shape = memory.Shape.from_config(LLAMA_8B)
    extra = 2 * 1024 * 2 * (14 * shape.hidden + 8 * shape.intermediate)  # 2 more bytes a value
    assert full["parts_gb"]["layer_backward"] == pytest.approx(half["parts_gb"]["layer_backward"] + extra / memory.GB,
                                                               abs=1e-3)
    assert full["largest_batch_that_fits"] <= half["largest_batch_that_fits"] and full["compute_bytes"] == 4
    cpu = memory.estimate(shape, 1024, 2, 16, compute_bytes=4)  # the CPU bench's figure: no CUDA context
    assert cpu["overhead"] == 0


def test_gemma_2s_eager_attention_adds_its_scores_to_a_layers_backward_and_01s_cap_counts_them():
    """Gemma-2 trains eagerly (its class refuses sdpa): the recomputed layer's backward holds batch x heads x seq x seq
    scores at cb + 12 bytes each (memory.eager_score_bytes, from eager_attention_forward), the model's two fp32 4-D
    masks are live all along; sdpa holds neither. 01's cap ("auto": the attention 02 loads with) counts them too."""
    from nbutils.train import modeling

    gemma = published("gemma-2-2b")
    shape = memory.Shape.from_config(gemma)
    assert modeling.choose_attention(gemma) == "eager" == memory.planned_attention(gemma)
    for cb in (2, 4):
        sdpa, eager = (memory.estimate(shape, 1024, 8, 16, "chunked", cb, True, a) for a in ("sdpa", "eager"))
        scores = 8 * shape.heads * 1024 * 1024 * (cb + 12)  # 8 rows x 8 heads: 896 MiB in 16 bits
        assert eager["layer_backward"] - sdpa["layer_backward"] == scores
        assert eager["attention_masks"] == 2 * 8 * 1024 * 1024 * 4 and "attention_masks" not in sdpa
        assert eager["total"] - sdpa["total"] == pytest.approx(scores + eager["attention_masks"])  # the backward peaks
    plans = {a: memory.plan(gemma, 1024, 1, 16, 14.7, loss="plain", attention=a) for a in ("sdpa", "eager")}
    assert plans["eager"]["estimate_gb"] > plans["sdpa"]["estimate_gb"] and plans["eager"]["attention"] == "eager"
    cap, sdpa_cap = (memory.longest_sequence(gemma, 1, 14.7, "plain", attention=a)[0] for a in ("auto", "sdpa"))
    assert cap == plans["eager"]["longest_seq_that_fits"] < sdpa_cap == plans["sdpa"]["longest_seq_that_fits"]
    assert "eager attention" in memory.longest_sequence(gemma, 1, 14.7, "plain")[1]
    assert memory.planned_attention(LLAMA_8B) == "sdpa"  # a bare set of dimensions: no class to ask
