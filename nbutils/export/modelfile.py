"""Ollama's Modelfile and llama.cpp's command line for a GGUF: the chat template the model was trained with and
one `PARAMETER stop` per stop token, so the model ends its turn in Ollama where it learnt to.

Ollama's TEMPLATE is a Go template, not the tokenizer's Jinja. It is derived from the Jinja template itself:
conversations with marker texts are rendered, and the text around the markers becomes the Go template's pieces
(what comes before the first user turn, around each user turn and after each answer, and where a system prompt
goes). The generation prompt is the one 03 prompts with (`prompt_variant`: Qwen3's non-thinking prompt for a model
trained on plain answers), so Ollama asks the model to continue where its training text went on. `go_template`
returns the pieces' template and checks nothing; `derive` returns the reason instead of the pieces when the Jinja
template does not fit that shape. tests/export/test_modelfile.py renders the result with a
small Go-template interpreter and compares it with the Jinja rendering for every family twin.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from nbutils.eval.evaluation import prompt_choice

S, U1, A1, U2 = "SYSq7x", "USRq7x1", "ASTq7x1", "USRq7x2"  # marker texts no template changes


@dataclass
class Pieces:
    header: str  # before the first user turn when there is no system prompt
    user_open: str  # before each user message
    user_close: str  # after each user message: its end and the assistant's opening (the generation prompt)
    answer_open: str  # before each assistant message, after user_close (Mistral: the space before the answer)
    answer_close: str  # after each assistant message
    system: str  # "separate" (its own block), "folded" (inside the first user turn) or "" (not supported)
    system_open: str = ""  # separate: before the system text; folded: what replaces `header`
    system_close: str = ""  # separate: after it; folded: between it and the first user message
    # after the last message when it is a user turn: the part of the generation prompt that earlier answers do not
    # open with (Qwen3's non-thinking prompt: the empty think block, which the template drops from past answers)
    prompt_tail: str = ""


def _render(tokenizer, messages: list[dict], variant: dict | None = None) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **(variant or {}))


def _common_suffix(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[len(a) - 1 - n] == b[len(b) - 1 - n]:
        n += 1
    return a[len(a) - n:]


def _unsplit(suffix: str, texts: tuple[str, ...], specials: list[str]) -> str:
    """The common `suffix` of `texts`, shortened until it cuts no special token of theirs in two."""
    def cuts(kept: int) -> bool:  # a special token of a text begins before the last `kept` characters, ends in them
        return any(0 < len(t) - kept - i < len(tok) for t in texts for tok in specials if tok
                   for i in range(len(t)) if t.startswith(tok, i))
    drop = next(k for k in range(len(suffix) + 1) if not cuts(len(suffix) - k))
    return suffix[drop:]


SHAPES = ([{"role": "user", "content": U1}],
          [{"role": "user", "content": U1}, {"role": "assistant", "content": A1}, {"role": "user", "content": U2}])
SYSTEM_SHAPES = ([{"role": "system", "content": S}, *SHAPES[0]], [{"role": "system", "content": S}, *SHAPES[1]])


def prompt_variant(tokenizer) -> dict:
    """apply_chat_template's extra arguments for the generation prompt the model was trained to continue: the one
    03 prompts with (evaluation.prompt_choice, a plain answer), e.g. {"enable_thinking": False} for Qwen3; {} for
    the default prompt."""
    try:
        return dict(prompt_choice(tokenizer, SHAPES[0])[0])
    except Exception:  # noqa: BLE001 -- a template that renders no user turn has no variant; derive says why
        return {}


def render_pieces(pieces: Pieces, messages: list[dict]) -> str:
    """The prompt the Go template builds, in Python: what `derive` checks against the Jinja rendering."""
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    out = [pieces.system_open + (system + pieces.system_close if pieces.system == "separate" else "")
           if system and pieces.system else pieces.header]
    pending = system if pieces.system == "folded" else ""
    for m in messages:
        if m["role"] == "user":
            out += [pieces.user_open, pending + pieces.system_close if pending else "", m["content"], pieces.user_close]
            pending = ""
        elif m["role"] == "assistant":
            out += [pieces.answer_open, m["content"], pieces.answer_close]
    if messages and messages[-1]["role"] == "user":
        out.append(pieces.prompt_tail)
    return "".join(out)


def _matches(tokenizer, pieces: Pieces, shapes, variant: dict) -> bool:
    try:
        return all(render_pieces(pieces, m) == _render(tokenizer, m, variant) for m in shapes)
    except Exception:  # noqa: BLE001 -- a template that refuses a shape (a system role) does not match it
        return False


def _system(tokenizer, pieces: Pieces, variant: dict) -> Pieces:
    """Where the template puts a system prompt: its own block, folded into the first user turn, or nowhere."""
    try:
        text = _render(tokenizer, [{"role": "system", "content": S}, {"role": "user", "content": U1}], variant)
    except Exception:  # noqa: BLE001 -- templates that refuse a system role raise; then there is no system slot
        return pieces
    before, _, rest = text.partition(S)
    between, _, after = rest.partition(U1)
    if after != pieces.user_close + pieces.prompt_tail or not before:
        return pieces
    if between.endswith(pieces.user_open):
        pieces.system, pieces.system_open, pieces.system_close = "separate", before, between[: -len(pieces.user_open)]
    elif before.endswith(pieces.user_open):
        pieces.system, pieces.system_open, pieces.system_close = "folded", before[: -len(pieces.user_open)], between
    if pieces.system and not _matches(tokenizer, pieces, SYSTEM_SHAPES, variant):  # e.g. Mistral: system in the last turn
        pieces.system = pieces.system_open = pieces.system_close = ""
    return pieces


def derive(tokenizer, variant: dict | None = None) -> Pieces | str:
    """The template's pieces with the generation prompt `variant` (None: `prompt_variant`'s), or why it does not fit
    the user/assistant/system shape a Modelfile can express."""
    variant = prompt_variant(tokenizer) if variant is None else variant
    try:
        multi = _render(tokenizer, SHAPES[1], variant)
    except Exception as e:  # noqa: BLE001 -- any template error means: no derived template
        return f"the chat template does not render a user/assistant conversation ({type(e).__name__}: {e})"
    first, _, rest = multi.partition(U1)
    before_answer, _, rest = rest.partition(A1)
    between, _, prompt = rest.partition(U2)
    # What the generation prompt shares with a past answer's opening closes every user turn; the rest of it (Qwen3's
    # empty think block, which the template leaves out of past answers) follows the last one only.
    user_close = os.path.commonprefix([prompt, before_answer])
    if not user_close:
        return "the chat template ends a user turn differently in different places"
    # The text before a user turn is the same after the header and after an answer: their common ending, cutting no
    # special token in two (Mistral's "<s>[INST] " and "</s>[INST] " share "s>[INST] "; BOS stays in the header).
    user_open = _unsplit(_common_suffix(first, between), (first, between), tokenizer.all_special_tokens)
    pieces = Pieces(first[: len(first) - len(user_open)], user_open, user_close, before_answer[len(user_close):],
                    between[: len(between) - len(user_open)], "", prompt_tail=prompt[len(user_close):])
    if not _matches(tokenizer, pieces, SHAPES, variant):
        return "the chat template does not wrap user and assistant turns the same way each time"
    return _system(tokenizer, pieces, variant)


def _strip_bos(text: str, bos: str | None) -> str:
    return text[len(bos):] if bos and text.startswith(bos) else text


def go_template(pieces: Pieces, bos: str | None = None) -> str:
    """Ollama's TEMPLATE from the pieces; `bos`: the BOS text to leave out (llama.cpp adds BOS itself)."""
    header, sys_open = _strip_bos(pieces.header, bos), _strip_bos(pieces.system_open, bos)
    loop, tail = '{{ range .Messages }}{{ if eq .Role "user" }}', ""
    if pieces.prompt_tail:  # the last message's role, kept past the loop (a variable assigned in range, Go >= 1.11)
        loop = '{{ $last := "" }}{{ range .Messages }}{{ $last = .Role }}{{ if eq .Role "user" }}'
        tail = '{{ if eq $last "user" }}' + pieces.prompt_tail + "{{ end }}"
    answer = ('{{ else if eq .Role "assistant" }}' + pieces.answer_open + "{{ .Content }}" + pieces.answer_close +
              "{{ end }}{{ end }}" + tail)
    if pieces.system == "separate":
        return ("{{ if .System }}" + sys_open + "{{ .System }}" + pieces.system_close + "{{ else }}" + header +
                "{{ end }}" + loop + pieces.user_open + "{{ .Content }}" + pieces.user_close + answer)
    if pieces.system == "folded":
        return ("{{ if .System }}" + sys_open + "{{ else }}" + header + "{{ end }}{{ $sys := .System }}" + loop +
                pieces.user_open + "{{ if $sys }}{{ $sys }}" + pieces.system_close + '{{ $sys = "" }}{{ end }}'
                "{{ .Content }}" + pieces.user_close + answer)
    return header + loop + pieces.user_open + "{{ .Content }}" + pieces.user_close + answer


def starts_with_bos(tokenizer) -> bool:
    """Whether the chat template itself writes BOS first. The suite tokenizes chats with add_special_tokens=False,
    so this is the one BOS the model saw: the GGUF's add_bos_token says the same, and llama.cpp adds it."""
    bos = tokenizer.bos_token
    return bool(bos) and _render(tokenizer, SHAPES[0]).startswith(bos)


def stop_texts(tokenizer, stop_ids: list[int]) -> list[str]:
    """The stop tokens as text, one per stop id, in the suite's order."""
    return list(dict.fromkeys(tokenizer.convert_ids_to_tokens(i) for i in stop_ids))


def _checked(runtime: dict | None) -> str:
    """The Modelfile's line on llama.cpp's runtime check of the GGUF."""
    if not runtime or not runtime.get("checked"):
        return f"# not run in llama.cpp: {(runtime or {}).get('reason') or 'no runtime check'}"
    if runtime.get("ok"):
        return "# checked in llama.cpp: prompt tokens, chat template, greedy tokens and stops, logits (export_summary.json)"
    return f"# FAILED in llama.cpp: {runtime.get('reason')}"


def modelfile(gguf_name: str, tokenizer, stop_ids: list[int], num_ctx: int = 4096, runtime: dict | None = None) -> tuple[str, dict]:
    """The Modelfile's text and what it holds (template derived or why not, stops). With llama.cpp's runtime check
    (nbutils.export.runtimecheck), the stops it confirmed come first and any it did not are marked, and BOS is
    left out of the template only where llama.cpp was seen to add it."""
    variant = prompt_variant(tokenizer)
    pieces = derive(tokenizer, variant)
    ran = bool(runtime and "stops" in runtime)
    confirmed = runtime["stops"]["confirmed"] if ran else list(stop_ids)
    adds_bos = runtime["tokens"]["add_bos"] if ran else True
    lines = ["# ollama create <name> -f Modelfile && ollama run <name>", f"FROM ./{gguf_name}", _checked(runtime)]
    info = {"stops": stop_texts(tokenizer, [*confirmed, *(i for i in stop_ids if i not in confirmed)]),
            "stops_confirmed_in_llama_cpp": stop_texts(tokenizer, confirmed) if ran else None,
            "template": None, "system": None, "prompt_variant": variant}
    if isinstance(pieces, Pieces):
        bos = tokenizer.bos_token if starts_with_bos(tokenizer) and adds_bos else None
        template = go_template(pieces, bos)
        if '"""' in template or "{{" in "".join(v for v in vars(pieces).values()):
            info["template"] = "not written: the template's own text holds Go-template or Modelfile quoting"
        else:
            if variant:
                lines.append(f"# the prompt ends as the model was fine-tuned and evaluated: the chat template's "
                             f"generation prompt with {_arguments(variant)}")
            lines.append(f'TEMPLATE """{template}"""')
            info.update(template="derived from the tokenizer's chat template", system=pieces.system or "not supported")
    else:
        info["template"] = f"not written ({pieces}); Ollama falls back to the GGUF's own chat template"
    for text in info["stops"]:
        if ran and text not in info["stops_confirmed_in_llama_cpp"]:
            lines.append("# the model stops here, but llama.cpp does not end generation on it (export_summary.json)")
        lines.append(f'PARAMETER stop "{_quoted(text)}"')
    # Greedy decoding is what 03 evaluated, with no repetition penalty (Ollama's default is 1.1, 03's greedy 1.0);
    # num_ctx: Ollama's default 2048 cuts longer chats short.
    lines += ["PARAMETER temperature 0", "PARAMETER repeat_penalty 1", f"PARAMETER num_ctx {num_ctx}"]
    return "\n".join(lines) + "\n", info


def _quoted(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _arguments(variant: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in variant.items())


def llama_cpp_command(gguf_path: str | Path, num_ctx: int = 4096, variant: dict | None = None) -> str:
    """One line for llama.cpp: a chat in the terminal with the GGUF's own chat template and stop tokens, asking for
    the generation prompt `variant` (prompt_variant). llama-cli's `--reasoning off` is enable_thinking=False
    (common/arg.cpp); any other argument goes through --chat-template-kwargs."""
    variant = dict(variant or {})
    flags = " --reasoning off" if variant.pop("enable_thinking", None) is False else ""
    if variant:
        flags += f" --chat-template-kwargs '{json.dumps(variant)}'"
    return f"llama-cli -m {gguf_path} -c {num_ctx} --temp 0{flags}"


def write(folder: str | Path, gguf_name: str, tokenizer, stop_ids: list[int], num_ctx: int = 4096,
          runtime: dict | None = None, shown: str | Path | None = None) -> dict:
    """<folder>/Modelfile next to the GGUF; what it holds, with the ollama and llama.cpp commands (naming `shown`,
    the folder's final name, when it is written under a temporary one)."""
    text, info = modelfile(gguf_name, tokenizer, stop_ids, num_ctx, runtime)
    Path(folder, "Modelfile").write_text(text)
    shown = Path(shown or folder)
    return {**info, "path": str(shown / "Modelfile"),
            "ollama": f"cd {shown} && ollama create my-model -f Modelfile && ollama run my-model",
            "llama_cpp": llama_cpp_command(shown / gguf_name, num_ctx, info["prompt_variant"])}
