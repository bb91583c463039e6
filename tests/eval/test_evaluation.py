"""Evaluation on the embedded default: prompts and references, guarded generation, the token-weighted eval loss,
the training-time probe, the per-sample rows and the report file."""

import json
from types import SimpleNamespace

import pytest

from nbutils.chain import MARKERS
from nbutils.eval import evaluation


@pytest.fixture(scope="module")
def model(embedded_dir):
    from transformers import AutoModelForCausalLM

    from nbutils import embedded

    return AutoModelForCausalLM.from_pretrained(embedded.resolve_model("embedded")).eval()


@pytest.fixture(scope="module")
def eval_ds(prepared_data):
    from nbutils.data import splits

    return splits.load_split(prepared_data, "eval")


def test_exact_match_ignores_case_and_spacing_only():
    assert evaluation.exact_match(["  Paris ", "a  b", "cat"], ["paris", "A b", "cats"]) == pytest.approx(2 / 3)
    assert evaluation.exact_match([], []) == 0.0


def test_prompts_end_with_the_generation_prompt_and_references_are_the_answers(eval_ds, tok):
    prompts, refs = evaluation.prompts_and_references(eval_ds, tok, limit=3)
    assert len(prompts) == len(refs) == 3
    for prompt, ref, row in zip(prompts, refs, eval_ds):
        assert ref == row["messages"][-1]["content"]
        assert prompt == tok.apply_chat_template(row["messages"][:-1], tokenize=False, add_generation_prompt=True)
    assert len(evaluation.prompts_and_references(eval_ds, tok)[0]) == len(eval_ds)


def test_generate_refuses_an_unknown_guard_before_any_work():
    with pytest.raises(ValueError, match="guard='strict' is not one of off, flag, abort"):
        evaluation.generate(None, None, ["x"], guard="strict")


@pytest.mark.parametrize("guard", ["off", "flag"])
def test_generate_gives_one_record_per_prompt_and_restores_the_padding_side(model, tok, eval_ds, guard):
    prompts, _ = evaluation.prompts_and_references(eval_ds, tok, limit=3)
    side = tok.padding_side
    outs = evaluation.generate(model, tok, prompts, max_new_tokens=8, batch_size=2, guard=guard)
    assert tok.padding_side == side and len(outs) == 3
    for o in outs:
        assert set(o) == {"text", "tokens", "eos", "verdict", "guard_stopped", "stop_token"}
        assert isinstance(o["text"], str) and isinstance(o["eos"], bool)
        assert guard == "flag" or not o["guard_stopped"]
    again = evaluation.generate(model, tok, prompts, max_new_tokens=8, batch_size=3, guard=guard)
    assert [o["text"] for o in again] == [o["text"] for o in outs]  # greedy: the batch size changes nothing
    # Every new token counts unless a stop token or the guard ended the row first (the stop token not counted);
    # the embedded model stops after 5-6 tokens here, so 3 new tokens end no row early.
    short = evaluation.generate(model, tok, prompts, max_new_tokens=3, batch_size=2, guard=guard)
    assert [o["tokens"] for o in short] == [3, 3, 3] and not any(o["eos"] for o in short)
    for o, n in [(o, 8) for o in outs] + [(o, 3) for o in short]:
        assert o["tokens"] < n if o["eos"] or o["guard_stopped"] else o["tokens"] == n


def test_score_names_the_primary_metric_beside_exact_match(model, tok, eval_ds):
    small = eval_ds.select(range(3))
    prompts, refs = evaluation.prompts_and_references(small, tok)
    entry, outs = evaluation.score(model, tok, small, prompts, refs, 4, guard="flag", metrics="rouge_l,exact_match")
    from nbutils.eval import metrics

    want = sum(metrics.rouge_l([o["text"] for o in outs], refs)) / 3
    assert entry["primary_metric"] == {"name": "rouge_l", "value": pytest.approx(want)}
    assert entry["task_metric"] == evaluation.exact_match([o["text"] for o in outs], refs)  # 04's gate reads it


def test_eval_loss_is_a_mean_per_target_token_whatever_the_batch(model, tok, eval_ds):
    small = eval_ds.select(range(4))
    one_by_one = evaluation.eval_loss(model, small, tok.pad_token_id, batch_size=1)
    assert evaluation.eval_loss(model, small, tok.pad_token_id, batch_size=4) == pytest.approx(one_by_one, rel=1e-4)
    assert one_by_one > 0


def test_probe_says_degenerate_above_the_threshold_and_restores_training_mode(model, tok, eval_ds, capsys):
    prompts, _ = evaluation.prompts_and_references(eval_ds, tok, limit=2)
    model.train()
    try:
        assert evaluation.probe(tok, prompts, 4, threshold=1.0)(model) is False  # never above 100%
        assert model.training
    finally:
        model.eval()
    assert evaluation.probe(tok, prompts, 4, threshold=-1.0)(model) is True and not model.training
    assert capsys.readouterr().out.count("[probe] ") == 2


def test_sample_rows_two_per_prompt_with_the_verdict_spelled_out():
    ok = {"text": "City", "eos": True, "tokens": 2, "verdict": SimpleNamespace(degenerate=False, reasons=[])}
    bad = {"text": "a a a a", "eos": False, "tokens": 8, "verdict": SimpleNamespace(degenerate=True, reasons=["loop", "soup"])}
    rows = evaluation.sample_rows(["p"], ["city"], [bad], [ok])
    assert [(r["model"], r["verdict"], r["correct"]) for r in rows] == [("base", "degenerate: loop, soup", False),
                                                                       ("tuned", "ok", True)]


def test_report_is_written_under_the_chains_marker_naming_its_checkpoint(tmp_path):
    from nbutils.train import checkpoints, reports

    ckpt = tmp_path / "checkpoint"
    ckpt.mkdir()
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        (ckpt / name).write_text(name)
    checkpoints.mark_complete(ckpt, 7)
    path = evaluation.write_report(tmp_path, {"n_samples": 2, "verdict": SimpleNamespace(degenerate=False)}, ckpt)
    report = json.loads(path.read_text())
    assert path == tmp_path / MARKERS["eval"] and report["n_samples"] == 2 and report["written_by"] == "03_eval"
    assert report["checkpoint"] == {"dir": str(ckpt), "step": 7, "content_hash": reports.content_hash(ckpt)}
    assert not list(tmp_path.glob("*.tmp-*"))
