"""The run's settings: what is compared on resume, what is left out, the LoRA part."""

import json

import pytest
from peft import LoraConfig

from nbutils.train import runsettings


def _lora(**kw):
    return LoraConfig(**{"r": 16, "lora_alpha": 16, "target_modules": "all-linear", "task_type": "CAUSAL_LM", **kw})


RUN = {"base_model": "embedded", "precision": "fp32", "data_manifest_hash": "abc", "time_budget_min": 5, "smoke": False,
       "versions": {"torch": "2.6.0"}, "loss": "chunked", "training": {"max_steps": 7, "learning_rate": 3e-3},
       "quantization": {"bnb_4bit_quant_type": "nf4", "load_in_4bit": True, "llm_int8_threshold": 6.0,
                        "quant_method": "bitsandbytes"}}


def test_settings_flatten_the_sections_and_leave_out_what_does_not_change_the_weights():
    got = runsettings.settings(RUN)
    assert got["base_model"] == "embedded" and got["data_manifest_hash"] == "abc" and got["training.max_steps"] == 7
    assert got["quantization.bnb_4bit_quant_type"] == "nf4" and got["quantization.load_in_4bit"] is True
    assert not {"time_budget_min", "smoke", "versions", "loss"} & set(got)
    assert "quantization.llm_int8_threshold" not in got and "quantization.quant_method" not in got  # 8-bit, bookkeeping
    assert got == json.loads(json.dumps(got))  # JSON as it goes into checksums.json


def test_settings_hash_follows_the_values_not_their_order():
    assert runsettings.settings_hash({"a": 1, "b": 2}) == runsettings.settings_hash({"b": 2, "a": 1})
    assert runsettings.settings_hash({"a": 1}) != runsettings.settings_hash({"a": 2}) and len(runsettings.settings_hash({})) == 16


def test_lora_settings_are_json_safe_sorted_and_leave_the_machine_out():
    config = _lora(target_modules={"v_proj", "q_proj", "k_proj"})
    config.base_model_name_or_path = "/root/.cache/somewhere/model"
    got = runsettings.lora_settings(config)
    assert got["target_modules"] == ["k_proj", "q_proj", "v_proj"] and got["peft_type"] == "LORA"
    assert got["r"] == 16 and got["lora_alpha"] == 16 and got["task_type"] == "CAUSAL_LM"
    assert not runsettings.LORA_NOT_SETTINGS & set(got)
    assert json.loads(json.dumps(got)) == got
    assert runsettings.lora_settings(_lora(target_modules={"q_proj", "v_proj", "k_proj"})) == got  # set order does not matter


@pytest.mark.parametrize("change, key", [({"target_modules": ["q_proj", "v_proj"]}, "lora.target_modules"),
                                         ({"lora_alpha": 32}, "lora.lora_alpha"), ({"r": 8}, "lora.r")])
def test_two_lora_configs_give_two_settings_and_the_difference_names_the_key(change, key):
    old = runsettings.settings({**RUN, "lora": runsettings.lora_settings(_lora())})
    new = runsettings.settings({**RUN, "lora": runsettings.lora_settings(_lora(**change))})
    assert runsettings.settings_hash(old) != runsettings.settings_hash(new)
    assert [line.split(":")[0] for line in runsettings.differences(old, new)] == [key]


def test_differences_say_missing_on_one_side():
    assert runsettings.differences({"a": 1, "b": 2}, {"a": 1, "c": 3}) == ["b: checkpoint has 2, this run '<missing>'",
                                                                  "c: checkpoint has '<missing>', this run 3"]


def test_package_versions_do_not_refuse_a_resume():
    """A Kaggle image updated between sessions trains the same weights from the checkpoint on."""
    later = {**RUN, "versions": {"torch": "2.7.0", "peft": "0.21.2"}, "time_budget_min": 600}
    assert runsettings.settings(RUN) == runsettings.settings(later)
    assert runsettings.settings(RUN) != runsettings.settings({**RUN, "training": {"max_steps": 7, "learning_rate": 1e-4}})


def test_a_real_run_never_continues_a_smoke_run():
    """smoke=True trains a few steps to a spent schedule: a real run resumed from it would read as training longer.
    Smoke to smoke resumes, and every other run's settings (and hash) stay as they were without the flag."""
    smoke = runsettings.settings({**RUN, "smoke": True})
    assert runsettings.differences(smoke, runsettings.settings(RUN)) == [
        "smoke: checkpoint has True, this run False (a smoke run's few steps spend its learning-rate schedule: it "
        "checks the chain, it is no start to continue)"]
    assert runsettings.differences(smoke, runsettings.settings({**RUN, "smoke": True})) == []
    assert "smoke" not in runsettings.settings(RUN) and "smoke" not in runsettings.settings({**RUN, "smoke": None})
    [line] = runsettings.differences(runsettings.settings(RUN), smoke)  # a smoke run over a real run's checkpoint
    assert line.startswith("smoke: checkpoint has False, this run True (") and "output_dir of its own" in line, line


def test_a_lora_field_one_peft_lacks_is_the_same_at_its_default():
    """peft adds LoraConfig fields in most releases: a checkpoint from an older peft (the field missing) resumes
    under a newer one while the field is at its default, and is refused once it is not."""
    new = runsettings.settings({**RUN, "lora": runsettings.lora_settings(_lora())})
    older = {k: v for k, v in new.items() if k != "lora.use_dora"}  # a peft from before the field
    assert new["lora.use_dora"] is False and runsettings.differences(older, new) == []
    dora = runsettings.settings({**RUN, "lora": runsettings.lora_settings(_lora(use_dora=True))})
    assert runsettings.differences(older, dora) == ["lora.use_dora: checkpoint has '<missing>', this run True"]
    gone = {**new, "lora.a_field_peft_dropped": None}  # dropped since: only an unset value is the same
    assert runsettings.differences(gone, new) == []
    assert runsettings.differences({**new, "lora.a_field_peft_dropped": 4}, new) != []


def test_num_train_epochs_counts_only_where_max_steps_does_not_set_the_length():
    """The Trainer reads num_train_epochs only without a positive max_steps (02 and 05 always set one)."""
    def run(**training):
        return runsettings.settings({**RUN, "training": {"learning_rate": 2e-4, **training}})

    assert runsettings.differences(run(max_steps=500, num_train_epochs=3.0), run(max_steps=500, num_train_epochs=1.0)) == []
    assert runsettings.differences(run(max_steps=-1, num_train_epochs=3.0), run(max_steps=-1, num_train_epochs=1.0)) != []
