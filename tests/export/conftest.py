"""Shared fixtures of the export tests: a token-shaped secret, a crafted 03 report, a trained adapter."""

import json

import pytest

from nbutils.train import checkpoints

TOKEN = "hf_" + "Q7xw2LmZk9RtYp4VbN8cDe5FgH3jK6sA1u"  # shaped like a real one; not a real token


@pytest.fixture(scope="session")
def hf_token():
    """A string shaped like a Hugging Face token (not a real one): what must never reach a file or the output."""
    return TOKEN


def _report(base=0.1, tuned=0.8, degenerate=0.0):
    m = lambda b, t: {"base": {"mean": b, "ci": [b, b]}, "tuned": {"mean": t, "ci": [t, t]},  # noqa: E731
                      "win_tie_loss": {"win": 1, "tie": 0, "loss": 0}}
    return {"n_samples": 10, "base": {"task_metric": base, "degenerate_rate": 0.1},
            "tuned": {"task_metric": tuned, "degenerate_rate": degenerate},
            "metrics": {"primary": "exact_match", "metrics": {"exact_match": m(base, tuned), "rouge_l": m(0.5, 0.4)}}}


@pytest.fixture(scope="session")
def make_report():
    """make_report(base=0.1, tuned=0.8, degenerate=0.0) -> an eval_report.json dict as 03 writes it."""
    return _report


@pytest.fixture(scope="session")
def trained_adapter(tmp_path_factory, embedded_dir):
    """A LoRA adapter on the embedded base with non-zero weights (peft's default init would be a no-op)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from nbutils import embedded
    from nbutils.data.chatformat import load_tokenizer

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(embedded.resolve_model("embedded"), dtype=torch.float32)
    model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", init_lora_weights=False))
    out = tmp_path_factory.mktemp("adapter") / "checkpoint"
    model.save_pretrained(out)
    load_tokenizer("embedded").save_pretrained(out)
    (out / "run_config.json").write_text(json.dumps({"parameters": {"lora_r": 8, "hub_token": TOKEN}}))
    (out / "trainer_state.json").write_text("{}")
    checkpoints.mark_complete(out)
    return out
