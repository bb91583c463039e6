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
