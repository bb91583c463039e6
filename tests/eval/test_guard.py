"""The degeneration guard inside `model.generate` (`nbutils.eval.guard`): only degenerate rows stop, tokens never
change, finished rows are not rechecked; and on a model that never learnt EOS, the guard saves the tokens."""

import pytest
import torch

from nbutils.data import chatformat
from nbutils.eval.degeneration import CircuitBreaker, DegenerationError
from nbutils.eval.guard import DegenerationGuard, GenerationObserver


@pytest.fixture(scope="module")
def broken(prepared_data, tmp_path_factory):
    """An adapter trained with EOS masked out of the loss (what pad == EOS does), on the embedded default."""
    from nbutils.harness import notebook_recipe

    out, eos = tmp_path_factory.mktemp("broken"), chatformat.load_tokenizer("embedded").eos_token_id
    params = dict(max_steps=60, eval_steps=20, save_steps=20, resume=False, lora_r=8, probe_prompts=0)
    plan = notebook_recipe.plan_for(prepared_data, out, **params)  # 02's recipe, on labels without EOS
    plan.train_ds = plan.train_ds.map(
        lambda r: {"labels": [-100 if t == eos else lab for t, lab in zip(r["input_ids"], r["labels"])]})
    model, tok, _ = notebook_recipe.train(prepared_data, out, plan=plan, run={"progress": "off"}, **params)
    return model.eval(), tok, plan.eval_ds


@pytest.mark.integration  # trains an adapter first (the `broken` fixture)
def test_broken_model_guard_saves_tokens_and_breaker_stops(broken):
    from nbutils.eval import evaluation

    model, tok, eval_ds = broken
    prompts, _ = evaluation.prompts_and_references(eval_ds, tok, 16)
    # Broken twice over, as happens with real models: EOS never learnt, and generate told to stop on
    # a token the model does not emit (the end-of-turn / end-of-text mix-up).
    kw = dict(max_new_tokens=128, eos_token_id=tok.unk_token_id)
    unguarded = sum(o["tokens"] for o in evaluation.generate(model, tok, prompts, guard="off", **kw))
    guarded_rows = evaluation.generate(model, tok, prompts, guard="flag", **kw)
    guarded = sum(o["tokens"] for o in guarded_rows)
    assert guarded <= 0.25 * unguarded, (guarded, unguarded)
    with pytest.raises(DegenerationError, match="Likely causes: the model never learnt to emit EOS"):
        evaluation.generate(model, tok, prompts, guard="abort", breaker=CircuitBreaker(8, 0.5), **kw)


WORDS = ("the a model is trained on data and it learns to answer questions about text with short sentences "
         "while small adapters keep memory low so that one GPU is enough for this task . , then we").split()


def _word_tokenizer():
    """A word-level fast tokenizer over 128 ids, built offline (ids past the word list decode as <unk>)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<pad>": 1, "</s>": 2, **{w: i + 3 for i, w in enumerate(dict.fromkeys(WORDS))}}
    vocab.update({f"w{i}": i for i in range(len(vocab), 128)})
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", eos_token="</s>")


class Force(torch.nn.Module):
    """A logits processor that makes chosen rows say a script (the same with and without the guard)."""

    def __init__(self, scripts: dict[int, list[int]], start: int):
        super().__init__()
        self.scripts, self.start = scripts, start

    def __call__(self, input_ids, scores):
        step = input_ids.shape[1] - self.start
        for row, script in self.scripts.items():
            scores[row] = -1e9
            scores[row, script[step % len(script)]] = 0.0
        return scores


@pytest.fixture(scope="module")
def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2)).eval()
    tok = _word_tokenizer()
    ids = tok.convert_tokens_to_ids
    healthy = ids(("the model is trained on data , and it learns to answer questions about text with short "
                   "sentences while small adapters keep memory low so that one GPU is enough for this task . "
                   "then we").split())
    loop = ids("the model is trained on data .".split())
    prompts = torch.randint(3, 60, (4, 6), generator=torch.Generator().manual_seed(1))
    return model, tok, prompts, {0: healthy, 1: loop, 2: list(reversed(healthy))}


def _generate(tiny_llama, guard=None, observer=None, eos=2, new=64):
    from transformers import LogitsProcessorList, StoppingCriteriaList

    model, tok, prompts, scripts = tiny_llama
    procs = [Force(scripts, prompts.shape[1])] + ([observer] if observer else [])
    with torch.no_grad():
        return model.generate(prompts, max_new_tokens=new, do_sample=False, pad_token_id=1, eos_token_id=eos,
                              logits_processor=LogitsProcessorList(procs),
                              stopping_criteria=StoppingCriteriaList([guard]) if guard else None)


def test_guard_returns_a_bool_per_row(tiny_llama):
    _, tok, prompts, _ = tiny_llama
    guard = DegenerationGuard(tok, check_every=1)
    done = guard(torch.cat([prompts, prompts[:, :1]], 1), None)
    assert done.dtype == torch.bool and done.shape == (4,) and not done.any()


def test_guard_stops_the_looping_row_only_and_leaves_healthy_rows_untouched(tiny_llama):
    # 48 tokens: the healthy scripts (37 words) are said again only in part, short of a cycle said again (100+ chars)
    plain = _generate(tiny_llama, new=48)
    guard = DegenerationGuard(tiny_llama[1], check_every=8)
    guarded = _generate(tiny_llama, guard, new=48)
    report, width = guard.report(), tiny_llama[2].shape[1]
    assert report[1]["stopped"] and {"loop", "token-repeat"} & set(report[1]["reasons"])
    stop = report[1]["stop_token"]
    assert stop < 40 and report[1]["tokens"] == stop + 1
    assert guarded[1, width + stop + 1:].eq(1).all()  # padded after the stop
    assert guarded[1, :width + stop + 1].tolist() == plain[1, :width + stop + 1].tolist()
    for row in (0, 2):  # healthy rows: same tokens as without the guard
        assert not report[row]["stopped"] and guarded[row].tolist() == plain[row, :guarded.shape[1]].tolist()


def test_guard_never_changes_tokens_even_when_not_stopping(tiny_llama):
    plain = _generate(tiny_llama, eos=None)
    guard = DegenerationGuard(tiny_llama[1], check_every=4, stop=False)
    assert torch.equal(_generate(tiny_llama, guard, eos=None), plain)
    assert guard.report()[1]["reasons"] and not any(r["stopped"] for r in guard.report())


def test_guard_does_not_recheck_finished_rows(tiny_llama):
    model, tok, prompts, scripts = tiny_llama
    ended = {**scripts, 3: [5, 6, 7, 2] + [9] * 60}  # row 3 says EOS at its 4th token (then is padded)
    guard = DegenerationGuard(tok, check_every=4)
    _generate((model, tok, prompts, ended), guard)
    state = guard.rows[3]
    assert state.eos and state.tokens == 4 and not state.stopped
    assert state.decoded == 3 and state.text == "model is trained"  # judged up to EOS (its marker left out), no further


def test_guard_decodes_incrementally_like_a_full_decode():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    text = ("Модель загружается в четырёх битах. 模型以四位精度加载。 Le modèle est chargé en quatre bits. "
            "The adapter is small. ") * 3
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator([text], trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<eos>")
    ids = tok(text[:160])["input_ids"]
    guard = DegenerationGuard(tok, check_every=3, detect_every=3, prompt_length=1)
    seq = torch.zeros((1, 1), dtype=torch.long)
    for t in ids:
        seq = torch.cat([seq, torch.tensor([[t]])], 1)
        guard(seq, None)
    state = guard.rows[0]
    assert tok.decode(ids).startswith(state.text) and len(state.text) > 100 and not state.reasons


def test_observer_leaves_scores_unchanged_and_records_per_row(tiny_llama):
    scores = torch.randn(3, 10)
    observer = GenerationObserver()
    assert observer(torch.zeros((3, 2), dtype=torch.long), scores) is scores
    observer = GenerationObserver()
    plain = _generate(tiny_llama, eos=None, new=16)
    assert torch.equal(_generate(tiny_llama, observer=observer, eos=None, new=16), plain)
    summary = observer.summary()
    assert len(summary) == 4 and all(s["mean_entropy"] >= 0 and s["mean_logprob"] <= 0 for s in summary)


# ---- what the guard stops mid-stream: markers before an answer wait, markers that go on do not ------------------------

def test_guard_lets_role_headers_before_an_answer_run_on_and_stops_markers_that_go_on():
    from nbutils.data.chatformat import load_tokenizer
    from nbutils.eval.detect import detect
    from nbutils.eval.guard import GUARD_SPECIAL_CHARS, settled

    # What the embedded base model wrote on task prompts (guard_bench): the guard stopped 10 of 64 such rows at their
    # first check, as special-tokens-only, and cut the answer that followed.
    opening = "\n\n<|assistant|>\n\n<|assistant|>\n\n<|assistant|>\n\n\n"
    assert detect(opening).reasons == ["special-tokens-only"] and not settled(detect(opening))
    tok = load_tokenizer("embedded")
    ids, row = _observe(tok, opening + " is a is a job .\n")
    assert not row["reasons"] or row["stop_token"] == len(ids)  # never mid-stream: at most judged at its EOS
    assert settled(detect("<pad>" * (GUARD_SPECIAL_CHARS // 5)))
    assert _observe(tok, "<|assistant|>\n\n" * 16)[1]["reasons"]  # markers that go on still stop


def test_guard_stops_a_line_said_a_third_time_not_a_catalog_line_said_twice():
    """A catalog says a line twice after one that ends alike; a keyboard layout's catalog says "No-break space in
    row 4" after "No-break space in row 3, thin no-break space in row 4", which opens alike: the copies count from that
    line start, and the guard waits. A loop after other words still stops at once."""
    from nbutils.eval.detect import detect
    from nbutils.eval.guard import settled

    line = "The table caption changed, used to notify the reader\n\n"
    catalog = "Accessible value\n\nThe parent changed, used to notify the reader\n\n" + line * 2 + "Accessible name\n\n"
    assert not any(settled(detect(catalog[:k])) for k in range(20, len(catalog) + 1))
    assert any(detect(catalog[:k]).degenerate for k in range(20, len(catalog) + 1))  # post hoc, cut there: a loop
    looping = catalog[:catalog.index("Accessible name")] + line
    assert all(settled(detect(looping + line[:c])) for c in range(len(line)))
    rows = ("Keyboard layouts\n\nNo-break space in row 2\n\nNo-break space in row 3\n\nNo-break space in row 3, nothing"
            " in row 4\n\nNo-break space in row 3, thin no-break space in row 4\n\nNo-break space in row 4\n\nNo-break space"
            " in row 4, thin no-break space in row 6\n\n")
    assert not [k for k in range(40, len(rows) + 1) if settled(detect(rows[:k]))]
    assert settled(detect("Here are the layouts: No-break space in row 4\n\n" + "No-break space in row 4\n\n" * 2 + "No"))


def test_guard_stops_lines_looping_after_a_mid_line_start_as_soon_as_detect_does():
    from nbutils.eval.detect import detect
    from nbutils.eval.guard import settled

    unit = ("Load the base model in four-bit precision with the fp16 compute type.\n"
            "Train the low-rank adapter on the prepared data for one epoch.\n")  # two copies of 130 characters
    head = "Here is what the notebook does, step by step: " + unit * 2
    verdicts = [detect(head + unit[:c]) for c in range(len(unit))]
    assert all(v.degenerate for v in verdicts) and all(settled(v) for v in verdicts)


def _observe(tok, text: str) -> tuple[list[int], dict]:
    """Feed text token by token through the guard (observe mode, called after every token, EOS after the text), as
    generate does."""
    ids = tok(text, add_special_tokens=False)["input_ids"]
    seq = torch.tensor([[tok.bos_token_id or 0] + ids + [tok.eos_token_id]])
    guard = DegenerationGuard(tok, prompt_length=1, eos_token_id=tok.eos_token_id, stop=False)
    for end in range(2, seq.shape[1] + 1):
        guard(seq[:, :end], None)
    return ids, guard.report()[0]


def test_guard_stops_a_loop_longer_than_its_id_check_at_the_first_check_detect_would():
    """A cycle of sentences of ~100 tokens is too long for the exact-repeat check on ids (64); the long-repeat
    trigger makes the guard run detect at every check once the second copy is under way, not every DETECT_EVERY tokens.
    A README that shows the same code example twice trips the trigger too, and detect leaves it alone."""
    from nbutils.data.chatformat import load_tokenizer
    from nbutils.eval.detect import detect
    from nbutils.eval.guard import DETECT_EVERY, settled

    tok = load_tokenizer("embedded")
    unit = ("The adapter is saved next to the tokenizer so the next notebook finds both. "
            "Resume reads the last checkpoint and the trainer state. Then the run goes on where it stopped. ")
    ids, row = _observe(tok, "Here is what happens next, in order: " + unit * 4)  # stops at token 232 (not 32k)
    first = next(k for k in range(8, len(ids), 8) if settled(detect(tok.decode(ids[:k]))))
    assert first % DETECT_EVERY and row["stop_token"] == first - 1, (first, row)
    example = "Run it with::\n\n    pip install tox\n    tox -e py312 --parallel auto -- -k 'not slow'\n\n"
    readme = "Testing\n-------\n\n" + example + "Or, on Windows, where the same command works::\n\n" + example
    assert not _observe(tok, readme + "That is all.\n")[1]["reasons"]


def test_guard_waits_for_the_second_copy_of_a_cycle_and_judges_a_row_that_ends_before_it():
    """A paragraph said again after a new heading is, at a prefix, what a cycle cut before its second copy is: the
    guard waits for that copy mid-stream (the loop rules), and judges a row that ends before it as detect does."""
    from nbutils.data.chatformat import load_tokenizer
    from nbutils.eval.detect import detect
    from nbutils.eval.guard import settled

    tok = load_tokenizer("embedded")
    para = ("Wrap the assistant's message in generation markers, so that the mask of assistant tokens is right for "
            "training on answers only.\n\n")
    doc = "## Llama 3\n\nPatched template.\n\n" + para + "## Qwen 3\n\nPatched template, thinking kept.\n\n" + para
    cut = doc[:len(doc) - 8]  # the second copy of the paragraph under way
    verdict = detect(cut)
    assert "cycle_chars" in verdict.metrics and not settled(verdict) and settled(verdict, ended=True)
    assert not _observe(tok, doc + "## Gemma 2\n\nNo system role; the template folds it into the first turn.\n")[1]["reasons"]
    row = _observe(tok, cut)[1]  # a row that ends (EOS) there: judged once more, reported, not stopped
    assert row["reasons"] == ["loop"] and not row["stopped"]


def test_a_row_that_ends_just_after_a_check_is_judged_even_where_its_last_character_spans_tokens():
    """A row checked at its last token and then ended (EOS) is judged once more up to its end, even where the
    tokens decoded again as context are pieces of one character ("ổ" is three byte-level tokens): post hoc `detect`
    and the guard's report agree. Before, the row was left waiting for the rest of a character that never came."""
    from nbutils.data.chatformat import load_tokenizer
    from nbutils.eval.detect import detect

    tok = load_tokenizer("embedded")
    unit = ("Quá nhiều kết xuất cho từng tập tin được xử lý\nThis handler does nothing.\n"
            "Giá trị này thích nghi cho đúng với các thay đổi sắc thái v.v.\n")
    words = "Messages of the tool as its catalog lists them for every language it was translated into".split()
    texts = [" ".join(words[:k]) + ":\n" + unit + unit[:unit.index("đổi") + 2] for k in range(1, len(words) + 1)]
    checked_last = [t for t in texts if len(tok(t, add_special_tokens=False)["input_ids"]) % 8 == 0]
    assert checked_last and all(detect(t).reasons == ["loop"] for t in checked_last)
    assert all(_observe(tok, t)[1]["reasons"] == ["loop"] for t in checked_last)


def test_every_stop_is_a_detect_verdict_on_the_prefix_decoded_up_to_it():
    """The guard judges up to the last whole character (a byte-level tokenizer may split one over tokens); the
    decoded prefix ends in U+FFFD there, which detect reads as a character not yet written."""
    from nbutils.data.chatformat import load_tokenizer
    from nbutils.eval.detect import detect

    tok = load_tokenizer("embedded")
    for text in ["中, " * 12, "🚀 " + "看看 " * 10, "\ufeff" + "=" * 130, "「好」。" * 12]:
        ids, row = _observe(tok, text)
        if row["reasons"]:
            prefix = tok.decode(ids[:row["stop_token"] + 1], skip_special_tokens=False)
            assert detect(prefix).degenerate, (text, prefix)
    for text in ["🚀 Getting started\n\nInstall it first.", "\ufeff====\nTitle\n====\nText follows here.",
                 "「注意」：请先安装。"]:
        assert not _observe(tok, text)[1]["reasons"], text


# ---- the embedded base model's rows: field echoes, role markers and blank lines, then an answer or EOS ---------------

def test_markers_after_healthy_text_wait_until_they_are_a_model_saying_nothing():
    """What the embedded base model wrote on a task prompt (guard_bench, greedy): a field echoed, six role markers,
    a word, EOS. The guard stopped it at its second check (token 16 of 19) as a run of markers; detect on the whole
    row says healthy. Markers after healthy text stop a row only once they reach GUARD_SPECIAL_CHARS characters."""
    from nbutils.data.chatformat import load_tokenizer
    from nbutils.eval.detect import detect
    from nbutils.eval.guard import GUARD_SPECIAL_CHARS, marker_tail, markers_pending

    tok = load_tokenizer("embedded")
    row = " : name : bob\n" + "<|assistant|>\n" * 6 + " is\n"
    assert not detect(row).degenerate and not _observe(tok, row)[1]["reasons"]
    assert marker_tail(row[:-4]) == len("\n" + "<|assistant|>\n" * 6) and marker_tail(row) == 0
    assert marker_tail("a <|assistant|>\n<|assis") == len(" <|assistant|>\n<|assis") and marker_tail("a <b") == 0
    assert markers_pending(row[:-4]) and detect(row[:-4]).degenerate  # post hoc, cut there: a run of markers
    ids, state = _observe(tok, " : job : judge\n" + "<|assistant|>\n\n\n" * 24)  # one that never answers
    prefix = tok.decode(ids[:state["stop_token"] + 1], skip_special_tokens=False)
    assert state["reasons"] and detect(prefix).degenerate and marker_tail(prefix) >= GUARD_SPECIAL_CHARS
    assert not markers_pending("the the the the the the the the the the the " + "<|assistant|>\n" * 2)
    # A newline is one character: 36 blank lines after a marker stay below GUARD_SPECIAL_CHARS, yet are a run of them
    assert markers_pending(" job\n\n\n<|assistant|>\n\n\n") and not markers_pending(" job\n<|assistant|>" + "\n" * 36)


def test_the_embedded_base_model_rows_that_end_are_never_stopped(embedded_dir):
    """Real generations: the embedded base model on task prompts (greedy, as 03 runs its baseline). A row that ends
    with EOS without the guard, and that detect calls healthy, comes out of the guarded run token for token."""
    from transformers import AutoModelForCausalLM

    from nbutils import embedded
    from nbutils.eval import evaluation

    tok = chatformat.load_tokenizer("embedded")
    model = AutoModelForCausalLM.from_pretrained(embedded.resolve_model("embedded")).eval()
    prompts = [tok.apply_chat_template([{"role": "user", "content": r["instruction"]}], tokenize=False,
                                       add_generation_prompt=True) for r in embedded.task_records(32, seed=5)]
    off = evaluation.generate(model, tok, prompts, max_new_tokens=32, guard="off")
    flag = evaluation.generate(model, tok, prompts, max_new_tokens=32, guard="flag")
    ended = [k for k, o in enumerate(off) if o["eos"] and not o["verdict"].degenerate]
    assert len(ended) >= 16, "the base model should end most rows"
    assert [(flag[k]["text"], flag[k]["guard_stopped"]) for k in ended] == [(off[k]["text"], False) for k in ended]
