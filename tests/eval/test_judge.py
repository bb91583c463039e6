"""05's figures against the SFT adapter: implicit rewards from two adapters on one base, and the reward intervals."""

import pytest

from nbutils.eval import judge


@pytest.fixture(scope="module")
def two_adapters():
    from peft import LoraConfig, get_peft_model

    from nbutils.data import chatformat
    from nbutils.train import modeling

    tok = chatformat.load_tokenizer("embedded")
    model = get_peft_model(modeling.load_base("embedded"), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    model.add_adapter(judge.SFT, model.peft_config["default"])  # both zero-initialised: the same policy
    model.eval()
    return model, tok


def _rows(tok):
    prompt = tok.apply_chat_template([{"role": "user", "content": "what kind of word is oslo ?"}], tokenize=False,
                                     add_generation_prompt=True)
    return [{"prompt": prompt, "chosen": " city\n<|end|>", "rejected": " food\n<|end|>"}] * 3


def test_the_sft_adapter_against_itself_scores_one_half_with_zero_margin(two_adapters):
    model, tok = two_adapters
    fig = judge.pair_figures(model, tok, _rows(tok), beta=0.1)
    assert fig["preference_accuracy"] == 0.5 and fig["reward_margin"] == pytest.approx(0.0, abs=1e-6)
    assert model.active_adapter == "default"  # restored after switching to "sft"


def test_answer_logps_sum_the_answer_tokens_only(two_adapters):
    import torch

    model, tok = two_adapters
    row = _rows(tok)[0]
    got = judge.answer_logps(model, tok, [row["prompt"]], [row["chosen"]])[0]
    ids = tok(row["prompt"] + row["chosen"], add_special_tokens=False, return_tensors="pt")["input_ids"]
    n = len(tok(row["prompt"], add_special_tokens=False)["input_ids"])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits.float(), -1)
    want = sum(logp[0, i - 1, ids[0, i]].item() for i in range(n, ids.shape[1]))
    assert got == pytest.approx(want, rel=1e-5)


def test_accuracy_and_margin_follow_the_two_adapters_log_probabilities(two_adapters):
    import torch

    model, tok = two_adapters
    rows = _rows(tok)[:1] + [{**_rows(tok)[0], "chosen": " food\n<|end|>", "rejected": " city\n<|end|>"}]
    torch.manual_seed(0)
    for name, p in model.named_parameters():
        if ".default." in name and "lora_B" in name:
            p.data.normal_(0, 0.5)  # the policy moves away from the SFT adapter
    try:
        fig = judge.pair_figures(model, tok, rows, beta=0.5)
        logps = {}
        for name in ("default", judge.SFT):
            with judge.adapter(model, name):
                logps[name] = [judge.answer_logps(model, tok, [r["prompt"]] * 2, [r["chosen"], r["rejected"]])
                               for r in rows]
        margins = [0.5 * ((p[0] - s[0]) - (p[1] - s[1])) for p, s in zip(logps["default"], logps[judge.SFT])]
        assert fig["reward_margin"] == pytest.approx(sum(margins) / 2, rel=1e-5)
        assert margins[0] == pytest.approx(-margins[1], rel=1e-5) and fig["preference_accuracy"] == 0.5
    finally:
        for name, p in model.named_parameters():
            if ".default." in name and "lora_B" in name:
                p.data.zero_()


def test_reward_figures_pair_the_prompts():
    fig = judge.reward_figures([0.0, 0.5, 0.5, 0.0], [1.0, 1.0, 0.5, 0.5], n_boot=200)
    assert fig["delta"]["mean"] == pytest.approx(0.5) and fig["delta"]["ci"][0] > 0
    assert fig["win_tie_loss"] == {"win": 3, "tie": 1, "loss": 0}


def test_kto_held_out_rows_get_label_accuracy_not_a_key_error(two_adapters):
    model, tok = two_adapters
    pair = _rows(tok)[0]
    kto = [{"prompt": pair["prompt"], "completion": pair["chosen"], "label": True},
           {"prompt": pair["prompt"], "completion": pair["rejected"], "label": False}]
    figs = judge.held_out_figures(model, tok, kto, beta=0.1)
    assert set(figs) == {"unpaired"}  # no pair to rank: no preference accuracy
    u = figs["unpaired"]
    assert (u["n_rows"], u["n_desirable"], u["n_undesirable"]) == (2, 1, 1)
    assert u["label_accuracy"] == 0.5 and u["reward_gap"] == pytest.approx(0.0, abs=1e-6)  # the SFT adapter itself
    both = judge.held_out_figures(model, tok, [pair, *kto], beta=0.1)
    assert both["preference"]["n_pairs"] == 1 and both["unpaired"]["n_rows"] == 2
    report = {"base": {"task_metric": 0.25}, "tuned": {"task_metric": 0.5}, **figs}
    assert "label accuracy 0.5 (SFT) -> 0.500" in judge.summary_line("kto", report)
    assert "on 2 held-out unpaired rows" in judge.summary_line("kto", report)


def test_the_summary_line_names_the_primary_metric():
    block = lambda v: {"task_metric": 0.0, "primary_metric": {"name": "rouge_l", "value": v}}  # noqa: E731
    assert judge.summary_line("dpo", {"base": block(0.25), "tuned": block(0.5)}) == "[dpo] rouge_l 0.250 (SFT) -> 0.500"


def test_answer_logps_keep_their_order_whatever_batches_the_tokens_make(two_adapters):
    model, tok = two_adapters
    row = _rows(tok)[0]
    answers = [row["chosen"], row["rejected"] * 3, row["chosen"] * 2]  # three lengths: batched longest first
    together = judge.answer_logps(model, tok, [row["prompt"]] * 3, answers)
    alone = [judge.answer_logps(model, tok, [row["prompt"]], [a], batch_tokens=1)[0] for a in answers]
    assert together == pytest.approx(alone, rel=1e-5) and len(set(together)) == 3


def _as_trls_dpo(tok, chosen: str, rejected: str) -> tuple[str, str, str, dict]:
    """05's row for one question (pairs.render) and the ids trl's DPO prepares from it for training."""
    from types import SimpleNamespace

    from datasets import Dataset
    from trl import DPOTrainer

    from nbutils.data import pairs

    question = [{"role": "user", "content": "What is the capital of France?"}]
    prompt, chosen_text = pairs.render(tok, question, chosen)
    rejected_text = pairs.render(tok, question, rejected)[1]
    args = SimpleNamespace(dataset_num_proc=None, max_length=None, truncation_mode="keep_start")
    data = Dataset.from_list([{"prompt": prompt, "chosen": chosen_text, "rejected": rejected_text}])
    return prompt, chosen_text, rejected_text, DPOTrainer._prepare_dataset(SimpleNamespace(_tokenizer=tok), data, tok,
                                                                          args, "train")[0]


def test_answers_are_tokenized_as_trls_dpo_tokenizes_them_for_training(twin):
    """Phi-3.5's SentencePiece merges across the prompt's end: trl's DPO tokenizes prompt + answer whole and splits
    at the common prefix (training sees 'Par', 'is', and EOS appended after <|end|>); the judge scores those tokens,
    not '▁Paris' from the answer tokenized alone."""
    from nbutils.data import chatformat

    tok = chatformat.load_tokenizer(str(twin("phi-3.5-mini")))
    prompt, chosen, rejected, trl = _as_trls_dpo(tok, "Paris is the capital.", "London.")
    context, (c, r) = judge.trl_ids(tok, prompt, [chosen, rejected])
    assert (context, c, r) == (trl["prompt_ids"], trl["chosen_ids"], trl["rejected_ids"])
    assert tok.convert_ids_to_tokens(c)[:2] == ["Par", "is"] and c[-1] == tok.eos_token_id


def test_answer_logps_score_trls_tokens_in_batches_of_the_tokens_given(two_adapters, monkeypatch):
    model, tok = two_adapters
    row = _rows(tok)[0]
    context, [answer] = judge.trl_ids(tok, row["prompt"], [row["chosen"]])
    want = judge.score_ids(model, tok.pad_token_id, [(context, answer)])
    asked = []
    real = judge.score_ids
    monkeypatch.setattr(judge, "score_ids", lambda *a, **kw: asked.append(a[3] if len(a) > 3 else None) or real(*a))
    assert judge.answer_logps(model, tok, [row["prompt"]], [row["chosen"]]) == pytest.approx(want)
    judge.held_out_figures(model, tok, _rows(tok), 0.1, batch_tokens=96)
    assert asked[1:] == [96] * 4  # chosen and rejected, under both adapters: the plan's batch, not 16,384


def test_held_out_intervals_use_the_notebooks_bootstrap_and_the_line_flags_few_pairs(two_adapters, monkeypatch):
    model, tok = two_adapters
    asked = []
    monkeypatch.setattr(judge.metrics, "bootstrap_ci", lambda xs, n=1000, seed=0: asked.append((n, seed)) or [0.0, 1.0])
    pair = _rows(tok)[0]
    kto = {"prompt": pair["prompt"], "completion": pair["chosen"], "label": True}
    figs = judge.held_out_figures(model, tok, [pair, kto], 0.1, n_boot=77, seed=5)
    assert asked == [(77, 5)] * 3 and figs["preference"]["bootstrap"] == {"n": 77, "seed": 5}
    block = {"task_metric": 0.0}
    line = judge.summary_line("dpo", {"base": block, "tuned": block, **figs})
    assert "on 1 held-out pairs (only 1 pairs: too few for the interval to mean much)" in line
    assert "(only 1 rows: too few" in line
    many = {**figs["preference"], "n_pairs": judge.FEW}
    assert "too few" not in judge.summary_line("dpo", {"base": block, "tuned": block, "preference": many})


def test_the_held_out_reward_calls_a_trl_style_reward_function_as_trl_does(two_adapters):
    """GRPO's rows are chat prompts: trl passes prompts (message lists), completions (assistant message lists),
    completion_ids and the columns; a function that trains on them judges the held-out reward unchanged."""
    model, tok = two_adapters
    rows = [{"prompt": [{"role": "user", "content": "what kind of word is oslo ?"}], "answer": "city"},
            {"prompt": [{"role": "user", "content": "what kind of word is bread ?"}], "answer": "food"}]
    seen = []

    def strict(prompts, completions, completion_ids, answer, trainer_state, **kw):
        assert all(isinstance(p, list) and p[0]["role"] == "user" for p in prompts)
        assert all(c[0]["role"] == "assistant" and isinstance(c[0]["content"], str) for c in completions)
        assert all(isinstance(i, list) and all(isinstance(t, int) for t in i) for i in completion_ids)
        seen.append(answer)
        return [1.0] * len(completions)

    got = judge.sampled_rewards(model, tok, rows, [strict], samples=2, max_new_tokens=4, seed=0)
    assert got == [1.0, 1.0] and seen == [["city", "city", "food", "food"]]


def test_task_figures_score_the_eval_loss_in_the_plans_batches(monkeypatch):
    asked = []

    def score(model, tok, ds, prompts, refs, new_tokens, guard, **kw):
        asked.append(kw["batch_tokens"])
        return {"task_metric": 0.0}, [{"text": "r"}]

    class Model:
        active_adapter = "default"

        def set_adapter(self, name):
            self.active_adapter = name

    monkeypatch.setattr(judge.evaluation, "prompts_and_references", lambda ds, tok, limit: (["p"], ["r"]))
    monkeypatch.setattr(judge.evaluation, "score", score)
    monkeypatch.setattr(judge.evaluation, "sample_rows", lambda *a: [])
    monkeypatch.setattr(judge.metrics, "compare", lambda *a: {})
    judge.task_figures(Model(), None, None, 1, 4, 10, 0, batch_tokens=3840)
    assert asked == [3840, 3840]


@pytest.mark.parametrize("adds_bos", [True, False])
def test_the_judge_and_trl_see_one_bos_where_the_tokenizer_adds_its_own(twin, adds_bos):
    """Gemma-2 with add_bos_token=true (as it ships, and its twin) adds BOS itself: 05's rows leave the template's
    out, and trl's DPO and the judge both tokenize them with one BOS; with add_bos_token=false the template's is it."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(twin("gemma-2")), add_bos_token=adds_bos)
    prompt, chosen, rejected, trl = _as_trls_dpo(tok, "Paris.", "London.")
    assert trl["prompt_ids"][0] == tok.bos_token_id and trl["prompt_ids"].count(tok.bos_token_id) == 1
    for text in (prompt, tok.bos_token + prompt if adds_bos else prompt):  # rendered text with its BOS: one all the same
        context, (c, r) = judge.trl_ids(tok, text, [chosen, rejected])
        assert (context, c, r) == (trl["prompt_ids"], trl["chosen_ids"], trl["rejected_ids"])
