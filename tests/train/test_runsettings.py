"""The run's settings: what is compared on resume, what is left out, the LoRA part."""

import json

import pytest
from peft import LoraConfig

from nbutils.train import runsettings
from nbutils.train.trainconfig import TrainConfig


def _lora(**kw):
    return LoraConfig(**{"r": 16, "lora_alpha": 16, "target_modules": "all-linear", "task_type": "CAUSAL_LM", **kw})


def test_settings_flatten_parameters_and_leave_out_what_does_not_change_the_weights():
    run_config = {"parameters": {"base_model": "embedded", "time_budget_min": 5}, "data_manifest_hash": "abc"}
    got = runsettings.settings(TrainConfig(max_steps=7), run_config)
    assert got["base_model"] == "embedded" and got["data_manifest_hash"] == "abc" and got["max_steps"] == 7
    assert not {"time_budget_min", "resume", "eval_steps", "save_steps", "logging_steps"} & set(got)
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
    cfg = TrainConfig()
    old = runsettings.settings(cfg, {"lora": runsettings.lora_settings(_lora())})
    new = runsettings.settings(cfg, {"lora": runsettings.lora_settings(_lora(**change))})
    assert runsettings.settings_hash(old) != runsettings.settings_hash(new)
    assert [line.split(":")[0] for line in runsettings.differences(old, new)] == [key]


def test_with_lora_reads_the_models_own_config_and_keeps_an_explicit_one():
    class Model:  # what get_peft_model returns keeps the LoraConfig it was given under "default"
        peft_config = {"default": _lora(lora_alpha=8)}

    assert runsettings.with_lora({"parameters": {}}, Model())["lora"]["lora_alpha"] == 8
    assert runsettings.with_lora({"lora": {"r": 2}}, Model())["lora"] == {"r": 2}
    assert runsettings.with_lora(None, object()) == {}  # no adapters: nothing to add


def test_differences_say_missing_on_one_side():
    assert runsettings.differences({"a": 1, "b": 2}, {"a": 1, "c": 3}) == ["b: checkpoint has 2, this run '<missing>'",
                                                                  "c: checkpoint has '<missing>', this run 3"]


def test_package_versions_and_smoke_do_not_refuse_a_resume():
    """A Kaggle image updated between sessions (or smoke toggled) trains the same weights from the checkpoint on."""
    base = {"parameters": {"lora_r": 8, "smoke": False}, "versions": {"torch": "2.6.0", "peft": "0.18.1"}}
    later = {"parameters": {"lora_r": 8, "smoke": True}, "versions": {"torch": "2.7.0", "peft": "0.21.2"}}
    assert runsettings.settings(run_config=base) == runsettings.settings(run_config=later) == {"lora_r": 8}
    assert runsettings.settings(run_config=base) != runsettings.settings(run_config={**base, "parameters": {"lora_r": 16}})


def test_a_checkpoint_from_before_the_lora_fields_were_retired_still_resumes():
    """Checkpoints saved while TrainConfig still carried lora_r/lora_dropout/use_rslora: lora.* compares them now."""
    before = {"lora_r": 16, "lora_dropout": 0.0, "use_rslora": False, "lora.r": 16, "learning_rate": 0.003}
    now = {"lora.r": 16, "learning_rate": 0.003}
    assert runsettings.differences(before, now) == []
    assert runsettings.differences(before, {**now, "lora.r": 8}) == ["lora.r: checkpoint has 16, this run 8"]
