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


def test_auto_prompts_and_missing_template(model_and_tokenizer, prepared_data):
    from nbutils.data import splits

    prompts = chat.questions(splits.load_split(prepared_data, "eval"), "auto", 2)
    assert len(prompts) == 2 and all(p and p[-1]["role"] == "user" for p in prompts)
    model, tok = model_and_tokenizer
    assert chat.chat(model, tok, prompts, max_new_tokens=4, stream=False)  # conversations are asked as they are
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
    assert chat.questions(ds, ["one", "two"]) == ["one", "two"]
    assert chat.questions(ds, "auto") == [[{"role": "user", "content": "q1?"}]]


def test_auto_chat_asks_the_whole_conversation_before_the_answer(model_and_tokenizer):
    """Only the last user message of each record was asked, without its system prompt or earlier turns."""
    from datasets import Dataset

    turns = [{"role": "system", "content": "Answer as a pirate."}, {"role": "user", "content": "q1?"},
             {"role": "assistant", "content": "a1"}, {"role": "user", "content": "q2?"}]
    ds = Dataset.from_list([{"messages": [*turns, {"role": "assistant", "content": "a2"}]}])
    assert chat.questions(ds, "auto") == [turns]
    _, tok = model_and_tokenizer
    model = Replying(tok, "a2")
    assert chat.chat(model, tok, chat.questions(ds, "auto"), stream=False) == ["a2"]
    assert model.prompts == [tok.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)]


class Replying:
    """A stand-in for a model whose generate answers `reply` after any prompt, and keeps the prompts it was given."""

    device = "cpu"

    def __init__(self, tok, reply: str):
        self.tok, self.reply, self.prompts = tok, tok(reply, add_special_tokens=False)["input_ids"], []

    def generate(self, input_ids, **kwargs):
        import torch

        self.prompts.append(self.tok.decode(input_ids[0]))
        return torch.cat([input_ids, torch.tensor([self.reply])], dim=1)


def test_qwen3_chat_is_asked_as_eval_asks_and_shows_the_answer_without_its_think_block(twin, capsys):
    """03 trained Qwen3 on answers behind an empty think block: chat renders that prompt (evaluation.render_prompt),
    and an answer that opens with a think block (whose markers are not special tokens) is shown without it."""
    from nbutils.data import chatformat
    from nbutils.eval import evaluation

    tok = chatformat.load_tokenizer(twin("qwen3"))
    model = Replying(tok, "<think>\n\n</think>\n\nParis<|im_end|>")
    assert chat.chat(model, tok, ["Capital of France?"], stream=False) == ["Paris"]
    asked = [{"role": "user", "content": "Capital of France?"}]
    assert model.prompts == [evaluation.render_prompt(tok, asked)] and model.prompts[0].endswith("</think>\n\n")
    assert "think>" not in capsys.readouterr().out


def test_chat_is_greedy_whatever_the_generation_config_says(model_and_tokenizer):
    """generate starts from the model's generation_config, whose repetition_penalty applies to greedy decoding too."""
    import copy

    model, tok = model_and_tokenizer
    asked = ["record record record record", "what kind of word is oslo ?"]
    plain, config = chat.chat(model, tok, asked, max_new_tokens=24, stream=False), model.generation_config
    model.generation_config = copy.deepcopy(config)
    model.generation_config.repetition_penalty = 1.3
    try:
        assert chat.chat(model, tok, asked, max_new_tokens=24, stream=False) == plain
    finally:
        model.generation_config = config
