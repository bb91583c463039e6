"""Chunked cross-entropy (nbutils/train/loss.py): the plain loss's value and gradients, without full logits."""

import pytest
import torch
from transformers.loss.loss_utils import ForCausalLMLoss

from nbutils.data import batching, chatformat
from nbutils.train import loss, modeling
from tests import recipe


def _case(batch=3, seq=37, dim=24, vocab=301, seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(batch, seq, dim, generator=g, dtype=torch.float64).float().requires_grad_()
    weight = (torch.randn(vocab, dim, generator=g) * 0.3).requires_grad_()
    labels = torch.randint(0, vocab, (batch, seq), generator=g)
    labels[0, :10] = -100  # a prompt
    labels[1, 25:] = -100  # padding
    labels[2, ::4] = -100
    return hidden, weight, labels


def _grads(fn, hidden, weight):
    hidden.grad = weight.grad = None
    value = fn()
    value.backward()
    return value.detach(), hidden.grad.clone(), weight.grad.clone()


def _rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


@pytest.mark.parametrize("num_items", [None, 200])
@pytest.mark.parametrize("rows", [7, 64, 4096])  # many chunks, a few, one
def test_value_and_gradients_match_the_plain_loss(num_items, rows):
    hidden, weight, labels = _case()
    plain = _grads(lambda: ForCausalLMLoss(hidden @ weight.T, labels, weight.shape[0], num_items_in_batch=num_items),
                   hidden, weight)
    chunked = _grads(lambda: loss.chunked_cross_entropy(hidden, weight, labels, num_items, rows=rows), hidden, weight)
    for p, c in zip(plain, chunked):
        assert _rel(c, p) < 1e-5


def test_frozen_head_and_no_grad_paths():
    hidden, weight, labels = _case()
    weight.requires_grad_(False)
    plain = ForCausalLMLoss(hidden @ weight.T, labels, weight.shape[0])
    plain.backward()
    expected = hidden.grad.clone()
    hidden.grad = None
    loss.chunked_cross_entropy(hidden, weight, labels, rows=16).backward()
    assert _rel(hidden.grad, expected) < 1e-5
    with torch.no_grad():  # evaluation: the value only
        assert loss.chunked_cross_entropy(hidden, weight, labels, rows=16).item() == pytest.approx(plain.item(), rel=1e-5)
    assert torch.isnan(loss.chunked_cross_entropy(hidden, weight, torch.full_like(labels, -100)))  # as the plain mean


def test_packed_batch_through_the_model_matches_the_plain_loss(embedded_dir):
    """Embedded model + LoRA, a packed batch with the block-diagonal mask: the hook's hidden states give the
    model's own loss and the same LoRA gradients, and lm_head computes no logits."""
    tok = chatformat.load_tokenizer("embedded")
    model = modeling.attach_lora(modeling.load_base("embedded", "fp32"), recipe.lora(4), gradient_checkpointing=False)
    for name, p in model.named_parameters():
        if "lora_B" in name:
            p.data.normal_(0, 0.02, generator=torch.Generator().manual_seed(1))
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in ("the city is oslo .", "the pet is a cat . yes",
                                                                   "rice", "the food is rice . the city is rome")]
    rows = batching.pack([{"input_ids": i, "labels": i} for i in ids], 24)
    batch = batching.make_collator({"strategy": "packed"}, tok.pad_token_id)(rows)
    assert batch["attention_mask"].dim() == 4 and len(rows) >= 2
    labels = batch.pop("labels")
    n = int((labels[:, 1:] != -100).sum())

    def lora_grads(value):
        model.zero_grad()
        value.backward()
        return value.detach(), [p.grad.clone() for p in model.parameters() if p.requires_grad]

    plain_value, plain = lora_grads(model(**batch, labels=labels, num_items_in_batch=n).loss)
    with loss.lm_head_input(model) as (kept, head):
        out = model(**batch)
        value, chunked = lora_grads(loss.chunked_cross_entropy(kept["hidden"], head.weight, labels, n, rows=5))
    assert out.logits.shape[1] == 0
    assert value.item() == pytest.approx(plain_value.item(), rel=1e-5)
    assert all(_rel(c, p) < 1e-5 for c, p in zip(chunked, plain))
    assert model(**batch).logits.shape[1] == batch["input_ids"].shape[1]  # the hook is gone after the block


def test_choice_of_loss(monkeypatch):
    monkeypatch.setattr(loss, "liger_available", lambda cuda=None: False)
    assert loss.choose("auto") == loss.choose(True) == "chunked" and loss.choose(False) == "plain"
    with pytest.raises(ValueError, match="liger-kernel"):
        loss.choose("liger")
    with pytest.raises(ValueError, match="chunked_loss='yes'"):
        loss.choose("yes")
    monkeypatch.setattr(loss, "liger_available", lambda cuda=None: True)
    assert loss.choose("auto") == "liger" and loss.choose("chunked") == "chunked"
    # where the plan says the run fits with the whole logits, auto takes the plain loss: the fastest there
    assert loss.choose("auto", plain_fits=True) == "plain" and loss.choose("auto", plain_fits=False) == "liger"
    assert loss.choose(True, plain_fits=True) == "liger" and loss.choose("chunked", plain_fits=True) == "chunked"


def test_the_trainer_class_follows_the_loss():
    from transformers import Trainer

    plain = loss.trainer_class("plain")
    assert issubclass(plain, Trainer) and not getattr(plain, "chunked_loss", False)
    chunked = loss.trainer_class("chunked")
    assert issubclass(chunked, Trainer) and chunked.chunked_loss


def test_models_whose_logits_are_not_lm_head_output_keep_the_plain_loss(monkeypatch):
    from types import SimpleNamespace

    monkeypatch.setattr(loss, "liger_available", lambda cuda=None: False)
    gemma = SimpleNamespace(final_logit_softcapping=30.0)
    assert loss.choose("auto", model_config=gemma) == "plain"
    with pytest.raises(ValueError, match="final_logit_softcapping=30.0"):
        loss.choose("chunked", model_config=gemma)
    assert loss.choose("auto", model_config=SimpleNamespace(final_logit_softcapping=None, logit_scale=1.0)) == "chunked"
    assert loss.choose("auto", head=torch.nn.Embedding(3, 2)) == "plain"
    assert loss.choose("auto", head=torch.nn.Linear(2, 3)) == "chunked"


def test_a_multimodal_models_soft_capping_is_read_from_its_language_model():
    """A multimodal config keeps the language model's fields in its text_config: the soft-capping there decides."""
    from types import SimpleNamespace

    inner = SimpleNamespace(final_logit_softcapping=30.0)
    outer = SimpleNamespace(get_text_config=lambda: inner)
    assert "final_logit_softcapping=30.0" in loss.unsupported(outer)
    assert loss.without_whole_logits(outer) == "plain" and loss.without_whole_logits(SimpleNamespace()) == "chunked"
