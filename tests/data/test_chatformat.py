"""Tokenizer preparation, stop tokens, roles and labels on every family twin (tests/twins/families.py)."""

import json

import pytest
import torch
from transformers import AutoConfig, AutoTokenizer, LogitsProcessor, LogitsProcessorList

from nbutils.data import chatformat, pairs, splits
from nbutils.eval import evaluation
from nbutils.train import checkpoints, modeling
from tests import recipe
from tests.twins import templates
from tests.twins.families import FAMILIES

# The quick loop (make test-fast) checks three families that differ most (an instruct template with its own
# end-of-turn token, a template that refuses the system role, a base model without a template); make test, all.
QUICK = ("llama-3.2-instruct", "gemma-2", "pythia-base")
NAMES = [name if name in QUICK else pytest.param(name, marks=pytest.mark.integration) for name in sorted(FAMILIES)]
CONVS = [
    [{"role": "system", "content": "answer in one word ."}, {"role": "user", "content": "what kind of word is oslo ?"},
     {"role": "assistant", "content": "city"}, {"role": "user", "content": "and bread ?"},
     {"role": "assistant", "content": "food"}],
    [{"role": "user", "content": "classify the word cat ."}, {"role": "user", "content": "one word please ."},
     {"role": "assistant", "content": "pet"}],
    [{"role": "user", "content": "tell me what rome is ."}, {"role": "assistant", "content": "city"}],
]


_TOKENIZERS: dict = {}


def _tok(twin, name):
    """The prepared tokenizer of a twin, loaded once per module: a real Llama 3 vocabulary takes about 2 s to read,
    and nothing here changes a tokenizer (generate puts its padding side back)."""
    if name not in _TOKENIZERS:
        _TOKENIZERS[name] = chatformat.load_tokenizer(twin(name))
    return _TOKENIZERS[name]


def _prepared(twin, name, tmp_path):
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"messages": c}) + "\n" for c in CONVS))
    tok = _tok(twin, name)
    m = splits.prepare([str(path)], tmp_path / "out", tok, eval_fraction=0.0001, verbose=False, plot=False)
    return tok, m, list(splits.load_split(tmp_path / "out", "train")) + list(splits.load_split(tmp_path / "out", "eval"))


def _label_runs(row):
    runs, cur = [], []
    for t, lab in zip(row["input_ids"], row["labels"]):
        if lab != splits.IGNORE_INDEX:
            cur.append(t)
        elif cur:
            runs.append(cur)
            cur = []
    return runs + ([cur] if cur else [])


@pytest.mark.parametrize("name", NAMES)
def test_labels_end_every_answer_with_the_token_the_family_stops_on(twin, name, tmp_path):
    fam = FAMILIES[name]
    tok, manifest, rows = _prepared(twin, name, tmp_path)
    stop = tok.convert_tokens_to_ids(fam.expect_stop)
    model = type("M", (), {"generation_config": __import__("transformers").GenerationConfig.from_pretrained(twin(name))})
    assert stop in chatformat.stop_ids(tok, model)  # what generation stops on
    assert manifest["counts"]["quarantined"] == 0, json.loads((tmp_path / "out" / "quarantine.jsonl").read_text() or "{}")
    for row in rows:
        answers = [m for m in row["messages"] if m["role"] == "assistant"]
        runs = _label_runs(row)
        assert len(runs) == len(answers), (name, tok.decode(row["input_ids"]))
        for run, ans in zip(runs, answers):
            assert run[-1] == stop, (name, tok.decode(run))
            assert ans["content"] in tok.decode(run)
    assert manifest["tokens"]["end_of_turn"] == fam.expect_stop


@pytest.mark.parametrize("name", NAMES)
def test_preference_pairs_render_as_01_rendered_the_conversation(twin, name, tmp_path):
    """05's pairs (nbutils.data.pairs) give, prompt + chosen tokenized as trl tokenizes text rows (with the
    tokenizer's special tokens: Llama-3, Gemma and Mistral add their BOS there, so the row leaves the template's out),
    exactly the tokens 01 gave the same conversation, and each answer ends on the family's stop token (a newline a
    template writes after it is not the answer's): what DPO compares is what SFT trained on. 05 itself runs on every
    family in tests/test_families.py."""
    tok, _, rows = _prepared(twin, name, tmp_path)
    conv = CONVS[2]
    sft = next(r for r in rows if r["messages"][0]["content"] == conv[0]["content"])
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps({"prompt": conv[0]["content"], "chosen": conv[1]["content"], "rejected": "food"}) + "\n")
    [row], ledger = pairs.read([str(path)], tok, 128)
    assert ledger.counts["kept"] == 1
    stop = tok.convert_tokens_to_ids(FAMILIES[name].expect_stop)
    through_stop = sft["input_ids"][:len(sft["input_ids"]) - sft["input_ids"][::-1].index(stop)]
    assert tok(row["prompt"] + row["chosen"])["input_ids"] == through_stop, name
    for side in ("chosen", "rejected"):
        assert tok(row["prompt"] + row[side], add_special_tokens=False)["input_ids"][-1] == stop, (name, row[side])


@pytest.mark.parametrize("name", NAMES)
def test_pad_is_not_eos_and_inside_the_embeddings(twin, name):
    fam = FAMILIES[name]
    tok = _tok(twin, name)
    assert tok.pad_token == fam.expect_pad and tok.pad_token_id != tok.eos_token_id
    assert len(tok) == fam.tok_size  # nothing added
    assert tok.pad_token_id < AutoConfig.from_pretrained(twin(name)).vocab_size


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_the_twin_puts_bos_first_on_a_call_where_its_family_does(twin, name):
    """Llama-3's post-processor and Gemma's and Mistral's add_bos_token put BOS before text tokenized with special
    tokens (as trl tokenizes text rows); a twin that did not hid 05's doubled BOS. Without special tokens: none."""
    tok = _tok(twin, name)
    ids = tok("hi")["input_ids"]
    assert (ids[0] == tok.bos_token_id) == FAMILIES[name].adds_bos, (name, tok.convert_ids_to_tokens(ids))
    assert tok.bos_token_id not in tok("hi", add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("name, system, turns", [
    ("gemma-2", 1, 1),
    pytest.param("mistral-v0.3", 1, 1, marks=pytest.mark.integration),
    pytest.param("qwen2.5-instruct", 0, 0, marks=pytest.mark.integration),
])
def test_roles_merged_where_the_template_refuses_them(twin, tmp_path, name, system, turns):
    _, manifest, rows = _prepared(twin, name, tmp_path / name)
    assert manifest["role_fixes"]["system_merged"] == system, name
    assert manifest["role_fixes"]["turns_merged"] == turns, name
    if system:
        first = next(r for r in rows if r["messages"][0]["content"].startswith("answer in one word"))
        assert first["messages"][0]["role"] == "user" and "oslo" in first["messages"][0]["content"]


def _render(template: str, **special):
    """render(messages, add_generation_prompt) from a template's text, as 01 renders (splits.renderer), no tokenizer."""
    from transformers.utils.chat_template_utils import _compile_jinja_template

    compiled = _compile_jinja_template(template)
    return lambda msgs, gen=False: compiled.render(messages=msgs, add_generation_prompt=gen, **special)


def test_an_earlier_answer_is_labelled_in_its_turn_not_where_its_words_first_occur():
    """Qwen3 renders an earlier answer without the empty think block the last one gets, so the answer is located
    again; its words also occur in the system prompt, which must stay masked."""
    msgs = [{"role": "system", "content": "Answer yes or no."}, {"role": "user", "content": "Is the sky blue?"},
            {"role": "assistant", "content": "yes"}, {"role": "user", "content": "Is grass red?"},
            {"role": "assistant", "content": "no"}]
    text, spans = chatformat.target_spans(_render(templates.QWEN3), msgs, "<|im_end|>")
    assert [text[s:e] for s, e in spans] == ["yes<|im_end|>", "<think>\n\n</think>\n\nno<|im_end|>"]
    assert spans[0][0] > text.index("Is the sky blue?")


@pytest.mark.parametrize("template, eot, special", [
    (templates.QWEN25, "<|im_end|>", {}),  # a default system prompt holding the text's very words
    (templates.QWEN3, "<|im_end|>", {}),
    (templates.LLAMA_31, "<|eot_id|>", {"bos_token": "<|begin_of_text|>"}),  # BOS, a system header, its dates
])
def test_a_plain_text_record_labels_its_text_not_what_the_template_puts_before_it(template, eot, special):
    plain = [{"role": "assistant", "content": "You are a helpful assistant."}]
    text, spans = chatformat.target_spans(_render(template, **special), plain, eot)
    assert [text[s:e] for s, e in spans] == ["You are a helpful assistant." + eot]
    assert spans[0][0] == text.rindex("You are a helpful assistant.")  # its own turn, not the system prompt


def test_the_vocabulary_check_reads_a_multimodal_models_text_config(tok):
    """Gemma3Config has no vocab_size of its own: the rows are its text_config's."""
    from transformers import Gemma3Config

    assert chatformat.vocab_problem(tok, Gemma3Config(text_config={"vocab_size": len(tok)})) is None
    problem = chatformat.vocab_problem(tok, Gemma3Config(text_config={"vocab_size": 8}))
    assert problem and "has 8 rows" in problem


class ForceAfter(LogitsProcessor):
    """Forces token `tok` at the k-th generated step."""

    def __init__(self, tok, k, start):
        self.tok, self.k, self.start = tok, k, start

    def __call__(self, input_ids, scores):
        if input_ids.shape[1] - self.start == self.k:
            scores = torch.full_like(scores, -float("inf"))
            scores[:, self.tok] = 0.0
        return scores


@pytest.mark.parametrize("name", NAMES)
def test_generation_stops_on_the_end_of_turn_token(twin, name):
    fam = FAMILIES[name]
    tok = _tok(twin, name)
    model = modeling.load_base(twin(name), "fp32").eval()
    assert model.config._attn_implementation == fam.expect_attention
    prompts = [tok.apply_chat_template([{"role": "user", "content": "what kind of word is oslo ?"}], tokenize=False,
                                       add_generation_prompt=True)]
    start = len(tok(prompts[0], add_special_tokens=False)["input_ids"])
    generate = model.generate
    force = LogitsProcessorList([ForceAfter(tok.convert_tokens_to_ids(fam.expect_stop), 3, start)])
    model.generate = lambda **kw: generate(**kw, logits_processor=force)
    [out] = evaluation.generate(model, tok, prompts, max_new_tokens=12, guard="flag")
    assert out["eos"] and out["tokens"] == 3, out


def test_gemma2_loads_eager_in_4bit_and_auto_follows_the_class(twin):
    model = modeling.load_base(twin("gemma-2"), "fp32", recipe.nf4())
    assert model.config._attn_implementation == "eager"
    cfg = AutoConfig.from_pretrained(twin("qwen3"))
    assert modeling.choose_attention(cfg) == "sdpa" and modeling.choose_attention(cfg, "eager") == "eager"


@pytest.mark.parametrize("name", ["pythia-base", pytest.param("llama-3-base", marks=pytest.mark.integration)])
def test_a_base_models_checkpoint_carries_the_fallback_template(twin, name, tmp_path):
    tok, _, rows = _prepared(twin, name, tmp_path)
    assert splits.load_manifest(tmp_path / "out")["template"] == "fallback"
    model = modeling.attach_lora(modeling.load_base(twin(name), "fp32"), recipe.lora(4),
                                 gradient_checkpointing=False)
    ckpt = checkpoints.save_final(model, tok, tmp_path / "ckpt", {"base_model": str(twin(name))})
    reloaded = AutoTokenizer.from_pretrained(ckpt)
    assert reloaded.chat_template == chatformat.FALLBACK_TEMPLATE and reloaded.pad_token == tok.pad_token
    row = rows[0]
    text = reloaded.apply_chat_template(row["messages"], tokenize=False)
    assert reloaded(text, add_special_tokens=False)["input_ids"] == row["input_ids"]


def test_the_plan_shows_the_attention_the_model_loads_with(twin):
    from nbutils.runtime.modelsource import load_config

    assert modeling.choose_attention(load_config(twin("gemma-2"))) == "eager"  # 02's plan prints this row
    assert modeling.choose_attention(load_config(twin("qwen3"))) == "sdpa"
    assert modeling.choose_attention(load_config(twin("qwen3")), "eager") == "eager"


@pytest.mark.parametrize("name", NAMES)
def test_a_saved_tokenizer_lists_its_added_tokens_and_loads_back_the_same(twin, name, tmp_path):
    """save_tokenizer writes `added_tokens_decoder` as the hub's files carry it (transformers 5 leaves it out and then
    parses all of tokenizer.json at each load to find them): what loads back is the same tokenizer, token for token."""
    tok = _tok(twin, name)
    chatformat.save_tokenizer(tok, tmp_path / "saved")
    listed = json.loads((tmp_path / "saved" / "tokenizer_config.json").read_text())["added_tokens_decoder"]
    assert {int(i): t["content"] for i, t in listed.items()} == {i: t.content for i, t in tok.added_tokens_decoder.items()}
    back = AutoTokenizer.from_pretrained(tmp_path / "saved")  # compared with the tokenizer it saved, in memory
    assert chatformat.fingerprint(back) == chatformat.fingerprint(tok) and back.added_tokens_decoder == tok.added_tokens_decoder
    assert (back.pad_token, back.eos_token, back.bos_token) == (tok.pad_token, tok.eos_token, tok.bos_token)
    rendered = back.apply_chat_template(CONVS[2], tokenize=False)
    assert rendered == tok.apply_chat_template(CONVS[2], tokenize=False)
    text = rendered + "ünïcode 12 <|eot_id|><end_of_turn><|im_end|>"
    assert back(text)["input_ids"] == tok(text)["input_ids"]


def test_fingerprint_follows_the_vocabulary_and_template_of_each_tokenizer_it_hashed_before():
    """The vocabulary's hash is kept per tokenizer object (reading a 256k vocabulary costs 0.1-0.3 s): a token added
    to that object, or a new template, gives the fingerprint a fresh tokenizer with the same change has."""
    tok, other = chatformat.load_tokenizer("embedded"), chatformat.load_tokenizer("embedded")
    first = chatformat.fingerprint(tok)
    assert chatformat.fingerprint(other) == first and chatformat.fingerprint(tok, "x") != first
    for t in (tok, other):
        t.add_tokens(["<|new_token|>"])
    assert chatformat.fingerprint(tok) != first
    assert chatformat.fingerprint(tok) == chatformat.fingerprint(other)  # `other` hashed its grown vocabulary afresh
    tok.chat_template = "{{ messages[0]['content'] }}"
    assert chatformat.fingerprint(tok) != chatformat.fingerprint(other)


@pytest.mark.parametrize("name", ["gemma-2", pytest.param("mistral-v0.3", marks=pytest.mark.integration),
                                  pytest.param("gemma-3", marks=pytest.mark.integration)])
def test_where_the_user_must_speak_first_text_trains_as_plain_text_and_a_greeting_is_dropped(twin, name, tmp_path):
    """Gemma and Mistral templates refuse a conversation that opens with the model: a plain `text` record is its text
    and EOS, all trained, outside the template; an answer before the first question is dropped and counted."""
    path = tmp_path / "in.jsonl"
    greeting = [{"role": "assistant", "content": "Welcome!"}, *CONVS[2]]
    path.write_text(json.dumps({"text": "Once upon a time."}) + "\n" + json.dumps({"messages": greeting}) + "\n")
    tok = _tok(twin, name)
    m = splits.prepare([str(path)], tmp_path / "out", tok, eval_fraction=0.0001, verbose=False, plot=False)
    assert m["counts"]["kept"] == 2 and m["role_fixes"]["plain_text"] == 1
    assert m["role_fixes"]["leading_answers_dropped"] == 1
    rows = {r["messages"][0]["content"]: r for r in list(splits.load_split(tmp_path / "out", "train"))
            + list(splits.load_split(tmp_path / "out", "eval"))}
    plain = rows["Once upon a time."]
    assert tok.decode(plain["input_ids"]) == tok.bos_token + "Once upon a time." + tok.eos_token
    assert [tok.decode(r) for r in _label_runs(plain)] == ["Once upon a time." + tok.eos_token]
    assert [m["role"] for m in rows["tell me what rome is ."]["messages"]] == ["user", "assistant"]


def test_a_template_that_refuses_only_a_conversation_without_a_question_keeps_a_greeting(twin):
    """Qwen3-2507's template raises 'No user query found' for answers alone but renders a greeting before the first
    question: the greeting is kept and trained, and only a record without a question is trained as plain text."""
    tok = _tok(twin, "qwen3")
    loop = "{%- endfor %}\n{%- for message in messages %}"
    refuse = "{%- if ns.multi_step_tool %}{{- raise_exception('No user query found in messages.') }}{%- endif %}\n"
    template = tok.chat_template.replace(loop, loop.replace("\n", "\n" + refuse, 1), 1)
    assert template != tok.chat_template
    rules = chatformat.role_rules(splits.renderer(tok, template))
    assert rules["assistant_first"] and not rules["answer_alone"]
    greeting = [{"role": "assistant", "content": "Welcome!"}, *CONVS[2]]
    b = splits.encode_batch({"messages": [greeting, [{"role": "assistant", "content": "Once upon a time."}]]},
                            tok, template, False)
    assert b["error"] == ["", ""] and b["dropped_leading"] == [0, 0] and b["plain_text"] == [0, 1]
    row = {"input_ids": b["input_ids"][0], "labels": b["labels"][0]}
    assert [tok.decode(r) for r in _label_runs(row)] == ["Welcome!<|im_end|>",
                                                        "<think>\n\n</think>\n\ncity<|im_end|>"]


def test_a_reasoning_answer_is_trained_in_the_last_turn_and_refused_with_its_reason_earlier(twin):
    """Qwen3's <think>/</think> are in its template: written by the model in its last answer they are kept and
    labelled; in an earlier answer the template drops the reasoning, which is said, not called a control token."""
    tok = _tok(twin, "qwen3")
    single = [{"role": "user", "content": "Think about 2+2"},
              {"role": "assistant", "content": "<think>\n2+2 is 4\n</think>\n\nIt is 4."}]
    multi = [{"role": "user", "content": "Q1"}, {"role": "assistant", "content": "<think>\nr1\n</think>\n\nA1"},
             {"role": "user", "content": "Q2"}, {"role": "assistant", "content": "<think>\nr2\n</think>\n\nA2"}]
    fake = [{"role": "user", "content": "what does <think> do?"}, {"role": "assistant", "content": "it opens"}]
    b = splits.encode_batch({"messages": [single, multi, fake]}, tok, tok.chat_template, False)
    assert b["error"][0] == "" and b["error"][2] == "control-token: <think> in user text"
    assert b["error"][1].startswith("earlier-reasoning: <think> in an answer before the last (turn 2 of 4)")
    row = {"input_ids": b["input_ids"][0], "labels": b["labels"][0]}
    assert [tok.decode(r) for r in _label_runs(row)] == ["<think>\n2+2 is 4\n</think>\n\nIt is 4.<|im_end|>"]
