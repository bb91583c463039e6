"""Degeneration: detection per class, healthy text left alone, the generate guards, circuit breaker, summary, CLI."""

import json
import os
import subprocess
import sys
import sysconfig

import pytest
import torch

from nbutils.eval.degeneration import CircuitBreaker, DegenerationError, main, summarize
from nbutils.eval.detect import Verdict, detect, whisper_rule
from nbutils.eval.guard import DegenerationGuard, GenerationObserver

MULTI_LINE_LOOP = "def f():\n    return 1\n" + "x = compute(a, b)\nprint(x, 'done')\n" * 4
PROMPT_ECHO = "\n".join(["Translate the following sentence into French: the cat is on the table."] * 4)
HEALTHY = {
    "code": "def add(a, b):\n    \"\"\"Add two numbers.\"\"\"\n    return a + b\n\n\nclass Point:\n    def __init__(self, x, y):\n"
            "        self.x = x\n        self.y = y\n\n    def norm(self):\n        return (self.x ** 2 + self.y ** 2) ** 0.5\n",
    "markdown table": "| model | params | T4 memory |\n|---|---|---|\n| 0.5B | 494M | 3.1 GB |\n| 1.5B | 1.5B | 5.2 GB |\n"
                      "| 7B | 7.6B | 9.8 GB |\n| 8B | 8.0B | 10.4 GB |\n",
    "changelog": "## 0.4.1\n- Fixed a crash when the cache is empty\n- Fixed typos in the docs\n\n## 0.4.0\n- Added packing\n"
                 "- Fixed the resume bug\n\n## 0.3.9\n- Fixed the tokenizer save\n",
    "license": "Permission is hereby granted, free of charge, to any person obtaining a copy of this software and "
               "associated documentation files (the \"Software\"), to deal in the Software without restriction, "
               "including without limitation the rights to use, copy, modify, merge, publish, distribute.",
    "numbered instructions": "1. Open the notebook.\n2. Attach the dataset.\n3. Turn on the GPU.\n4. Run all cells.\n"
                             "5. Download the adapter.\n",
    "german": "Das Modell wird in vier Bit geladen, damit es auf eine T4 passt. Danach werden nur die kleinen "
              "Adapter trainiert, und die Gewichte des Basismodells bleiben eingefroren.",
    "french": "Le modèle est chargé en quatre bits pour tenir sur une T4. Ensuite, seuls les petits adaptateurs "
              "sont entraînés et les poids du modèle de base restent figés.",
    "chinese": "模型以四位精度加载，以便放入一块T4显卡。之后只训练小的适配器，基础模型的权重保持冻结。",
    "russian": "Модель загружается в четырёх битах, чтобы поместиться на T4. Затем обучаются только небольшие "
               "адаптеры, а веса базовой модели остаются замороженными.",
}


@pytest.mark.parametrize("text", [MULTI_LINE_LOOP, PROMPT_ECHO])
def test_multi_line_loops_and_prompt_echo(text):
    assert detect(text).degenerate


@pytest.mark.parametrize("kind", sorted(HEALTHY))
def test_healthy_text_is_not_flagged(kind):
    v = detect(HEALTHY[kind])
    assert not v.degenerate, (kind, v)


def test_thresholds_do_not_grow_with_length():
    long = "\n\n".join(HEALTHY.values())
    assert len(long) > 1400 and not detect(long).degenerate
    assert detect(long + " " + "I will stop now. " * 3).degenerate  # the same rule fires on short and long text
    assert detect("I will stop now. " * 3).degenerate


def test_guard_stops_only_the_looping_row_on_the_embedded_tokenizer():
    from nbutils.train.modeling import load_tokenizer

    tok = load_tokenizer("embedded")
    words = tok(" " + HEALTHY["license"] + " " + HEALTHY["changelog"], add_special_tokens=False)["input_ids"]
    loop = tok(" i will go", add_special_tokens=False)["input_ids"]
    prompt = torch.zeros((3, 4), dtype=torch.long)
    guard = DegenerationGuard(tok, prompt_length=4, check_every=8, detect_every=8)
    seq = prompt
    for step in range(48):
        nxt = torch.tensor([[words[step]], [loop[step % len(loop)]], [words[step + 60]]])
        seq = torch.cat([seq, nxt], 1)
        done = guard(seq, None)
        assert done.dtype == torch.bool and done.shape == (3,)
    report = guard.report()
    assert report[1]["stopped"] and report[1]["reasons"] and report[1]["stop_token"] <= 32
    assert not report[0]["stopped"] and not report[2]["stopped"]


@pytest.fixture(scope="module")
def tiny():
    from transformers import AutoModelForCausalLM

    from nbutils import embedded
    from nbutils.train.modeling import load_tokenizer

    tok = load_tokenizer("embedded")
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(embedded.resolve_model("embedded")).eval()
    prompts = [tok.apply_chat_template([{"role": "user", "content": r["instruction"]}], tokenize=False,
                                       add_generation_prompt=True) for r in embedded.task_records(8, seed=3)]
    return model, tok, tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)


def test_healthy_rows_identical_with_and_without_guard(tiny):
    from transformers import StoppingCriteriaList

    model, tok, enc = tiny
    kw = dict(max_new_tokens=48, do_sample=False, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    plain = model.generate(**enc, **kw)
    guard = DegenerationGuard(tok, prompt_length=enc["input_ids"].shape[1])
    observer = GenerationObserver()
    guarded = model.generate(**enc, **kw, stopping_criteria=StoppingCriteriaList([guard]), logits_processor=[observer])
    width = enc["input_ids"].shape[1]
    for i, state in enumerate(guard.report()):
        if not state["stopped"]:
            a, b = plain[i, width:].tolist(), guarded[i, width:].tolist()
            n = min(len(a), len(b))
            assert a[:n] == b[:n] and all(t == tok.pad_token_id for t in a[n:] + b[n:])
    assert len(observer.summary()) == 8 and all(s["mean_entropy"] >= 0 for s in observer.summary())


@pytest.fixture(scope="module")
def broken(prepared_data, tmp_path_factory):
    """An adapter trained with EOS masked out of the loss (what pad == EOS does), on the embedded default."""
    from nbutils.data import splits as data
    from nbutils.train import modeling, training
    from nbutils.train.trainconfig import TrainConfig

    tok = modeling.load_tokenizer("embedded")
    train = data.load_split(prepared_data, "train").map(
        lambda r: {"labels": [-100 if t == tok.eos_token_id else lab for t, lab in zip(r["input_ids"], r["labels"])]})
    model = modeling.attach_lora(modeling.load_base("embedded", "fp32", True), r=8)
    training.train(model, tok, train, data.load_split(prepared_data, "eval"),
                   TrainConfig(max_steps=60, eval_steps=20, save_steps=20, resume=False),
                   tmp_path_factory.mktemp("broken"), progress="off")
    return model.eval(), tok, data.load_split(prepared_data, "eval")


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


# ---- more classes and healthy kinds; nbutils.eval.degeneration's own guard on a tiny random Llama ----------------

PROSE = ("The adapter is trained in four-bit precision so that it fits on a T4, and only the small low-rank "
         "matrices receive gradients. ")
POSITIVES = [
    ("char-repeat", "The answer is " + "a" * 40),
    ("char-repeat", "Done" + "!" * 30),
    ("char-repeat", "好的" + "哈" * 12),
    ("char-repeat", "Result:\n" + "\n" * 20),
    ("token-repeat", "Sure. " + "hello " * 12),
    ("token-repeat", PROSE + "the, " * 10),
    ("loop", PROSE + "I think this is right. " * 3),
    ("loop", PROSE + "This is the end. That is all. We are done here. " * 3),
    ("loop", "def f(x):\n    return x\n" + "for i in range(n):\n    total += weights[i] * values[i]\n" * 4),
    ("loop", "Answer the question.\n" + "### Instruction:\nWhat is QLoRA and why does it save memory?\n" * 3),
    ("loop", PROSE + "very " * 3 + ("deep learning is fun " * 4)),
    ("counting-loop", "Steps: " + " ".join(f"Step {i}: add the flour to the bowl." for i in range(41, 46))),
    ("counting-loop", "\n".join(f"{i}. Repeat the previous step with the next batch" for i in range(3, 9))),
    ("word-soup", "apple river quantum blue seven dance window happily orange mountain jazz pencil cloud frog "
                  "silver tiger marble lamp echo violin candle basket"),
    ("subword-soup", "The Ġcat Ġsat Ġon Ġthe Ġmat"),
    ("subword-soup", "▁the ▁model ▁is ▁train ing ▁on ▁data"),
    ("subword-soup", "un ##aff ##able ##ness ##ing ##ly"),
    ("subword-soup", "co ll ab ra ti on ne tw or ks ar ch it ec tu re de ve lo pm en t"),
    ("unicode-junk", "Résumé: CafÃ© rÃ©sumÃ© naÃ¯ve faÃ§ade"),
    ("unicode-junk", "The result is \ufffd\ufffd and then \ufffd"),
    ("unicode-junk", "zero\u200bwidth\u200bjunk\u200bhere\u200bagain"),
    ("unicode-junk", "control\x07 chars\x1b here\x00"),
    ("unicode-junk", "ЖaФ中بxΩ😀ю字ωmЯ" * 2),
    ("empty", ""),
    ("empty", " \n\t "),
    ("special-tokens-only", "<|eot|><pad><pad>"),
    ("special-tokens-only", "</s>"),
    ("special-tokens-only", "<|im_end|>\n<|endoftext|>"),
    ("token-repeat", "The name\n\n" + "<|pad|>" * 12),  # pad tokens forever instead of EOS
]
MORE_HEALTHY = {
    "code": "import torch\n\n\ndef add(a, b):\n    \"\"\"Add two numbers.\"\"\"\n    return a + b\n\n\nclass Point:\n"
            "    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n\n    def norm(self):\n"
            "        return (self.x ** 2 + self.y ** 2) ** 0.5\n\n\nassert add(1, 2) == 3\nassert add(2, 3) == 5\n"
            "assert add(3, 4) == 7\nMASK = 0xFFFFFFFFFFFFFFFF\n# " + "-" * 76 + "\n",
    "markdown table": "| model | params | T4 memory |\n| --- | --- | --- |\n| 0.5B | 494M | 3.1 GB |\n"
                      "| 1.5B | 1.5B | 5.2 GB |\n| 7B | 7.6B | 9.8 GB |\n| 8B | 8.0B | 10.4 GB |\n",
    "changelog": "## 0.4.1\n- Fixed a crash when the cache is empty\n- Fixed typos in the docs\n\n## 0.4.0\n"
                 "- Added packing\n- Fixed the resume bug (#41)\n- Fixed the tokenizer save (#42)\n\n## 0.3.9\n"
                 "- Fixed the tokenizer save\n",
    "license": "Permission is hereby granted, free of charge, to any person obtaining a copy of this software and "
               "associated documentation files (the \"Software\"), to deal in the Software without restriction, "
               "including without limitation the rights to use, copy, modify, merge, publish, distribute.\n\n"
               "THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED.",
    "numbered instructions": "1. Open the notebook.\n2. Attach the dataset.\n3. Turn on the GPU.\n4. Run all cells.\n"
                             "5. Download the adapter.\n6. Upload it as a new model version.\n",
    "markdown list": "Why it fails:\n\n- the pad token is the EOS token\n- the chat template differs\n"
                     "- fp16 overflows\n\nSee the docs.",
    "rst heading": "Installation\n============\n\nRun ``pip install nbutils`` and then import it.\n",
    "german": "Das Modell wird in vier Bit geladen, damit es auf eine T4 passt. Danach werden nur die kleinen "
              "Adapter trainiert, und die Gewichte des Basismodells bleiben eingefroren.",
    "french": "Le modèle est chargé en quatre bits pour tenir sur une T4. Ensuite, seuls les petits adaptateurs "
              "sont entraînés et les poids du modèle de base restent figés.",
    "chinese": "模型以四位精度加载，以便放入一块T4显卡。之后只训练小的适配器，基础模型的权重保持冻结。使用Python和PyTorch进行训练。",
    "russian": "Модель загружается в четырёх битах, чтобы поместиться на T4. Затем обучаются только небольшие "
               "адаптеры, а веса базовой модели остаются замороженными.",
    "json": '{"model": "qwen", "lr": 0.0002, "epochs": 3, "lora": {"r": 16, "alpha": 32, "dropout": 0.05}}',
    "padding after EOS": "Paris is the capital of France.</s>" + "<pad>" * 12,
}


@pytest.mark.parametrize("reason,text", POSITIVES, ids=[f"{r}-{i}" for i, (r, _) in enumerate(POSITIVES)])
def test_each_class_is_caught_with_its_reason(reason, text):
    v = detect(text)
    assert v.degenerate and reason in v.reasons, v


@pytest.mark.parametrize("kind", sorted(MORE_HEALTHY))
def test_more_healthy_kinds_are_not_flagged(kind):
    assert not detect(MORE_HEALTHY[kind]).degenerate, detect(MORE_HEALTHY[kind])


def test_long_healthy_text_passes_where_the_zlib_ratio_fails():
    with open(os.path.join(sysconfig.get_paths()["stdlib"], "LICENSE.txt"), encoding="utf-8") as f:
        long = f.read()
    assert whisper_rule(long) and not detect(long).degenerate  # zlib's ratio crosses 2.4 on long healthy text
    assert detect(long + "\n" + "I will stop now. " * 3).degenerate
    assert detect("I will stop now. " * 3).degenerate


def test_verdict_explains_itself():
    v = detect(PROSE + "I think this is right. " * 3)
    assert v.reasons == ["loop"] and v.metrics["loop_repeats"] >= 2 and v.metrics["loop_period"] > 0


def test_cli_prints_one_verdict_per_record_then_a_summary(tmp_path, capsys):
    path = tmp_path / "gen.jsonl"
    records = [{"text": "A fine answer."}, {"text": "ha " * 20}, "{oops", {"text": 3}, {"other": "x"},
               {"text": "", "answer": PROSE}]
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")
    out = subprocess.run([sys.executable, "-m", "nbutils.eval.degeneration", "check", str(path)], capture_output=True,
                         text=True)
    lines = [json.loads(x) for x in out.stdout.splitlines()]
    assert out.returncode == 0 and len(lines) == len(records) + 1
    assert [x.get("line") for x in lines[:-1]] == [1, 2, 3, 4, 5, 6]
    assert lines[0]["degenerate"] is False and lines[1]["degenerate"] and lines[1]["reasons"]
    assert all("error" in lines[i] for i in (2, 3, 4)) and lines[5]["reasons"] == ["empty"]
    assert lines[-1]["summary"]["checked"] == 3 and lines[-1]["summary"]["unreadable_lines"] == 3
    assert main(["check", str(path), "--field", "answer"]) == 0  # in-process this time: no second interpreter
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["summary"]["checked"] == 1


def test_circuit_breaker_raises_with_share_examples_and_causes():
    breaker = CircuitBreaker(min_samples=4, max_share=0.5)
    breaker.update(["A good answer.", "ok " * 20])
    with pytest.raises(DegenerationError) as err:
        breaker.update(["la " * 200, "<|end|><|end|>"])
    msg = str(err.value)
    assert "3 of the first 4 generations (75%)" in msg and "..." in msg  # long example truncated
    assert "EOS" in msg and "pad token == EOS token" in msg and "chat template" in msg and "fp16" in msg


def test_circuit_breaker_quiet_below_the_threshold_and_judges_only_the_first_samples():
    breaker = CircuitBreaker(min_samples=4, max_share=0.5)
    breaker.update([PROSE, "ok " * 20, PROSE, "la " * 20])  # 2 of 4: not more than half
    breaker.update(["la " * 20] * 10)  # later garbage is for the report, not the breaker
    verdicts = [Verdict(True, ["loop"])] * 3 + [Verdict(False)]
    with pytest.raises(DegenerationError):
        CircuitBreaker(4, 0.5).update(verdicts)


def test_summarize_counts():
    rows = [{"tokens": 32, "eos": False, "verdict": Verdict(True, ["loop"])},
            {"tokens": 8, "eos": False, "guard_stopped": True, "reasons": ["loop"]},
            {"tokens": 3, "eos": True, "text": "Paris."},
            {"tokens": 12, "eos": False, "guard_stopped": True, "verdict": Verdict(True, ["word-soup"])}]
    s = summarize(rows, max_new_tokens=32)
    assert s["no_eos_at_max"] == 1 and s["tokens_saved"] == 24 + 20
    assert s["reasons"] == {"loop": 2, "word-soup": 1}
    assert s["eos_rate"] == pytest.approx(0.25) and s["degenerate_rate"] == pytest.approx(0.75) and s["n"] == 4


# ---- the guard inside generate ----------------------------------------------------------------------------------

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
    plain = _generate(tiny_llama)
    guard = DegenerationGuard(tiny_llama[1], check_every=8)
    guarded = _generate(tiny_llama, guard)
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
    assert state.eos and state.tokens == 4 and not state.stopped and state.text == ""


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


def test_ascii_fast_tokenizer_gives_the_same_tokens():
    """detect() tokenizes ASCII tails with a cheaper pattern: it must cut exactly where the Unicode one does."""
    import glob

    from nbutils.eval import detect as D

    files = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))[:40]
    texts = [open(f, encoding="utf-8", errors="replace").read()[:6000] for f in files]
    texts += ["a\x1cb\x1fc 0x1F \\x41 \\U0041 Step 41: foo_bar __init__ x1d4b0 ## 3rd", HEALTHY["license"]]
    checked = 0
    for text in texts:
        low = text.lower()
        if not low.isascii():
            continue
        norm = D.NUMBER_RE.sub(D._number, low)
        assert D.ASCII_TOKEN_RE.findall(norm) == D.TOKEN_RE.findall(norm)
        checked += 1
    assert checked >= 30


# ---- where the text ends, punctuation, counting formats, scripts --------------------------------------------------

SENTENCE = "The adapter weights are saved next to the tokenizer so that the notebook can resume. "  # ~85 chars
CUT_LOOPS = {  # name: (healthy prefix, unit, copies); every cut of the last copy must be flagged
    "issue example": ("", "specify how encoding and errors: ", 30),
    "75-char period after prose": (PROSE * 3, SENTENCE, 18),
    "multi-sentence cycle": (PROSE, "It works. Then it stops. Then it works again, as before. ", 6),
    "prompt echo": ("Sure, here it is.\n", "### Instruction:\nSummarize the following text in two lines.\n\n", 5),
    "commas": ("", ", ", 300),
    "spaced commas": ("", " ,", 300),
    "commas after a word": ("x", " ,", 100),
    "code lines": ("def f(x):\n    return x\n", "for i in range(n):\n    total += weights[i] * values[i]\n", 4),
    "vietnamese NFD": ("", "Mô hình được nạp ở chế độ bốn bit. ", 8),
}


@pytest.mark.parametrize("name", sorted(CUT_LOOPS))
def test_loop_verdict_does_not_depend_on_where_the_text_ends(name):
    import unicodedata

    prefix, unit, copies = CUT_LOOPS[name]
    if "NFD" in name:
        unit = unicodedata.normalize("NFD", unit)
    body = prefix + unit * copies
    missed = [c for c in range(len(unit)) if not detect(body + unit[:c]).degenerate]
    assert not missed, (name, missed)


@pytest.mark.parametrize("form", ["[{n}]", "({n})", "{n})", "<{n}>", "{{{n}}}", "#{n}", "{n}.", "— {n} —", "№{n}",
                                  "Step {n}: mix the dough.", "- [{n}] item", "| {n} | yes |"])
def test_counting_loops_in_any_bracket_or_separator_at_every_cut(form):
    text = "Here are the references: " + " ".join(form.format(n=n) for n in range(29, 75))
    last = form.format(n=75)
    missed = [c for c in range(len(last) + 1) if not detect(text + " " + last[:c]).degenerate]
    assert not missed, missed
    assert "counting-loop" in detect(text).reasons or "loop" in detect(text).reasons


@pytest.mark.parametrize("text", [", " * 300, " ," * 300, "x " + ", " * 100, "Well" + "!?" * 60, "ok" + " ." * 150])
def test_punctuation_loops_are_token_repeats(text):
    assert detect(text).degenerate and "token-repeat" in detect(text).reasons


SCRIPTS = {
    "vietnamese": "Mô hình được nạp ở chế độ bốn bit để vừa với một GPU T4. Sau đó chỉ các bộ chuyển đổi nhỏ được "
                  "huấn luyện, còn trọng số của mô hình gốc được giữ nguyên. Người dùng mới có thể chạy lại sổ tay.",
    "hindi": "मॉडल को चार बिट में लोड किया जाता है ताकि वह एक T4 पर आ सके। इसके बाद केवल छोटे एडाप्टर प्रशिक्षित किए "
             "जाते हैं और मूल मॉडल के भार स्थिर रहते हैं।",
    "thai": "โมเดลถูกโหลดแบบสี่บิตเพื่อให้พอดีกับการ์ด T4 หลังจากนั้นจะฝึกเฉพาะอะแดปเตอร์ขนาดเล็ก "
            "ส่วนน้ำหนักของโมเดลหลักจะคงที่ ผู้ใช้สามารถเริ่มใหม่ได้",
    "arabic with harakat": "يُحَمَّلُ النَّمُوذَجُ بِأَرْبَعِ بِتَّاتٍ لِيَتَّسِعَ فِي بِطَاقَةٍ وَاحِدَةٍ، ثُمَّ تُدَرَّبُ "
                           "المُحَوِّلَاتُ الصَّغِيرَةُ فَقَط وَتَبْقَى أَوْزَانُ النَّمُوذَجِ الأَصْلِيِّ ثَابِتَةً.",
    "ukrainian": "Модель завантажується у чотирьох бітах, щоб поміститися на T4. Потім навчаються лише невеликі "
                 "адаптери, а ваги базової моделі залишаються замороженими.",
    "chinese": HEALTHY["chinese"],
    "english": HEALTHY["license"],
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
@pytest.mark.parametrize("form", ["NFC", "NFD"])
def test_scripts_with_combining_marks_are_healthy_at_every_prefix(name, form):
    import unicodedata

    text = unicodedata.normalize(form, SCRIPTS[name])
    flagged = [k for k in range(40, len(text) + 1, 7) if detect(text[:k]).degenerate]
    assert not flagged and not detect(text).degenerate, (name, form, detect(text[:flagged[0]]) if flagged else None)


@pytest.mark.parametrize("ruler", ["~" * 40, "-" * 60, "=" * 30, "—" * 30, "＝" * 30, "─" * 50, "_" * 40, "ー" * 20,
                                   "ـ" * 20, "· " * 20])
def test_rulers_are_judged_the_same_in_every_script(ruler):
    verdicts = {name: detect(text + "\n\n" + ruler + "\n\n" + text).degenerate for name, text in SCRIPTS.items()}
    assert set(verdicts.values()) == {False}, verdicts
    assert all(detect(ruler * 6).degenerate for _ in [0])  # a ruler as long as a page is not layout
