"""QLoRA training: right on a T4, validated first, resumable, and never losing the adapter."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nbutils import checkpoints, data, modeling, training
from nbutils.preflight import Accelerator, choose_precision
from nbutils.trainconfig import ConfigError, TrainConfig, validate

ROOT = Path(__file__).resolve().parent.parent
T4 = Accelerator(0, "Tesla T4", (7, 5), 15.0)


def _train(prepared, out, cfg, **kw):
    tok = modeling.load_tokenizer("embedded")
    model = modeling.attach_lora(modeling.load_base("embedded", "fp32", True), r=8, seed=cfg.seed)
    train_ds, eval_ds = data.load_split(prepared, "train"), data.load_split(prepared, "eval")
    result = training.train(model, tok, train_ds, eval_ds, cfg, out, run_config={"test": True}, progress="log", **kw)
    return model, tok, result


def _cfg(**kw):
    base = dict(max_steps=40, eval_steps=10, save_steps=10, logging_steps=5, learning_rate=3e-3, warmup_steps=0)
    return TrainConfig(**{**base, **kw})


@pytest.mark.parametrize("kw, message", [
    (dict(eval_strategy="steps", save_strategy="epoch"), "use the same strategy for both"),
    (dict(eval_steps=20, save_steps=30), "save_steps=30 is not a multiple of eval_steps=20"),
    (dict(load_best_model_at_end=True, eval_strategy="no"), "load_best_model_at_end=True needs"),
    (dict(precision="bf16"), "bf16 on a GPU of compute capability 7.5"),
    (dict(per_device_batch_size=64, grad_accum=8), "larger than the 400 training examples"),
    (dict(max_steps=100000), "epochs of 400 examples"),
    (dict(max_steps=2), "fewer than 5 optimizer steps"),
    (dict(optim="paged_adamw_8bit", resume=True), "paged optimizers"),
    (dict(max_seq_len=4096), "above the model's max_position_embeddings=256"),
    (dict(max_seq_len=512), "above the 256 the data was prepared for"),
])
def test_each_config_mistake_has_its_message_before_loading(kw, message, monkeypatch):
    import transformers

    def no_load(*a, **k):
        raise AssertionError("a model was loaded before validation")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_load)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        validate(TrainConfig(**kw), n_train=400, gpu_capability=(7, 5), model_max_positions=256, data_max_seq_len=256)


def test_fp16_on_cpu_is_refused():
    with pytest.raises(ConfigError, match="mixed precision needs a GPU"):
        validate(TrainConfig(precision="fp16"), n_train=400, gpu_capability=None)


def test_notebook_validates_before_loading():
    src = (ROOT / "notebooks" / "02_train_qlora.py").read_text()
    assert src.index("trainconfig.validate(") < src.index("modeling.load_base(")


def test_t4_path_is_fp16_compute_with_fp32_trainables():
    precision = choose_precision([T4])
    assert precision.dtype == "fp16"
    model = modeling.attach_lora(modeling.load_base("embedded", precision.dtype, True), r=8)
    assert modeling.trainable_summary(model)["trainable_dtypes"] == ["float32"]
    assert model.base_model.model.config.quantization_config.bnb_4bit_compute_dtype in ("float16", "torch.float16") or \
        str(model.base_model.model.config.quantization_config.bnb_4bit_compute_dtype).endswith("float16")


def test_time_budget_stop_then_resume_matches_uninterrupted(prepared_data, tmp_path):
    _, _, full = _train(prepared_data, tmp_path / "full", _cfg())
    ticks = iter(range(10**6))
    # A fake clock: one "second" per call; the budget runs out a little after step 20.
    _, _, stopped = _train(prepared_data, tmp_path / "cut", _cfg(time_budget_min=0.4), clock=lambda: next(ticks),
                           session_start=0)
    assert stopped["stopped_reason"] == "time_budget" and stopped["global_step"] < 40
    assert checkpoints.trainer_checkpoints(tmp_path / "cut" / "trainer")[-1].name == f"checkpoint-{stopped['global_step']}"
    _, _, resumed = _train(prepared_data, tmp_path / "cut", _cfg())
    assert resumed["resumed_from_step"] == stopped["global_step"]
    assert resumed["global_step"] == full["global_step"] == 40
    assert resumed["eval_loss"] == pytest.approx(full["eval_loss"], rel=0.05, abs=2e-3)


KILL_SCRIPT = """
import sys
from pathlib import Path
sys.path.insert(0, {root!r})
from tests.test_training import _train, _cfg
_train(Path({data!r}), Path({out!r}), _cfg(max_steps=30))
"""


def test_sigkill_mid_save_keeps_previous_checkpoint_and_resume_works(prepared_data, tmp_path):
    script = KILL_SCRIPT.format(root=str(ROOT), data=str(prepared_data), out=str(tmp_path / "run"))
    proc = subprocess.run([sys.executable, "-c", script], env={**os.environ, "NBUTILS_TEST_KILL_IN_SAVE": "20"},
                          capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr[-2000:]
    trainer_dir = tmp_path / "run" / "trainer"
    assert (trainer_dir / "checkpoint-20").exists() and not checkpoints.is_complete(trainer_dir / "checkpoint-20")
    assert [p.name for p in checkpoints.trainer_checkpoints(trainer_dir)] == ["checkpoint-10"]
    _, _, resumed = _train(prepared_data, tmp_path / "run", _cfg(max_steps=30))
    assert resumed["resumed_from_step"] == 10 and resumed["global_step"] == 30


def test_verifier_names_missing_tokenizer_files(prepared_data, tmp_path):
    model, tok, result = _train(prepared_data, tmp_path, _cfg(max_steps=10, eval_steps=5, save_steps=5))
    ckpt = training.save_checkpoint(model, tok, tmp_path, {"p": 1}, result)
    assert checkpoints.verify(ckpt, "embedded")["ok"]
    (ckpt / "tokenizer.json").unlink()
    (ckpt / "tokenizer_config.json").unlink()
    report = checkpoints.verify(ckpt, "embedded")
    assert not report["ok"] and report["missing"] == ["tokenizer_config.json", "tokenizer.json"]
    summary = training.write_summary(tmp_path, result, _cfg(), ckpt)
    assert summary["checkpoint_complete"] is False and summary["checkpoint_dir"] == "checkpoint"


def test_nan_stops_and_keeps_last_good_checkpoint(prepared_data, tmp_path):
    from nbutils.callbacks import NanGuard

    model, tok, result = _train(prepared_data, tmp_path, _cfg(max_steps=40, learning_rate=1e6, logging_steps=1))
    assert result["stopped_reason"] == "nan" or math.isfinite(result["train_loss"])  # lr 1e6 blows up on CPU
    if result["stopped_reason"] == "nan":
        ckpt = training.save_checkpoint(model, tok, tmp_path, {}, result)
        assert checkpoints.is_complete(ckpt) or not ckpt.exists()
    from nbutils.callbacks import StopReason

    stop = StopReason()

    class Control:
        should_training_stop = False
        should_save = True

    class State:
        global_step = 7

    control = Control()
    NanGuard(stop).on_log(None, State(), control, logs={"loss": float("nan")})
    assert stop.reason == "nan" and control.should_training_stop and not control.should_save


def test_probe_hook_stops_after_two_degenerate_evaluations(prepared_data, tmp_path):
    calls = []

    def probe(model):
        calls.append(1)
        return True

    _, _, result = _train(prepared_data, tmp_path, _cfg(max_steps=40), probe=probe)
    assert result["stopped_reason"] == "degenerate" and result["global_step"] == 20
    assert len(calls) >= 2  # two evaluations in a row (the final evaluate() probes once more)
    assert checkpoints.trainer_checkpoints(tmp_path / "trainer")[-1].name == "checkpoint-20"


def test_loss_is_normalized_by_target_tokens_across_accumulation(tmp_path):
    from datasets import Dataset

    tok = modeling.load_tokenizer("embedded")
    ids = tok("the city is oslo . the pet is cat . the food is rice .", add_special_tokens=False)["input_ids"]
    # Four examples with very different numbers of target tokens: a per-micro-batch mean would weigh them unequally.
    rows = []
    for n_targets in (1, 12, 2, 9):
        labels = [-100] * (len(ids) - n_targets) + ids[-n_targets:]
        rows.append({"input_ids": ids, "labels": labels, "length": len(ids), "messages": []})
    ds = Dataset.from_list(rows)
    weights = []
    for bs, accum in ((4, 1), (2, 2)):
        model = modeling.attach_lora(modeling.load_base("embedded", "fp32", False), r=4, seed=0,
                                     gradient_checkpointing=False)
        for name, p in model.named_parameters():  # make B non-zero so A gets a gradient too
            if "lora_B" in name:
                p.data.normal_(0, 0.01, generator=__import__("torch").Generator().manual_seed(1))
        cfg = TrainConfig(max_steps=1, per_device_batch_size=bs, grad_accum=accum, learning_rate=1.0, warmup_steps=0,
                          eval_strategy="no", save_strategy="no", optim="sgd", resume=False)
        training.train(model, tok, ds, ds, cfg, tmp_path / f"{bs}x{accum}")
        weights.append({n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad})
    for name in weights[0]:
        assert weights[0][name].allclose(weights[1][name], atol=1e-5), name


def test_summary_layout(prepared_data, tmp_path):
    model, tok, result = _train(prepared_data, tmp_path, _cfg(max_steps=20))
    ckpt = training.save_checkpoint(model, tok, tmp_path, {"p": 1}, result)
    summary = training.write_summary(tmp_path, result, _cfg(), ckpt)
    for key in ("global_step", "stopped_reason", "resumed_from_step", "train_loss", "eval_loss", "checkpoint_dir",
                "checkpoint_complete"):
        assert key in summary
    assert summary["stopped_reason"] == "max_steps" and summary["checkpoint_complete"] is True
    assert (tmp_path / "learning_curves.png").exists()
    assert json.loads((ckpt / "run_config.json").read_text()) == {"p": 1}


def test_memory_plan_on_a_t4_recommends_a_mode():
    from types import SimpleNamespace

    from nbutils import memory

    llama8b = SimpleNamespace(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                              num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=False)
    p = memory.plan(llama8b, seq_len=2048, batch=2, lora_r=16, gpu_memory_gb=15.0, gpu_count=2)
    assert 5 < p["estimate_gb"] < 15 and p["fits"] and p["largest_batch_that_fits"] >= 2
    assert p["recommended_mode"].startswith("ddp")
    big = memory.plan(llama8b, seq_len=2048, batch=16, lora_r=16, gpu_memory_gb=15.0, gpu_count=2)
    assert not big["fits"] and "estimated peak" in memory.table(big)
