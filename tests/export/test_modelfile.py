"""The Modelfile: the Go template derived from each family's real chat template renders what the Jinja template
renders with the generation prompt the model was trained to continue (Qwen3: enable_thinking=False), through a small
Go-template interpreter and Ollama's view of a chat; one stop line per stop token."""

import re

import pytest

from nbutils.export import modelfile
from tests.export import gotemplate
from tests.twins import templates

TEMPLATES = {"llama-3.1": templates.LLAMA_31, "qwen2.5": templates.QWEN25, "qwen3": templates.QWEN3,
             "gemma-2": templates.GEMMA2, "gemma-3": templates.GEMMA3, "mistral-v0.3": templates.MISTRAL_V03,
             "phi-3.5": templates.PHI35, "smollm2": templates.SMOLLM2}
# Gemma 2 refuses a system role; Mistral v0.3 puts it into the last user turn, which a Modelfile cannot say.
NO_SYSTEM = {"gemma-2", "mistral-v0.3"}
# The prompt 01's training text has before a plain answer: Qwen3's ends with the empty think block of its
# non-thinking form; every other family's is the default generation prompt.
VARIANTS = {"qwen3": {"enable_thinking": False}}
CHATS = [[{"role": "user", "content": "Hi there"}],
         [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "And?"}],
         [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"},
          {"role": "assistant", "content": "d"}, {"role": "user", "content": "e"}]]
SYSTEM_CHATS = [[{"role": "system", "content": "Be brief."}, *c] for c in CHATS]


@pytest.fixture
def family_tok(tok):
    """tok(name) -> the embedded tokenizer wearing a family's chat template (only the template matters here); the
    session's tokenizer gets its own template back after the test."""
    own = tok.chat_template

    def wear(name):
        tok.chat_template = TEMPLATES[name]
        return tok
    yield wear
    tok.chat_template = own


def _jinja(tok, chat, name=""):
    return tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True, **VARIANTS.get(name, {}))


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_go_template_renders_what_the_chat_template_renders(family_tok, name):
    tok = family_tok(name)
    pieces = modelfile.derive(tok)
    assert isinstance(pieces, modelfile.Pieces), pieces
    go = modelfile.go_template(pieces)
    for chat in CHATS:
        assert gotemplate.render(go, chat) == _jinja(tok, chat, name), (name, chat)
    assert (pieces.system == "") == (name in NO_SYSTEM)
    for chat in SYSTEM_CHATS if pieces.system else ():
        assert gotemplate.render(go, chat) == _jinja(tok, chat, name), (name, chat)


def _split_specials(pieces, specials):
    """(piece, special token) where a piece begins with the token's tail or ends with its head: the token cut in two."""
    return [(name, tok) for name, text in vars(pieces).items() if name != "system" for tok in specials
            for k in range(1, len(tok)) if text.endswith(tok[:k]) or text.startswith(tok[k:])]


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_bos_the_tokenizer_adds_is_left_out_of_the_template_and_no_special_token_is_split(family_tok, name):
    """llama.cpp adds BOS itself: a template that writes it must lose it whole (Mistral's "<s>[INST] " after the
    header and "</s>[INST] " after an answer share "s>[INST] ", which once left "<" as the header)."""
    tok = family_tok(name)
    pieces = modelfile.derive(tok)
    assert not _split_specials(pieces, tok.all_special_tokens), pieces
    bos = tok.bos_token if modelfile.starts_with_bos(tok) else None
    go = modelfile.go_template(pieces, bos=bos)
    for chat in CHATS + (SYSTEM_CHATS if pieces.system else []):
        assert not bos or not gotemplate.render(go, chat).startswith(bos), (name, chat)
        assert (bos or "") + gotemplate.render(go, chat) == _jinja(tok, chat, name), (name, chat)
    assert (name in {"llama-3.1", "gemma-2", "gemma-3", "mistral-v0.3"}) == bool(bos)


def test_modelfile_has_from_template_and_one_stop_per_stop_token(family_tok):
    tok = family_tok("qwen2.5")
    stops = [tok.eos_token_id, tok.pad_token_id, tok.eos_token_id]  # a repeat is one stop line
    text, info = modelfile.modelfile("model-q8_0.gguf", tok, stops)
    assert text.splitlines()[1] == "FROM ./model-q8_0.gguf"
    assert re.findall(r'^PARAMETER stop "(.*)"$', text, re.M) == [tok.eos_token, tok.pad_token]
    template = re.search(r'TEMPLATE """(.*)"""', text, re.S).group(1)
    assert gotemplate.render(template, CHATS[1]) == _jinja(tok, CHATS[1])
    assert info["system"] == "separate"
    # greedy as 03 decodes: no repetition penalty (Ollama's default is 1.1)
    assert {"PARAMETER temperature 0", "PARAMETER repeat_penalty 1"} <= set(text.splitlines())


def test_a_template_it_cannot_express_gives_the_reason_and_no_template(tok):
    own, tok.chat_template = tok.chat_template, "{{ messages | length }} turns{% if add_generation_prompt %}:{% endif %}"
    try:
        text, info = modelfile.modelfile("m.gguf", tok, [tok.eos_token_id])
    finally:
        tok.chat_template = own
    assert "TEMPLATE" not in text and "falls back to the GGUF's own chat template" in info["template"]


def test_the_interpreter_refuses_what_it_does_not_know():
    with pytest.raises(ValueError, match="unsupported"):
        gotemplate.render("{{ range .Messages }}{{ .Content | upper }}{{ end }}", CHATS[0])


def test_the_modelfile_follows_what_llama_cpp_confirmed(family_tok):
    """Stops llama.cpp ends on come first, one it does not is marked; BOS stays in the template where llama.cpp was
    seen not to add it; the check's verdict is the third line."""
    tok = family_tok("llama-3.1")
    stops = [tok.eos_token_id, tok.pad_token_id]
    runtime = {"checked": True, "ok": False, "reason": "llama.cpp does not end generation on ...",
               "stops": {"confirmed": [tok.pad_token_id]}, "tokens": {"add_bos": False}}
    text, info = modelfile.modelfile("m.gguf", tok, stops, runtime=runtime)
    lines = text.splitlines()
    assert lines[2] == "# FAILED in llama.cpp: llama.cpp does not end generation on ..."
    assert re.findall(r'^PARAMETER stop "(.*)"$', text, re.M) == [tok.pad_token, tok.eos_token]
    marked = lines.index(f'PARAMETER stop "{tok.eos_token}"') - 1
    assert lines[marked].startswith("# the model stops here, but llama.cpp does not end generation on it")
    assert info["stops_confirmed_in_llama_cpp"] == [tok.pad_token]
    template = re.search(r'TEMPLATE """(.*)"""', text, re.S).group(1)
    assert gotemplate.render(template, CHATS[0]) == _jinja(tok, CHATS[0])  # BOS kept: llama.cpp adds none here
    unchecked, _ = modelfile.modelfile("m.gguf", tok, stops, runtime={"checked": False, "reason": "verify_runtime=False"})
    assert unchecked.splitlines()[2] == "# not run in llama.cpp: verify_runtime=False"


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_the_prompt_is_the_one_training_continued_qwen3s_empty_think_block_after_the_last_turn_only(family_tok, name):
    """A Qwen3 model tuned on plain answers learnt them after '<think>\\n\\n</think>\\n\\n' (01's text, 03's prompt):
    Ollama's prompt ends there too, past answers have no think block (the template drops it), and llama-cli is
    asked for the same prompt. Other families keep the default prompt and the plain command."""
    tok = family_tok(name)
    assert modelfile.prompt_variant(tok) == VARIANTS.get(name, {})
    pieces = modelfile.derive(tok)
    assert pieces.prompt_tail == ("<think>\n\n</think>\n\n" if name == "qwen3" else "")
    text, info = modelfile.modelfile("m.gguf", tok, [tok.eos_token_id])
    template = re.search(r'TEMPLATE """(.*)"""', text, re.S).group(1)
    bos = tok.bos_token if modelfile.starts_with_bos(tok) else ""  # llama.cpp adds it
    for chat in CHATS:
        ollama = gotemplate.render(template, chat)
        assert bos + ollama == _jinja(tok, chat, name), (name, chat)
        assert ollama.count("<think>") == (name == "qwen3")
    command = modelfile.llama_cpp_command("m.gguf", variant=info["prompt_variant"])
    assert command.endswith(" --reasoning off") == (name == "qwen3")
    assert ("enable_thinking=False" in text) == (name == "qwen3")


def test_a_conversation_ending_with_an_answer_gets_no_generation_prompt(family_tok):
    tok = family_tok("qwen3")
    go = modelfile.go_template(modelfile.derive(tok))
    chat = CHATS[1][:2]
    assert gotemplate.render(go, chat) == modelfile.render_pieces(modelfile.derive(tok), chat)
    assert not gotemplate.render(go, chat).endswith("</think>\n\n")


def test_llama_cli_takes_other_template_arguments_as_json():
    assert modelfile.llama_cpp_command("m.gguf", 2048) == "llama-cli -m m.gguf -c 2048 --temp 0"
    assert modelfile.llama_cpp_command("m.gguf", variant={"enable_thinking": False, "x": 1}) == (
        "llama-cli -m m.gguf -c 4096 --temp 0 --reasoning off --chat-template-kwargs '{\"x\": 1}'")
