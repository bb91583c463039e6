"""Configuration mistakes are found in a second, before any model is loaded; the memory plan too."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from nbutils.train import memory
from nbutils.train.trainconfig import ConfigError, TrainConfig, problems, validate

ROOT = Path(__file__).resolve().parents[2]
CHECKS = dict(n_train=400, gpu_capability=(7, 5), model_max_positions=256, data_max_seq_len=256)
LLAMA_8B = SimpleNamespace(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                           num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=False)


@pytest.fixture
def no_model_loading(monkeypatch):
    """Any from_pretrained of a model during validation fails the test."""
    import transformers

    calls = []

    def refuse(*a, **k):
        calls.append(a)
        raise AssertionError("a model was loaded before validation")

    for cls in (transformers.AutoModelForCausalLM, transformers.AutoModel):
        monkeypatch.setattr(cls, "from_pretrained", refuse)
    return calls


@pytest.mark.parametrize("kw, message", [
    (dict(eval_strategy="steps", save_strategy="epoch"), "use the same strategy for both"),
    (dict(eval_steps=20, save_steps=30), "save_steps=30 is not a multiple of eval_steps=20"),
    (dict(load_best_model_at_end=True, eval_strategy="no"), "load_best_model_at_end=True needs"),
    (dict(precision="bf16"), "bf16 on a GPU of compute capability 7.5"),
    (dict(per_device_batch_size=64, grad_accum=8), "larger than the 400 training examples"),
    (dict(max_steps=100000), "epochs of 400 examples"),
    (dict(max_steps=2), "fewer than 5 optimizer steps"),
    (dict(max_steps=-1, num_epochs=0.1), "fewer than 5 optimizer steps"),
    (dict(optim="paged_adamw_8bit", resume=True), "paged optimizers"),
    (dict(max_seq_len=4096), "above the model's max_position_embeddings=256"),
    (dict(max_seq_len=512), "above the 256 the data was prepared for"),
])
def test_each_config_mistake_has_its_message_before_loading(kw, message, no_model_loading):
    with pytest.raises(ConfigError) as err:
        validate(TrainConfig(**kw), **CHECKS)
    assert message in str(err.value)
    assert no_model_loading == []


def test_fp16_on_cpu_is_refused(no_model_loading):
    with pytest.raises(ConfigError, match="mixed precision needs a GPU"):
        validate(TrainConfig(precision="fp16"), n_train=400, gpu_capability=None)


def test_all_mistakes_are_listed_in_one_error():
    cfg = TrainConfig(eval_steps=20, save_steps=30, optim="paged_adamw_32bit", precision="bf16", max_steps=2)
    found = problems(cfg, **CHECKS)
    assert len(found) == 4
    with pytest.raises(ConfigError) as err:
        validate(cfg, **CHECKS)
    assert all(msg in str(err.value) for msg in found)


def test_defaults_and_sane_settings_pass():
    assert problems(TrainConfig(), **CHECKS) == []
    assert problems(TrainConfig(precision="bf16"), **{**CHECKS, "gpu_capability": (8, 0)}) == []
    assert problems(TrainConfig(optim="paged_adamw_8bit", resume=False), **CHECKS) == []
    assert problems(TrainConfig(eval_strategy="no", save_strategy="steps"), **CHECKS) == []


def test_notebook_validates_and_plans_memory_before_loading():
    src = (ROOT / "notebooks" / "02_train_qlora.py").read_text()
    load = src.index("modeling.load_base(")
    assert src.index("trainconfig.validate(") < load and src.index("memory.plan(") < load


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
    assert longer["logits"] == 2 * base["logits"] and longer["activations"] == 2 * base["activations"]
    assert longer["base_weights"] == base["base_weights"]
    # 4-bit weights: about half a byte per linear parameter, far below 16-bit.
    assert 3.5 < base["base_weights"] / 2**30 < 6


def test_memory_plan_reads_the_config_without_weights(embedded_dir, no_model_loading):
    from nbutils.train.modeling import load_config

    p = memory.plan(load_config("embedded"), seq_len=64, batch=16, lora_r=16, gpu_memory_gb=15.0)
    assert p["fits"] and p["largest_batch_that_fits"] == 256
    assert no_model_loading == []
