"""A checkpoint's manifest and the run's settings: what is hashed, what is compared on resume, the LoRA part."""

import json

import pytest
from peft import LoraConfig

from nbutils.train import manifest as mf
from nbutils.train.trainconfig import TrainConfig


def _lora(**kw):
    return LoraConfig(**{"r": 16, "lora_alpha": 16, "target_modules": "all-linear", "task_type": "CAUSAL_LM", **kw})


def test_settings_flatten_parameters_and_leave_out_what_does_not_change_the_weights():
    run_config = {"parameters": {"base_model": "embedded", "time_budget_min": 5}, "data_manifest_hash": "abc"}
    got = mf.settings(TrainConfig(max_steps=7), run_config)
    assert got["base_model"] == "embedded" and got["data_manifest_hash"] == "abc" and got["max_steps"] == 7
    assert not {"time_budget_min", "resume", "eval_steps", "save_steps", "logging_steps"} & set(got)
    assert got == json.loads(json.dumps(got))  # JSON as it goes into manifest.json


def test_settings_hash_follows_the_values_not_their_order():
    assert mf.settings_hash({"a": 1, "b": 2}) == mf.settings_hash({"b": 2, "a": 1})
    assert mf.settings_hash({"a": 1}) != mf.settings_hash({"a": 2}) and len(mf.settings_hash({})) == 16


def test_lora_settings_are_json_safe_sorted_and_leave_the_machine_out():
    config = _lora(target_modules={"v_proj", "q_proj", "k_proj"})
    config.base_model_name_or_path = "/root/.cache/somewhere/model"
    got = mf.lora_settings(config)
    assert got["target_modules"] == ["k_proj", "q_proj", "v_proj"] and got["peft_type"] == "LORA"
    assert got["r"] == 16 and got["lora_alpha"] == 16 and got["task_type"] == "CAUSAL_LM"
    assert not mf.LORA_NOT_SETTINGS & set(got)
    assert json.loads(json.dumps(got)) == got
    assert mf.lora_settings(_lora(target_modules={"q_proj", "v_proj", "k_proj"})) == got  # set order does not matter


@pytest.mark.parametrize("change, key", [({"target_modules": ["q_proj", "v_proj"]}, "lora.target_modules"),
                                         ({"lora_alpha": 32}, "lora.lora_alpha"), ({"r": 8}, "lora.r")])
def test_two_lora_configs_give_two_settings_and_the_difference_names_the_key(change, key):
    cfg = TrainConfig()
    old = mf.settings(cfg, {"lora": mf.lora_settings(_lora())})
    new = mf.settings(cfg, {"lora": mf.lora_settings(_lora(**change))})
    assert mf.settings_hash(old) != mf.settings_hash(new)
    assert [line.split(":")[0] for line in mf.differences(old, new)] == [key]


def test_with_lora_reads_the_models_own_config_and_keeps_an_explicit_one():
    class Model:  # what get_peft_model returns keeps the LoraConfig it was given under "default"
        peft_config = {"default": _lora(lora_alpha=8)}

    assert mf.with_lora({"parameters": {}}, Model())["lora"]["lora_alpha"] == 8
    assert mf.with_lora({"lora": {"r": 2}}, Model())["lora"] == {"r": 2}
    assert mf.with_lora(None, object()) == {}  # no adapters: nothing to add


def test_write_then_problems_finds_a_rewritten_file_and_a_wrong_step(tmp_path):
    (tmp_path / "adapter.bin").write_bytes(b"weights")
    (tmp_path / "trainer_state.json").write_text(json.dumps({"global_step": 4}))
    data = mf.write(tmp_path, 4, {"lr": 1})
    (tmp_path / mf.MARKER).write_text("")
    assert set(data["files"]) == {"adapter.bin", "trainer_state.json"} and mf.read(tmp_path)["settings"] == {"lr": 1}
    assert mf.problems(tmp_path, ["adapter.bin"]) == [] and mf.step(tmp_path) == 4
    (tmp_path / "adapter.bin").write_bytes(b"WEIGHTS")  # same size, other content
    assert mf.problems(tmp_path) == ["adapter.bin content differs from its SHA-256 in the manifest (altered)"]
    (tmp_path / "trainer_state.json").write_text(json.dumps({"global_step": 5}))
    assert "trainer_state.json says step 5, the manifest 4" in mf.problems(tmp_path)


def test_problems_without_marker_or_manifest(tmp_path):
    assert mf.problems(tmp_path) == ["no COMPLETE marker (the save did not finish)"]
    (tmp_path / mf.MARKER).write_text("")
    assert mf.problems(tmp_path) == [f"{mf.NAME} missing or unreadable"] and mf.step(tmp_path) is None


def test_differences_say_missing_on_one_side():
    assert mf.differences({"a": 1, "b": 2}, {"a": 1, "c": 3}) == ["b: checkpoint has 2, this run '<missing>'",
                                                                  "c: checkpoint has '<missing>', this run 3"]


def test_package_versions_and_smoke_do_not_refuse_a_resume():
    """A Kaggle image updated between sessions (or smoke toggled) trains the same weights from the checkpoint on."""
    base = {"parameters": {"lora_r": 8, "smoke": False}, "versions": {"torch": "2.6.0", "peft": "0.18.1"}}
    later = {"parameters": {"lora_r": 8, "smoke": True}, "versions": {"torch": "2.7.0", "peft": "0.21.2"}}
    assert mf.settings(run_config=base) == mf.settings(run_config=later) == {"lora_r": 8}
    assert mf.settings(run_config=base) != mf.settings(run_config={**base, "parameters": {"lora_r": 16}})


def test_a_checkpoint_from_before_the_lora_fields_were_retired_still_resumes():
    """Checkpoints saved while TrainConfig still carried lora_r/lora_dropout/use_rslora: lora.* compares them now."""
    before = {"lora_r": 16, "lora_dropout": 0.0, "use_rslora": False, "lora.r": 16, "learning_rate": 0.003}
    now = {"lora.r": 16, "learning_rate": 0.003}
    assert mf.differences(before, now) == []
    assert mf.differences(before, {**now, "lora.r": 8}) == ["lora.r: checkpoint has 16, this run 8"]
