"""Configuration mistakes are found in a second, before any model is loaded (the memory plan: test_memory.py),
by the same rules on 02's parameters (the plan) and on the TrainingArguments its recipe builds."""

import pytest

from nbutils.train.argcheck import ConfigError, of_arguments, problems, validate

GOOD = dict(eval_strategy="steps", save_strategy="steps", eval_steps=20, save_steps=20, per_device_train_batch_size=16,
            gradient_accumulation_steps=1, world_size=1, max_steps=80, num_train_epochs=1.0, optim="adamw_torch")
CHECKS = dict(n_train=400, gpu_capability=(7, 5), max_seq_len=256, model_max_positions=256)


@pytest.mark.parametrize("kw, message", [
    (dict(eval_strategy="steps", save_strategy="epoch"), "use the same strategy for both"),
    (dict(eval_steps=20, save_steps=30), "save_steps=30 is not a multiple of eval_steps=20"),
    (dict(load_best_model_at_end=True, eval_strategy="no"), "load_best_model_at_end=True needs"),
    (dict(bf16=True), "bf16 on a GPU of compute capability 7.5"),
    (dict(per_device_train_batch_size=64, gradient_accumulation_steps=8), "larger than the 400 training examples"),
    (dict(max_steps=100000), "epochs of 400 examples"),
    (dict(max_steps=2), "fewer than 5 optimizer steps"),
    (dict(max_steps=-1, num_train_epochs=0.1), "fewer than 5 optimizer steps"),
    (dict(optim="paged_adamw_8bit"), "paged optimizers"),
])
def test_each_config_mistake_has_its_message_before_loading(kw, message, no_model_loading):
    with pytest.raises(ConfigError) as err:
        validate({**GOOD, **kw}, **CHECKS)
    assert message in str(err.value)
    assert no_model_loading == []


def test_the_datas_length_against_the_models_positions():
    found = problems(GOOD, **{**CHECKS, "max_seq_len": 4096})
    assert found == ["the data's max_seq_len=4096 (01) is above the model's max_position_embeddings=256: re-run 01 "
                     "with a smaller max_seq_len."]


def test_mixed_precision_on_cpu_is_refused(no_model_loading):
    with pytest.raises(ConfigError, match="mixed precision .* needs a GPU"):
        validate({**GOOD, "fp16": True}, n_train=400, gpu_capability=None)


def test_all_mistakes_are_listed_in_one_error():
    values = {**GOOD, "save_steps": 30, "optim": "paged_adamw_32bit", "bf16": True, "max_steps": 2}
    found = problems(values, **CHECKS)
    assert len(found) == 4
    with pytest.raises(ConfigError) as err:
        validate(values, **CHECKS)
    assert all(msg in str(err.value) for msg in found)


def test_defaults_and_sane_settings_pass():
    assert problems(GOOD, **CHECKS) == []
    assert problems({**GOOD, "bf16": True}, **{**CHECKS, "gpu_capability": (8, 0)}) == []
    assert problems({**GOOD, "optim": "paged_adamw_8bit"}, **CHECKS, resume=False) == []
    assert problems({**GOOD, "eval_strategy": "no", "save_steps": 7}, **CHECKS) == []
    assert problems({"max_steps": 80}, **CHECKS) == []  # what is absent is not checked


def test_the_rules_read_real_training_arguments(tmp_path):
    from transformers import TrainingArguments

    args = TrainingArguments(output_dir=str(tmp_path), eval_strategy="steps", save_strategy="epoch", max_steps=80,
                             use_cpu=True, report_to=[])
    values = of_arguments(args)
    assert values["eval_strategy"] == "steps" and values["save_strategy"] == "epoch" and values["world_size"] == 1
    assert any("use the same strategy" in p for p in problems(values, n_train=400, gpu_capability=None))
