"""One chat format from data to inference: the tokenizer's pad, end-of-turn and stop tokens, and its template.

`prepare_tokenizer` is applied wherever a tokenizer is loaded (01, 02, 03), so all three see the
same thing, and whatever it sets is saved with every checkpoint (`tokenizer.save_pretrained`):
- pad: the tokenizer's own if it is not EOS; else an existing reserved or fine-tune pad token
  (Llama-3's <|finetune_right_pad_id|>, Pythia's <|padding|>, Phi's <|placeholder1|>); else unk;
  else the last ordinary token of the vocabulary. Never a new token: a new row past the
  embedding matrix is the `IndexError: index out of range in self` of a first padded batch.
- template: a tokenizer without one (base models) gets FALLBACK_TEMPLATE set on it, so the probe,
  03 and anyone loading the checkpoint render exactly what training saw.
- stops: generation stops on the union of EOS, the template's end-of-turn token (<|eot_id|>,
  <|im_end|>, <end_of_turn>, <|end|>) and the model's generation_config.eos_token_id list.
"""

from __future__ import annotations

import hashlib
import json
import re
import weakref
from pathlib import Path

from nbutils import defaults
from nbutils.runtime import modelsource

# Used when a tokenizer has no chat template (base models): plain markers, EOS right after each answer.
FALLBACK_TEMPLATE = (
    "{{ bos_token or '' }}{% for m in messages %}{% if not loop.first %}{{ '\n\n' }}{% endif %}"
    "{% if m['role'] == 'system' %}{{ m['content'] }}"
    "{% elif m['role'] == 'user' %}{{ '### User:\n' + m['content'] }}"
    "{% else %}{{ '### Assistant:\n' + m['content'] + eos_token }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '\n\n### Assistant:\n' }}{% endif %}"
)
# Pad tokens families ship for fine-tuning, best first; then reserved/placeholder/unused specials.
PAD_NAMES = ("<|finetune_right_pad_id|>", "<|padding|>", "<|pad|>", "<pad>", "[PAD]", "<|finetune_pad|>")
RESERVED = re.compile(r"reserved|placeholder|unused", re.IGNORECASE)
_DERIVED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> values derived from it (derived())
PROBE = [{"role": "user", "content": "ping"}, {"role": "assistant", "content": "pong"}]


def _specials(tokenizer) -> dict[int, str]:
    """id -> content of the special added tokens."""
    return {i: t.content for i, t in tokenizer.added_tokens_decoder.items() if t.special}


def choose_pad(tokenizer) -> tuple[str, str]:
    """(pad token, why) by the rules in the module docstring; never a token the tokenizer lacks."""
    eos, template = tokenizer.eos_token, getattr(tokenizer, "chat_template", None) or ""
    if tokenizer.pad_token is not None and tokenizer.pad_token != eos:
        return tokenizer.pad_token, "the tokenizer's own"
    specials = _specials(tokenizer)
    for name in PAD_NAMES:
        if name in specials.values() and name != eos:
            return name, "a pad token the family ships"
    unused = [c for i, c in sorted(specials.items()) if RESERVED.search(c) and c not in template]
    if unused:
        return unused[0], "a reserved special token"
    if tokenizer.unk_token is not None and tokenizer.unk_token != eos:
        return tokenizer.unk_token, "the unk token"
    taken = set(specials)
    last = next(i for i in range(len(tokenizer) - 1, -1, -1) if i not in taken)
    return tokenizer.convert_ids_to_tokens(last), "the last ordinary token (checked absent from the data)"


def load_tokenizer(base_model: str, verbose: bool = False):
    """The model's tokenizer, prepared (`prepare_tokenizer`); the suite's message when the model cannot be reached."""
    from transformers import AutoTokenizer

    return prepare_tokenizer(modelsource.load(AutoTokenizer.from_pretrained, base_model), verbose)


def save_tokenizer(tokenizer, folder) -> None:
    """`save_pretrained`, with the added tokens listed in tokenizer_config.json (`added_tokens_decoder`) as the
    hub's tokenizer files list them. transformers 5 no longer writes that list, and a folder without it is read the
    legacy way: the whole tokenizer.json parsed by Python's json to find the added tokens, 0.2-2 s for a 128k-150k
    vocabulary, at every load (03, 04, its checks, 05)."""
    tokenizer.save_pretrained(folder)
    path = Path(folder) / "tokenizer_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    if "added_tokens_decoder" not in config and tokenizer.added_tokens_decoder:
        config["added_tokens_decoder"] = {str(i): t.__getstate__() for i, t in sorted(tokenizer.added_tokens_decoder.items())}
        path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def fingerprint(tokenizer, *also) -> str:
    """A short hash of what decides the token ids and the chat format: the vocabulary, the special tokens, the
    template (and `also`, JSON values hashed with them). Two names for one model (a Hub id and its Kaggle input
    folder) give the same fingerprint."""
    digest = _vocab_hash(tokenizer).copy()
    digest.update(json.dumps([sorted(map(str, tokenizer.all_special_tokens)),
                              getattr(tokenizer, "chat_template", None) or "", *also]).encode())
    return digest.hexdigest()[:16]


def derived(tokenizer) -> dict:
    """A dict kept with this tokenizer object, for values computed from its vocabulary (reading 256k tokens out of
    Rust takes 0.1-0.3 s); it goes with the tokenizer. One that cannot be weakly referenced gets a new dict each time:
    its values are computed again."""
    try:
        return _DERIVED.setdefault(tokenizer, {})
    except TypeError:
        return {}


def _vocab_hash(tokenizer):
    """The vocabulary's sha256 (copied, then updated by the caller), kept while the tokenizer's size stays (tokens
    are only ever added): 01 fingerprints its tokenizer twice."""
    cache, size = derived(tokenizer), len(tokenizer)
    if cache.get("vocab_size") != size:
        vocab = tokenizer.get_vocab()
        by_id = [""] * (max(vocab.values(), default=-1) + 1)  # placed by id: sorting 256k items took 1.5 s
        for token, i in vocab.items():
            by_id[i] = token
        cache["vocab_sha256"], cache["vocab_size"] = hashlib.sha256("\0".join(by_id).encode()), size
    return cache["vocab_sha256"]


def prepare_tokenizer(tokenizer, verbose: bool = False):
    """Set pad (never EOS, never new) and the fallback template when there is none; returns the tokenizer."""
    if tokenizer.eos_token_id is None:
        raise ValueError("the tokenizer has no EOS token: the model could never learn to stop. Set "
                         "tokenizer.eos_token to the token the model ends its answers with.")
    pad, why = choose_pad(tokenizer)
    tokenizer.pad_token = pad
    tokenizer.pad_reason = why
    if not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = FALLBACK_TEMPLATE
        tokenizer.template_source = "fallback"
    elif getattr(tokenizer, "template_source", None) is None:
        tokenizer.template_source = "fallback" if tokenizer.chat_template == FALLBACK_TEMPLATE else "tokenizer"
    if verbose:
        print(describe_line(tokenizer))
    return tokenizer


def end_of_turn(tokenizer) -> str:
    """The special token the template closes an assistant turn with (EOS when it uses none)."""
    try:
        text = tokenizer.apply_chat_template(PROBE, tokenize=False)
    except Exception:  # noqa: BLE001 -- a template that needs more than a plain turn: EOS is the safe answer
        return tokenizer.eos_token
    tail = text[text.rfind("pong") + 4:]
    specials = set(_specials(tokenizer).values()) | {tokenizer.eos_token}
    found = [(tail.find(s), s) for s in specials if s and s in tail]
    return min(found)[1] if found else tokenizer.eos_token


def stop_ids(tokenizer, model=None) -> list[int]:
    """End-of-turn, EOS and the model's generation_config.eos_token_id, in that order, no repeats."""
    ids = [tokenizer.convert_tokens_to_ids(end_of_turn(tokenizer)), tokenizer.eos_token_id]
    config = getattr(model, "generation_config", None) if model is not None else _generation_config(tokenizer)
    gen = getattr(config, "eos_token_id", None)
    ids += gen if isinstance(gen, (list, tuple)) else [gen]
    return list(dict.fromkeys(i for i in ids if i is not None))


def _generation_config(tokenizer):
    """The generation config saved beside the tokenizer (a model folder), if any."""
    from transformers import GenerationConfig

    try:
        return GenerationConfig.from_pretrained(tokenizer.name_or_path)
    except Exception:  # noqa: BLE001 -- no file, no folder, a hub id offline: no extra stop ids
        return None


def describe(tokenizer, model=None) -> dict:
    """The tokens the suite chose, for the manifest and the printout."""
    eot = end_of_turn(tokenizer)
    return {"pad_token": tokenizer.pad_token, "pad_id": tokenizer.pad_token_id,
            "pad_reason": getattr(tokenizer, "pad_reason", ""), "eos_token": tokenizer.eos_token,
            "eos_id": tokenizer.eos_token_id, "end_of_turn": eot, "end_of_turn_id": tokenizer.convert_tokens_to_ids(eot),
            "stop_ids": stop_ids(tokenizer, model), "template": getattr(tokenizer, "template_source", "tokenizer")}


def describe_line(tokenizer) -> str:
    d = describe(tokenizer)
    return (f"[tokenizer] pad {d['pad_token']!r} (id {d['pad_id']}, {d['pad_reason']}), EOS {d['eos_token']!r}, "
            f"end of turn {d['end_of_turn']!r}, template: {d['template']}")


# --- roles a template accepts ------------------------------------------------------------------

def role_rules(render) -> dict:
    """What the template does with a system message, two user turns in a row, an answer before the first question
    (`assistant_first`) and answers with no question at all (`answer_alone`). The last two are probed apart: some
    templates refuse only a conversation without any user message (Qwen3-2507's 'No user query found')."""
    def ok(msgs, marker=None):
        try:
            text = render(msgs)
        except Exception:  # noqa: BLE001 -- templates raise anything (TemplateError via raise_exception)
            return False
        return marker is None or marker in text

    sys_msgs = [{"role": "system", "content": "SYSMARK"}, *PROBE]
    two_users = [{"role": "user", "content": "a"}, *PROBE]
    greeting = [{"role": "assistant", "content": "hello"}, *PROBE]
    return {"system": ok(sys_msgs, "SYSMARK"), "consecutive": ok(two_users), "assistant_first": ok(greeting),
            "answer_alone": ok(PROBE[1:])}


def normalize_roles(msgs: list[dict], rules: dict) -> tuple[list[dict], dict]:
    """Merge the system text into the first user turn and same-role turns, and drop answers before the first
    question, where the template refuses each (`role_rules`; Gemma, Mistral: user first, a greeting the model opened
    with cannot be rendered there). A conversation with no question at all (a plain `text` record) is left whole:
    where the template refuses it, `plain_spans`.

    Returns the messages as the template can render them and what was changed ({"system": 0|1, "turns": n merged,
    "leading": n answers dropped}).
    """
    merged = {"system": 0, "turns": 0, "leading": 0}
    msgs = [dict(m) for m in msgs]
    if not rules["system"] and msgs and msgs[0]["role"] == "system":
        system, msgs = msgs[0]["content"], msgs[1:]
        if msgs and msgs[0]["role"] == "user":
            msgs[0]["content"] = f"{system}\n\n{msgs[0]['content']}"
        else:
            msgs.insert(0, {"role": "user", "content": system})
        merged["system"] = 1
    if not rules["consecutive"]:
        out = []
        for m in msgs:
            if out and out[-1]["role"] == m["role"]:
                out[-1]["content"] += "\n\n" + m["content"]
                merged["turns"] += 1
            else:
                out.append(m)
        msgs = out
    if not rules.get("assistant_first", True):
        at = 1 if msgs and msgs[0]["role"] == "system" else 0
        question = next((i for i in range(at, len(msgs)) if msgs[i]["role"] == "user"), at)
        merged["leading"], msgs = question - at, msgs[:at] + msgs[question:]
    return msgs, merged


# --- labels ------------------------------------------------------------------------------------

def target_spans(render, msgs: list[dict], eot: str) -> tuple[str, list[tuple[int, int]]]:
    """Full text and the character spans of every assistant turn, each through its end-of-turn marker.

    A turn's span starts where the prompt rendered with add_generation_prompt ends (so what the
    template adds after it, e.g. an empty <think></think>, is taught too), or, when the template
    renders that turn differently inside a longer conversation (Qwen3 drops the empty think block
    of earlier turns), where the answer's text starts. A turn with no prompt before it (a plain
    `text` record) starts at its text: what a template puts first (BOS, a default system prompt,
    the assistant header) is the template's, not the model's to learn.
    It ends with the end-of-turn token that follows the answer (<|eot_id|>, <|im_end|>, <|end|>...),
    whatever the template adds after the last turn (Phi-3 adds EOS there only); when the template
    closes the last answer with nothing, the end-of-turn token is appended.
    """
    text = render(msgs)
    spans, pos = [], 0
    last = max(i for i, m in enumerate(msgs) if m["role"] == "assistant")
    for i, m in enumerate(msgs):
        if m["role"] != "assistant":
            continue
        body = m["content"].strip()
        prefix = render(msgs[:i], True) if i else None
        if prefix is not None and text.startswith(prefix) and len(prefix) >= pos and _as_last(render, msgs, i, text):
            start = len(prefix)
            at = text.find(body, start)
        else:
            at = _answer_at(render, msgs, i, text, pos)
            start = at
        if at < 0:
            raise ValueError("template-error: an answer is not in the rendered conversation")
        after = at + len(body)
        close = text.find(eot, after)
        if close >= 0 and not text[after:close].strip():
            end = close + len(eot)
        elif i == last and not text[after:].strip():
            text += eot  # the model must learn to stop
            end = len(text)
        else:
            end = after
        spans.append((start, end))
        pos = end
    return text, spans


def plain_spans(msgs: list[dict], bos: str, eos: str) -> tuple[str, list[tuple[int, int]]]:
    """A conversation without a question (a plain `text` record) where the template requires the user to speak
    first: the text as it is, after BOS and any system text, then EOS, all of the answer and EOS trained (what
    continued pretraining on plain text does), instead of a chat turn the template cannot render."""
    prompt = "".join(m["content"] + "\n\n" for m in msgs if m["role"] == "system")
    text = bos + prompt + "\n\n".join(m["content"] for m in msgs if m["role"] == "assistant") + eos
    return text, [(len(bos) + len(prompt), len(text))]


def _as_last(render, msgs: list[dict], i: int, text: str) -> bool:
    """Whether the conversation shows turn i as the template renders it when it is the last turn (what the model
    writes after the generation prompt at inference)."""
    body = msgs[i]["content"].strip()
    upto = text if i == len(msgs) - 1 else render(msgs[: i + 1])
    upto = upto[: upto.rfind(body) + len(body)] if body in upto else upto
    return text.startswith(upto)


STAND_IN = "@@nbutils-answer@@"  # an answer no data holds: where the template puts it is where the answer starts


def _answer_at(render, msgs: list[dict], i: int, text: str, pos: int) -> int:
    """Where turn i's answer starts in text, at or after pos (-1: not there). Found where the template puts a stand-in
    for it, not by searching for its words: a short answer ("yes") also occurs in the system prompt or a question
    before it, and a default system prompt ("You are Qwen...") may hold a plain text's words."""
    body = msgs[i]["content"].strip()
    try:
        at = render([*msgs[:i], {**msgs[i], "content": STAND_IN}, *msgs[i + 1:]]).find(STAND_IN)
    except Exception:  # noqa: BLE001 -- templates raise anything; then the answer is searched for after pos
        at = -1
    if at >= pos and text.startswith(body, at):
        return at
    return text.find(body, max(pos, at))  # a template that rewrites answers: the first match after the stand-in's place


# --- the tokenizer against the model -----------------------------------------------------------

def template_problem(tokenizer) -> str | None:
    """Why the chat template cannot show the model where its answer starts (None: it can).

    Between the user's text and the answer a template must put something besides the end-of-turn token: the
    assistant marker (<|im_start|>assistant, <start_of_turn>model, [/INST] ...). Without one, nothing at inference
    tells the model to answer, and add_generation_prompt has nothing to add."""
    try:
        text = tokenizer.apply_chat_template(PROBE, tokenize=False)
    except Exception as e:  # noqa: BLE001 -- templates raise anything (TemplateError via raise_exception)
        return f"the chat template fails on one user turn and one answer: {type(e).__name__}: {e}"
    between = text[text.find("ping") + 4:text.rfind("pong")]
    rest = between.replace(end_of_turn(tokenizer), "").replace(tokenizer.eos_token or "\0", "")
    if rest.strip():
        return None
    return (f"the chat template marks no assistant turn: between the user's text and the answer it renders only "
            f"{between!r}, so at inference nothing tells the model to answer. Use the model's own template "
            "(chat_template in its tokenizer_config.json or chat_template.jinja), or set tokenizer.chat_template to one "
            "that opens each assistant turn with a marker.")


def vocab_problem(tokenizer, model_config) -> str | None:
    """Why the model's embedding cannot take the ids this tokenizer gives (None: it can).

    An id at or past config.vocab_size has no embedding row: the first batch holding one stops training with
    'index out of range in self'. Checked on the ids the chain always uses (the special tokens, a rendered turn)
    and the base vocabulary; extra tokens past the rows that the chain never uses (image tokens) are left alone."""
    rows = getattr(defaults.text_config(model_config), "vocab_size", None)  # a multimodal model's (Gemma-3 4B) in its text_config
    if not rows:
        return None
    used = tokenizer(tokenizer.apply_chat_template(PROBE, tokenize=False), add_special_tokens=False)["input_ids"]
    used += [i for i in (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id) if i is not None]
    used += stop_ids(tokenizer)
    beyond = sorted({i for i in used if i >= rows})
    base = max(0, tokenizer.vocab_size - rows)  # ordinary tokens past the rows: any text may produce them
    if not beyond and not base:
        return None
    shown = ", ".join(f"{tokenizer.convert_ids_to_tokens(i)!r} ({i})" for i in beyond[:3])
    return (f"the model's vocabulary has {rows:,} rows (config.json vocab_size) but the tokenizer has {len(tokenizer):,} "
            f"tokens: {len(tokenizer) - rows:,} ids have no embedding"
            + (f", the chat format's {shown}{' ...' if len(beyond) > 3 else ''} among them" if shown else "")
            + ". Training would stop at the first batch holding one, with 'index out of range in self'. Use the "
            "tokenizer saved with this model, or a config whose vocab_size covers it.")


def check_model(tokenizer, model_config) -> None:
    """Raise ValueError naming every problem between this tokenizer and this model (template, vocabulary)."""
    found = [p for p in (template_problem(tokenizer), vocab_problem(tokenizer, model_config)) if p]
    if found:
        raise ValueError("the model and its tokenizer cannot train together:\n- " + "\n- ".join(found))
