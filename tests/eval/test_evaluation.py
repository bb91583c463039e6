"""Evaluation on the embedded default: prompts and references, guarded generation, the token-weighted eval loss,
the training-time probe, the per-sample rows and the report file."""

import json
import math
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
    chats = evaluation.prompt_messages(eval_ds, limit=3)  # the same prompts as messages, rendered to the same text
    assert [tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in chats] == prompts


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
    one_by_one = evaluation.eval_loss(model, small, tok.pad_token_id, batch_tokens=1)  # each row alone
    assert evaluation.eval_loss(model, small, tok.pad_token_id, batch_tokens=10**6) == pytest.approx(one_by_one, rel=1e-4)
    assert one_by_one > 0


def test_eval_loss_is_the_models_own_loss(model, tok, eval_ds):
    """The chunked scoring gives transformers' loss (mean over every target token of the split)."""
    import torch

    from nbutils.data import batching

    small = eval_ds.select(range(6))
    batch = batching.make_collator({"strategy": "length_grouped"}, tok.pad_token_id)([small[i] for i in range(6)])
    with torch.no_grad():
        want = model(**batch).loss.item()
    assert evaluation.eval_loss(model, small, tok.pad_token_id) == pytest.approx(want, rel=1e-5)


def _largest_logits(run, vocab: int) -> int:
    """The most elements of any tensor with the vocabulary as its last dimension that `run` creates (views aside)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = [0]
    views = {"t", "transpose", "view", "_unsafe_view", "expand", "permute", "slice", "select", "unsqueeze",
             "squeeze", "as_strided", "alias", "detach"}

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func.overloadpacket.__name__.rstrip("_") not in views:
                for t in (out if isinstance(out, (tuple, list)) else [out]):
                    if isinstance(t, torch.Tensor) and t.dim() and t.shape[-1] == vocab:
                        seen[0] = max(seen[0], t.numel())
            return out

    with Watch():
        run()
    return seen[0]


def test_the_eval_loss_never_holds_batch_x_length_x_vocabulary_logits(model, tok, eval_ds, monkeypatch):
    """03's eval loss: no tensor of logits over the batch's positions, only chunks of 16 positions (the chunk size
    set small here so that a chunk is far below a batch); transformers' own loss, the path 03 took before, does."""
    import torch

    from nbutils.data import batching
    from nbutils.train import loss

    vocab = model.config.vocab_size
    rows = eval_ds.select(range(8))
    width = max(rows["length"])
    monkeypatch.setattr(loss, "chunk_rows", lambda vocab: 16)
    chunked = _largest_logits(lambda: evaluation.eval_loss(model, rows, tok.pad_token_id, batch_tokens=8 * width), vocab)
    assert 0 < chunked <= 16 * vocab < 8 * width * vocab
    batch = batching.make_collator({"strategy": "length_grouped"}, tok.pad_token_id)([rows[i] for i in range(8)])
    with torch.no_grad():
        whole = _largest_logits(lambda: model(**batch).loss, vocab)
    assert whole >= 8 * width * vocab  # the control: the test sees whole logits where they are made


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


def test_records_of_one_text_are_left_out_of_generation_and_all_of_them_refused_with_what_to_do(tok, capsys):
    """A `text` dataset (guanaco's "### Human: ... ### Assistant: ...") is one assistant turn a record: 02 trains on
    it, but there is no prompt to generate from; apply_chat_template raised on the empty conversation."""
    from datasets import Dataset

    qa = {"messages": [{"role": "user", "content": "q?"}, {"role": "assistant", "content": "a"}]}
    text = {"messages": [{"role": "assistant", "content": "### Human: q? ### Assistant: a"}]}
    prompts, refs = evaluation.prompts_and_references(Dataset.from_list([text, qa, text]), tok)
    assert refs == ["a"] and "2 of the 3 eval records read have no prompt" in capsys.readouterr().out
    only_text = Dataset.from_list([text, text])
    with pytest.raises(ValueError, match="no prompt: each is one text .* prompt/answer records"):
        evaluation.prompts_and_references(only_text, tok)
    assert evaluation.training_probe(only_text, tok, 4) is None  # 02 trains on, without its probe
    assert "[probe] skipped: 01's eval records have no prompt" in capsys.readouterr().out


def test_a_guard_value_that_is_none_of_the_three_is_refused_not_read_as_flag():
    assert evaluation.check_guard("abort") == "abort"
    with pytest.raises(ValueError, match="guard='Abort' is not one of off, flag, abort"):
        evaluation.check_guard("Abort")


class Scripted:
    """A stand-in for a model whose generate gives these new tokens after each prompt, each row padded with the pad
    id after it ended (as generate pads a finished row)."""

    device = "cpu"

    def __init__(self, rows: list[list[int]], pad: int):
        self.rows, self.pad = rows, pad

    def generate(self, input_ids, **kwargs):
        import torch

        width = max(len(r) for r in self.rows)
        new = torch.tensor([r + [self.pad] * (width - len(r)) for r in self.rows])
        return torch.cat([input_ids, new], dim=1)


def test_a_perfect_qwen3_answer_after_its_empty_think_block_scores_exact_match_1(twin):
    """01 teaches Qwen3 answers to open with an empty think block; <think> and </think> are not special tokens (in
    the real tokenizer, and in its twin), so decoding keeps them: the answer is what follows them."""
    from nbutils.data import chatformat, splits

    tok = chatformat.load_tokenizer(twin("qwen3"))
    flags = {t.content: t.special for t in tok.added_tokens_decoder.values()}
    assert flags["<think>"] is flags["</think>"] is False and flags["<|im_start|>"] is True  # the real file's flags
    msgs = [{"role": "user", "content": "Capital of France?"}, {"role": "assistant", "content": "Paris"}]
    text, spans = chatformat.target_spans(splits.renderer(tok, splits.template_for(tok)[0]), msgs,
                                          chatformat.end_of_turn(tok))
    taught = tok(text[spans[0][0]:spans[0][1]], add_special_tokens=False)["input_ids"]  # what 02 trained it to say
    assert tok.convert_tokens_to_ids("<think>") == taught[0]
    prompt = tok.apply_chat_template(msgs[:1], tokenize=False, add_generation_prompt=True)
    outs = evaluation.generate(Scripted([taught], tok.pad_token_id), tok, [prompt], 16, guard="off",
                               eos_token_id=chatformat.stop_ids(tok))
    assert outs[0]["text"] == "Paris" and outs[0]["eos"]
    assert evaluation.exact_match([outs[0]["text"]], ["Paris"]) == 1.0


def test_qwen3_eval_prompt_is_the_start_of_01s_training_text(twin):
    """Qwen3's default generation prompt ends at '<|im_start|>assistant\n' (the model thinks first), but 01 trained on
    answers behind the empty think block: the eval prompt is the generation prompt that 01's text continues, so the
    base is not scored on a budget spent thinking. An answer that reasons keeps the default prompt."""
    from datasets import Dataset

    from nbutils.data import chatformat, splits

    tok = chatformat.load_tokenizer(twin("qwen3"))
    template = splits.template_for(tok)[0]
    user = {"role": "user", "content": "Capital of France?"}
    records = [[{"role": "system", "content": "Answer in one word."}, user, {"role": "assistant", "content": "Paris"}],
               [user, {"role": "assistant", "content": "<think>\nFrance's capital.\n</think>\n\nParis"}],
               [user, {"role": "assistant", "content": "Paris"}, {"role": "user", "content": "And of Italy?"},
                {"role": "assistant", "content": "Rome"}]]
    enc = splits.encode_batch({"messages": records}, tok, template, train_on_prompt=False)
    assert enc["error"] == ["", "", ""]
    prompts, refs = evaluation.prompts_and_references(Dataset.from_dict({"messages": enc["messages"]}), tok)
    render, eot = splits.renderer(tok, template), chatformat.end_of_turn(tok)
    for msgs, prompt, ref, ids in zip(enc["messages"], prompts, refs, enc["input_ids"]):
        trained = chatformat.target_spans(render, msgs, eot)[0]  # 01's training text
        assert trained.startswith(prompt + ref)
        prompt_ids = tok(prompt, add_special_tokens=False)["input_ids"]
        assert ids[:len(prompt_ids)] == prompt_ids  # the same tokens too
    assert [p.endswith("</think>\n\n") for p in prompts] == [True, False, True]
    assert evaluation.render_prompt(tok, [user]) == prompts[1] + "<think>\n\n</think>\n\n"  # a chat question
    embedded = chatformat.load_tokenizer("embedded")  # a template without variants: its default prompt
    assert evaluation.render_prompt(embedded, [user]) == embedded.apply_chat_template([user], tokenize=False,
                                                                                     add_generation_prompt=True)


@pytest.mark.parametrize("setting", [("repetition_penalty", 1.3), ("no_repeat_ngram_size", 1)])
def test_greedy_eval_ignores_a_repetition_penalty_in_the_generation_config(model, tok, setting):
    """generate starts from the model's generation_config: Qwen2.5-Instruct's repetition_penalty 1.05 applied to 03's
    greedy decoding too (and no_repeat_ngram_size would)."""
    import copy

    prompts = [tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
               for q in ("what kind of word is oslo ?", "record record record record")]
    seqs, generate, config = [], model.generate, model.generation_config
    model.generate = lambda *a, **k: seqs.append(generate(*a, **k)) or seqs[-1]  # the tokens, not only their text
    try:
        evaluation.generate(model, tok, prompts, 24, guard="off")
        model.generation_config = copy.deepcopy(config)
        setattr(model.generation_config, *setting)
        evaluation.generate(model, tok, prompts, 24, guard="off")
    finally:
        del model.generate
        model.generation_config = config
    assert seqs[0].tolist() == seqs[1].tolist()


def test_the_answer_is_the_text_after_a_leading_think_block_only():
    assert evaluation.answer("<think>\n\n</think>\n\nParis") == "Paris"
    assert evaluation.answer("<think>France: its capital.\n</think>\nParis") == "Paris"
    assert evaluation.answer("Paris") == "Paris"
    assert evaluation.answer("Paris <think>x</think> y") == "Paris <think>x</think> y"  # not leading: kept
    assert evaluation.answer("<think>never closed") == "<think>never closed"  # no answer came


def test_a_row_the_guard_stopped_did_not_end_with_eos_where_the_pad_is_a_stop_id(twin, monkeypatch):
    """Qwen2.5 pads with <|endoftext|>, one of its stop ids: generate pads the row the guard stopped, and that pad
    read as the model's EOS inflated the EOS rate."""
    from nbutils.data import chatformat
    from nbutils.eval import guard as guard_module
    from nbutils.eval.degeneration import summarize

    tok = chatformat.load_tokenizer(twin("qwen2.5-instruct"))
    stops = chatformat.stop_ids(tok)
    assert tok.pad_token_id in stops

    class StopsRowZero:
        def __init__(self, *args, **kwargs):
            pass

        def report(self):
            return [{"stopped": True, "reasons": ["loop"], "stop_token": 2}, {"stopped": False, "reasons": []}]

    monkeypatch.setattr(guard_module, "DegenerationGuard", StopsRowZero)
    a, b = (tok(t, add_special_tokens=False)["input_ids"] for t in ("a a a", "The capital of France is Paris."))
    assert len(a) < len(b)  # row 0 is padded after its stop
    model = Scripted([a, b + [tok.convert_tokens_to_ids("<|im_end|>")]], tok.pad_token_id)
    outs = evaluation.generate(model, tok, ["p", "q"], 8, guard="flag", eos_token_id=stops)
    assert [(o["guard_stopped"], o["eos"], o["tokens"]) for o in outs] == [(True, False, len(a)), (False, True, len(b))]
    assert summarize(outs, 8)["eos_rate"] == 0.5


def test_a_sample_is_correct_by_exact_matchs_own_rule():
    """samples.html's green rows are the ones exact match counts: inner whitespace collapsed too."""
    ok = {"text": "new  York", "eos": True, "tokens": 2, "verdict": SimpleNamespace(degenerate=False, reasons=[])}
    rows = evaluation.sample_rows(["p"], ["New York"], [ok], [ok])
    assert [r["correct"] for r in rows] == [True, True] and evaluation.exact_match(["new  York"], ["New York"]) == 1.0


def test_an_eval_split_without_targets_has_no_loss_not_a_perfect_one(model, tok, eval_ds):
    """No target token: NaN (0.0 read as a perfect model, perplexity 1.0), and 03's line says nan rather than fail."""
    from nbutils.eval import report

    empty = eval_ds.select([])
    assert math.isnan(evaluation.eval_loss(model, empty, tok.pad_token_id))
    prompts, refs = evaluation.prompts_and_references(eval_ds, tok, limit=2)
    entry, _ = evaluation.score(model, tok, empty, prompts, refs, 2, guard="flag")
    assert math.isnan(entry["eval_loss"]) and math.isnan(entry["perplexity"])
    assert "eval loss nan" in report.model_line("tuned", entry)


def test_03_prints_the_step_of_the_checkpoint_it_loaded():
    """checkpoints.for_eval may fall back to an older checkpoint than the summary's: 03 names the step it loaded."""
    from pathlib import Path

    source = (Path(__file__).resolve().parents[2] / "notebooks" / "03_eval.py").read_text()
    line = next(s for s in source.splitlines() if s.startswith('print(f"adapter {ckpt}'))
    assert "checkpoints.checkpoint_step(ckpt)" in line and "summary[" not in line
