"""The chat cell's helper: streams interactively, prints whole in a batch run, refuses a tokenizer without a template."""

import pytest

from nbutils.eval import chat


@pytest.fixture(scope="module")
def model_and_tokenizer(embedded_dir):
    from transformers import AutoModelForCausalLM

    from nbutils import embedded
    from nbutils.data.chatformat import load_tokenizer

    return AutoModelForCausalLM.from_pretrained(embedded.resolve_model("embedded")).eval(), load_tokenizer("embedded")


def test_streamed_and_plain_answers_agree(model_and_tokenizer, capsys, monkeypatch):
    model, tok = model_and_tokenizer
    streamed = chat.chat(model, tok, ["what kind of word is oslo ?"], max_new_tokens=8, stream=True)
    out_streamed = capsys.readouterr().out
    monkeypatch.setenv("KAGGLE_KERNEL_RUN_TYPE", "Batch")  # a batch run: no stream, the answer printed whole
    plain = chat.chat(model, tok, ["what kind of word is oslo ?"], max_new_tokens=8)
    out_plain = capsys.readouterr().out
    assert streamed == plain and len(plain) == 1 and plain[0]  # the base model says something (not the task answer)
    assert out_plain.startswith("user: what kind of word is oslo ?\nmodel: ") and plain[0] in out_plain
    assert plain[0] in out_streamed


def test_user_prompts_and_missing_template(model_and_tokenizer, prepared_data):
    from nbutils.data import splits

    prompts = chat.user_prompts(splits.load_split(prepared_data, "eval"), 2)
    assert len(prompts) == 2 and all(isinstance(p, str) and p for p in prompts)
    model, tok = model_and_tokenizer
    template, tok.chat_template = tok.chat_template, None
    try:
        with pytest.raises(ValueError, match="no chat template"):
            chat.chat(model, tok, ["hi"])
    finally:
        tok.chat_template = template


def test_chat_prompts_given_as_one_string_is_one_prompt_not_one_per_character():
    from datasets import Dataset

    ds = Dataset.from_list([{"messages": [{"role": "user", "content": "q1?"}, {"role": "assistant", "content": "a"}]}])
    assert chat.questions(ds, "How do I reset it?") == ["How do I reset it?"]
    assert chat.questions(ds, ["one", "two"]) == ["one", "two"] and chat.questions(ds, "auto") == ["q1?"]
