"""Configuration mistakes are found in a second, before any model is loaded (the memory plan: test_memory.py)."""

from pathlib import Path

import pytest

from nbutils.train.trainconfig import ConfigError, TrainConfig, problems, validate

ROOT = Path(__file__).resolve().parents[2]
CHECKS = dict(n_train=400, gpu_capability=(7, 5), model_max_positions=256, data_max_seq_len=256)


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
