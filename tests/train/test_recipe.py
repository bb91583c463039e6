"""The run's recipe: named once upstream, recorded from what 02 built, loaded as recorded, contradictions refused."""

import json

import pytest

from nbutils.train import recipe


def _checkpoint(tmp_path, **run_config):
    folder = tmp_path / "checkpoint"
    folder.mkdir(parents=True)
    (folder / "run_config.json").write_text(json.dumps({"base_model": "Qwen/Qwen2.5-0.5B-Instruct", "precision": "fp16",
                                                        "quantization": {"bnb_4bit_quant_type": "nf4"}, **run_config}))
    return folder


def test_03_and_04_take_the_checkpoints_model_and_4bit_config(tmp_path):
    run = recipe.from_checkpoint(_checkpoint(tmp_path), machine_precision="fp16")
    assert run.base_model == "Qwen/Qwen2.5-0.5B-Instruct" and run.quantization == {"bnb_4bit_quant_type": "nf4"}
    assert run.precision == run.trained_precision == "fp16"


@pytest.mark.parametrize("trained, machine, expected", [
    ("fp16", "fp32", "fp32"),  # a T4-trained adapter evaluated on a CPU
    ("fp16", "bf16", "fp16"),  # on an A100: as trained
    ("bf16", "fp16", "fp16"),  # an A100-trained adapter on a T4: its bf16 is emulated
    ("fp32", "fp16", "fp32"),
])
def test_precision_is_the_trained_one_where_this_machine_has_it(tmp_path, trained, machine, expected):
    assert recipe.from_checkpoint(_checkpoint(tmp_path, precision=trained), machine_precision=machine).precision == expected


def test_another_base_model_is_refused_naming_both(tmp_path):
    with pytest.raises(recipe.UpstreamMismatch) as err:
        recipe.from_checkpoint(_checkpoint(tmp_path), base_model="embedded")
    msg = str(err.value)
    assert "base_model='embedded' here" in msg and "trained on 'Qwen/Qwen2.5-0.5B-Instruct'" in msg
    assert recipe.from_checkpoint(_checkpoint(tmp_path / "b"), base_model="Qwen/Qwen2.5-0.5B-Instruct").base_model


def test_02_takes_01s_model_or_one_with_the_same_tokenizer():
    manifest = {"base_model": "Qwen/Qwen2.5-0.5B-Instruct", "tokenizer_fingerprint": "abc"}
    assert recipe.base_model_for_training(manifest, "") == ("Qwen/Qwen2.5-0.5B-Instruct", "from 01's manifest")
    same = recipe.base_model_for_training(manifest, "/kaggle/input/qwen", tokenizer_fingerprint=lambda name: "abc")
    assert same[0] == "/kaggle/input/qwen" and "its tokenizer is the one 01 used" in same[1]
    with pytest.raises(recipe.UpstreamMismatch, match=r"base_model='other/model' here, but 01 prepared the data with "
                                                      r"'Qwen/Qwen2.5-0.5B-Instruct'"):
        recipe.base_model_for_training(manifest, "other/model", tokenizer_fingerprint=lambda name: "xyz")


def test_a_damaged_run_config_names_the_file(tmp_path):
    folder = tmp_path / "checkpoint"
    folder.mkdir()
    (folder / "run_config.json").write_text("{not json")
    with pytest.raises(recipe.UpstreamMismatch, match=r"run_config.json cannot be read .*re-run 02_train_qlora"):
        recipe.from_checkpoint(folder)


@pytest.mark.parametrize("precision, machine, error", [("float16", "fp16", "not one of auto, fp32, fp16, bf16"),
                                                       ("bf16", "fp16", "GPU without bf16 .* use 'fp16' or 'auto'")])
def test_a_precision_this_run_cannot_use_is_refused_before_the_model_loads(tmp_path, precision, machine, error):
    with pytest.raises(ValueError, match=error):
        recipe.from_checkpoint(_checkpoint(tmp_path), precision=precision, machine_precision=machine)


def test_01s_output_must_be_the_data_the_adapter_trained_on(tmp_path):
    """Another run of 01 in the same folder (another model, other records): refused naming both hashes."""
    from nbutils.chain import MARKERS

    ckpt = _checkpoint(tmp_path, data_manifest_hash="abc123")
    data = tmp_path / "data_prep"
    data.mkdir()
    (data / MARKERS["data_prep"]).write_text(json.dumps({"content_hash": "abc123"}))
    assert recipe.from_checkpoint(ckpt, machine_precision="fp16", data_dir=data).base_model
    (data / MARKERS["data_prep"]).write_text(json.dumps({"content_hash": "fff999"}))
    with pytest.raises(recipe.UpstreamMismatch, match=r"holds other data \(content hash fff999\) .* \(abc123"):
        recipe.from_checkpoint(ckpt, machine_precision="fp16", data_dir=data)


def test_03_04_05_read_the_tokenizer_02_saved_and_refuse_one_01_did_not_use(tmp_path):
    """The checkpoint's tokenizer comes back prepared as 01 prepared it (same fingerprint, pad token); one whose
    template changed after 01 (a model updated on the hub between 01 and 02) is refused, naming what to re-run."""
    from nbutils.chain import MARKERS
    from nbutils.data import chatformat
    from tests.twins import families

    tok = chatformat.load_tokenizer(str(families.ensure("llama-3.2-instruct")))
    data = tmp_path / "data_prep"
    data.mkdir()
    (data / MARKERS["data_prep"]).write_text(json.dumps({"tokenizer_fingerprint": chatformat.fingerprint(tok)}))
    ckpt = tmp_path / "checkpoint"
    chatformat.save_tokenizer(tok, ckpt)
    back = recipe.trained_tokenizer(ckpt, data)
    assert chatformat.fingerprint(back) == chatformat.fingerprint(tok) and back.pad_token == tok.pad_token
    tok.chat_template = tok.chat_template.replace("Cutting Knowledge Date", "Knowledge cutoff")
    chatformat.save_tokenizer(tok, ckpt)
    with pytest.raises(recipe.UpstreamMismatch, match=r"tokenizer of the checkpoint .* is not the one 01 prepared the "
                                                      r"data with .*Re-run 01_data_prep with this model, then 02"):
        recipe.trained_tokenizer(ckpt, data)
    assert recipe.trained_tokenizer(ckpt).chat_template == tok.chat_template  # without 01's manifest: no check
    recipe.same_tokenizer(tok, {}, "x")  # a manifest without a fingerprint (an older 01) checks nothing
