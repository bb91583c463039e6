"""Degeneration guard: detection per class, healthy text left alone, streaming guard, circuit breaker."""

import json
import subprocess
import sys

import pytest
import torch

from nbutils.degeneration import CircuitBreaker, DegenerationError, Verdict, detect, summarize

DEGENERATE = {
    "char-repeat": "The answer is: " + "a" * 40,
    "token-repeat": "Sure. " + "hello " * 12,
    "loop": "Here is my plan. I will go to the store. I will go to the store. I will go to the store. ",
    "counting-loop": "Steps: " + " ".join(f"Step {i}: add the flour to the bowl." for i in range(41, 48)),
    "word-soup": "apple river quantum blue seven dance window happily orange mountain jazz pencil cloud frog silver "
                 "tiger marble lamp echo violin candle basket",
    "subword-soup": "The Ġcat Ġsat Ġon Ġthe Ġmat",
    "unicode-junk": "Résumé: CafÃ© rÃ©sumÃ© naÃ¯ve faÃ§ade",
    "empty": "  \n ",
    "special-tokens-only": "<|end|><|pad|></s>",
}
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


@pytest.mark.parametrize("reason", sorted(DEGENERATE))
def test_each_class_is_caught(reason):
    v = detect(DEGENERATE[reason])
    assert v.degenerate and reason in v.reasons, v


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


def test_cli_prints_one_verdict_per_line_and_a_summary(tmp_path):
    path = tmp_path / "gen.jsonl"
    path.write_text(json.dumps({"text": "fine answer."}) + "\n" + json.dumps({"text": "ha " * 20}) + "\n{oops\n")
    out = subprocess.run([sys.executable, "-m", "nbutils.degeneration", "check", str(path)], capture_output=True,
                         text=True)
    lines = [json.loads(x) for x in out.stdout.splitlines()]
    assert out.returncode == 0 and len(lines) == 4
    assert lines[0]["degenerate"] is False and lines[1]["degenerate"] is True and "error" in lines[2]
    assert lines[3]["summary"]["checked"] == 2 and lines[3]["summary"]["unreadable_lines"] == 1


def test_circuit_breaker_message():
    breaker = CircuitBreaker(min_samples=4, max_share=0.5)
    breaker.update(["good answer.", "ok " * 20])
    with pytest.raises(DegenerationError, match=r"3 of the first 4 generations \(75%\).*no EOS|EOS"):
        breaker.update(["la " * 20, "<|end|><|end|>"])


def test_summarize_counts_no_eos_and_tokens_saved():
    rows = [{"tokens": 32, "eos": False, "verdict": Verdict(True, ["loop"]), "guard_stopped": False},
            {"tokens": 8, "eos": False, "verdict": Verdict(True, ["loop"]), "guard_stopped": True},
            {"tokens": 3, "eos": True, "verdict": Verdict(False), "guard_stopped": False}]
    s = summarize(rows, max_new_tokens=32)
    assert s["no_eos_at_max"] == 1 and s["tokens_saved"] == 24 and s["reasons"] == {"loop": 2}
    assert s["eos_rate"] == pytest.approx(1 / 3) and s["degenerate_rate"] == pytest.approx(2 / 3)


def test_guard_stops_only_the_looping_row():
    from nbutils.guard import DegenerationGuard
    from nbutils.modeling import load_tokenizer

    tok = load_tokenizer("embedded")
    words = tok(" " + HEALTHY["license"] + " " + HEALTHY["changelog"], add_special_tokens=False)["input_ids"]
    loop = tok(" i will go", add_special_tokens=False)["input_ids"]
    prompt = torch.zeros((3, 4), dtype=torch.long)
    guard = DegenerationGuard(tok, prompt_length=4, check_every=8, text_every=8)
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
    from nbutils.modeling import load_tokenizer

    tok = load_tokenizer("embedded")
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(embedded.resolve_model("embedded")).eval()
    prompts = [tok.apply_chat_template([{"role": "user", "content": r["instruction"]}], tokenize=False,
                                       add_generation_prompt=True) for r in embedded.task_records(8, seed=3)]
    return model, tok, tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)


def test_healthy_rows_identical_with_and_without_guard(tiny):
    from transformers import StoppingCriteriaList

    from nbutils.guard import DegenerationGuard, ObservingLogits

    model, tok, enc = tiny
    kw = dict(max_new_tokens=48, do_sample=False, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    plain = model.generate(**enc, **kw)
    guard = DegenerationGuard(tok, enc["input_ids"].shape[1])
    observer = ObservingLogits()
    guarded = model.generate(**enc, **kw, stopping_criteria=StoppingCriteriaList([guard]), logits_processor=[observer])
    width = enc["input_ids"].shape[1]
    for i, state in enumerate(guard.report()):
        if not state["stopped"]:
            a, b = plain[i, width:].tolist(), guarded[i, width:].tolist()
            n = min(len(a), len(b))
            assert a[:n] == b[:n] and all(t == tok.pad_token_id for t in a[n:] + b[n:])
    assert len(observer.summary()) == 8 and all(s["mean_entropy"] >= 0 for s in observer.summary())


def test_observing_processor_returns_scores_unchanged():
    from nbutils.guard import ObservingLogits

    scores = torch.randn(2, 10)
    assert torch.equal(ObservingLogits()(None, scores.clone()), scores)


@pytest.fixture(scope="module")
def broken(prepared_data, tmp_path_factory):
    """An adapter trained with EOS masked out of the loss (what pad == EOS does), on the embedded default."""
    from nbutils import data, modeling, training
    from nbutils.trainconfig import TrainConfig

    tok = modeling.load_tokenizer("embedded")
    train = data.load_split(prepared_data, "train").map(
        lambda r: {"labels": [-100 if t == tok.eos_token_id else lab for t, lab in zip(r["input_ids"], r["labels"])]})
    model = modeling.attach_lora(modeling.load_base("embedded", "fp32", True), r=8)
    training.train(model, tok, train, data.load_split(prepared_data, "eval"),
                   TrainConfig(max_steps=60, eval_steps=20, save_steps=20, resume=False),
                   tmp_path_factory.mktemp("broken"), progress="off")
    return model.eval(), tok, data.load_split(prepared_data, "eval")


def test_broken_model_guard_saves_tokens_and_breaker_stops(broken):
    from nbutils import evaluation

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
