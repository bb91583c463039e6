"""Records to chat messages: every supported record shape (chat, ShareGPT, column pairs, plain text) turned into
validated messages, or a ValueError("<reason-id>: <detail>") the quarantine keeps; and which records are the same
record (duplicates) or answers to the same prompt (kept in one split).
"""

from __future__ import annotations

import hashlib
import json
import random

# Column pairs (user, assistant) recognised in any tabular record, in order of preference; names
# are compared case-insensitively. A lone `text` column is a single assistant turn (plain text).
COLUMN_PAIRS = [("instruction", "output"), ("prompt", "completion"), ("prompt", "response"),
                ("question", "answer"), ("input", "output"), ("query", "response"), ("instruction", "response"),
                ("prompt", "answer"), ("question", "response"), ("context", "response")]
CHAT_COLUMNS = ("messages", "conversations", "text")
PREFERENCE_PAIRS = [("chosen", "rejected")]  # 05's pairs (its KTO rows are prompt/completion, a pair above)
# Beside a column pair: text joined to the question (alpaca's input, dolly's context, sql-create-context's table
# schema), the system prompt (OpenOrca names it system_prompt), and LLaMA-Factory's [[question, answer], ...] history.
EXTRA_COLUMNS = ("input", "context")
SYSTEM_COLUMNS = ("system", "system_prompt")
HISTORY_COLUMN = "history"
ROLES = {"system": "system", "user": "user", "assistant": "assistant", "human": "user", "gpt": "assistant",
         "model": "assistant", "bot": "assistant", "chatgpt": "assistant", "developer": "system"}  # OpenAI's o1+ system
TOOL_ROLES = ("tool", "function", "ipython")  # tool results (OpenAI, its older functions, Llama 3.1)
TEXT_PARTS = ("text", "input_text", "output_text")  # OpenAI content parts that hold text (chat, Responses API)
TOOLS_UNSUPPORTED = ("tool calls are not supported: the chat templates render them each their own way; drop these "
                     "turns, or the record")


def recognised(columns, mapping: dict | None = None) -> bool:
    """Whether a set of column names holds a conversation (or a preference pair) we know how to read."""
    cols = {str(c).strip().lower() for c in columns}
    if mapping:
        return all(str(v).strip().lower() in cols for v in mapping.values())
    return any(a in cols and b in cols for a, b in COLUMN_PAIRS + PREFERENCE_PAIRS) or any(c in cols for c in CHAT_COLUMNS)


# --- records -> chat messages (raise ValueError("<reason-id>: <detail>") for the quarantine) ---

def _text(rec: dict, key: str) -> str:
    """A required string field; raises ValueError with the quarantine reason."""
    return text_field(rec.get(key), key)


def _blank(value) -> bool:
    """Nothing there: null, NaN (pandas' empty cell), whitespace, an empty list or object."""
    if isinstance(value, str):
        return not value.strip()
    return value is None or (isinstance(value, float) and value != value) or (isinstance(value, (list, dict)) and not value)


def text_field(value, name: str) -> str:
    """A required string, stripped, wherever it appears (a record's field, a preference side); a number is its text
    (JSON and Parquet keep 42 a number, CSV gives "42"); raises ValueError("<reason-id>: <detail>") naming it:
    missing-field, wrong-type, empty-field."""
    if value is None or (isinstance(value, float) and value != value):  # NaN: pandas' empty cell
        raise ValueError(f"missing-field: {name}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise ValueError(f"wrong-type: {name} is {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"empty-field: {name}")
    return value.strip()


def _first(turn: dict, *keys: str):
    """The first of `keys` that the turn holds with a value (not None)."""
    return next((turn[k] for k in keys if turn.get(k) is not None), None)


def _parts(content: list, where: str) -> str:
    """OpenAI-style content, a list of parts ([{"type": "text", "text": ...}]), as its text parts joined by newlines;
    an image, audio or file part raises unsupported-content (a text model cannot be taught from it)."""
    texts = []
    for j, part in enumerate(content, 1):
        if not isinstance(part, dict):
            raise ValueError(f"wrong-type: {where} content part {j} is {type(part).__name__}")
        kind = part.get("type") or ("text" if isinstance(part.get("text"), str) else None)
        if kind not in TEXT_PARTS:
            raise ValueError(f"unsupported-content: {kind} in {where} (only text parts are read)")
        if not isinstance(part.get("text"), str):
            raise ValueError(f"wrong-type: {where} content part {j} text is {type(part.get('text')).__name__}")
        texts.append(part["text"])
    return "\n".join(texts)


def _turn(t, where: str) -> dict | None:
    """One turn as {"role", "content"}, or None for an empty system turn; raises the quarantine reason."""
    if not isinstance(t, dict):
        raise ValueError(f"wrong-type: {where} is {type(t).__name__}")
    t = {str(k).strip().lower(): v for k, v in t.items()}
    role = _first(t, "role", "from")  # Arrow/Parquet unify the shapes: both keys, one of them null
    name = role.strip().lower() if isinstance(role, str) else None
    if name in TOOL_ROLES:
        raise ValueError(f"unsupported-tool-calls: {where} is a tool's result (role {role}); {TOOLS_UNSUPPORTED}")
    if name not in ROLES:
        raise ValueError(f"unknown-role: {role} in {where}" if role is not None else f"missing-field: {where} role")
    if t.get("tool_calls") or t.get("function_call"):
        raise ValueError(f"unsupported-tool-calls: {where} calls a tool; {TOOLS_UNSUPPORTED}")
    content = _first(t, "content", "value")
    if content is None:
        raise ValueError(f"missing-field: {where} content")
    if isinstance(content, list):
        content = _parts(content, where)
    if not isinstance(content, str):
        raise ValueError(f"wrong-type: {where} content is {type(content).__name__}")
    if not content.strip():
        if ROLES[name] == "system":
            return None  # an empty system prompt (common in Orca/ShareGPT exports) says nothing: dropped, as the column is
        raise ValueError(f"empty-field: {where}")
    return {"role": ROLES[name], "content": content.strip()}


def turns(value, name: str) -> list[dict]:
    """A message list as {"role", "content"} turns, wherever it appears (SFT records, preference prompts and answers).

    Each turn may say role/content or ShareGPT's from/value; role aliases are mapped (human -> user, gpt -> assistant,
    developer -> system ...); content may be OpenAI's list of text parts; an empty system turn is dropped (an empty
    `system` column is too). Raises ValueError("<reason-id>: <detail>") naming the field and the turn: wrong-type,
    unknown-role, missing-field, empty-field, unsupported-content, unsupported-tool-calls."""
    if isinstance(value, str):
        try:
            value = json.loads(value)  # CSV/SQL cells hold JSON text
        except json.JSONDecodeError:
            raise ValueError(f"malformed-json: {name}") from None
    if not isinstance(value, list):
        raise ValueError(f"wrong-type: {name} is {type(value).__name__}")
    return [m for i, t in enumerate(value, 1) if (m := _turn(t, f"{name} turn {i}")) is not None]


def _conversation(value, name: str) -> list[dict]:
    """An SFT conversation: its turns up to the last answer (turns after it teach nothing; dropping them keeps EOS at
    the very end)."""
    out = turns(value, name)
    while out and out[-1]["role"] != "assistant":
        out.pop()
    if not out:
        raise ValueError(f"no-assistant-turn: {name} has no assistant turn")
    return out


def _history(value) -> list[dict]:
    """LLaMA-Factory's alpaca `history`, [[question, answer], ...] before the record's own question, as turns."""
    if _blank(value):
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)  # a CSV cell holds JSON text
        except json.JSONDecodeError:
            raise ValueError(f"malformed-json: {HISTORY_COLUMN}") from None
    if not isinstance(value, list):
        raise ValueError(f"wrong-type: {HISTORY_COLUMN} is {type(value).__name__}")
    out = []
    for i, pair in enumerate(value, 1):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise ValueError(f"wrong-type: {HISTORY_COLUMN} item {i} is not a [question, answer] pair")
        out += [{"role": "user", "content": text_field(pair[0], f"{HISTORY_COLUMN} item {i} question")},
                {"role": "assistant", "content": text_field(pair[1], f"{HISTORY_COLUMN} item {i} answer")}]
    return out


def _pair(rec: dict, user_key: str, assistant_key: str, system_key: str | None = None,
          used: set | None = None) -> list[dict]:
    """A column pair as messages: the question with the input/context columns beside it, the system prompt and the
    history before it. used: the columns read are added to it."""
    used = set() if used is None else used
    user = _text(rec, user_key)  # raises missing-field / empty-field / wrong-type
    used.update((user_key, assistant_key))
    for key in EXTRA_COLUMNS:  # alpaca's input, dolly's context, whatever the question's column
        extra = rec.get(key)  # text or a number; a list or an object (hotpot_qa's passages) is left, and named
        if key not in (user_key, assistant_key) and not _blank(extra) and not isinstance(extra, (list, dict, bool)):
            user += "\n" + text_field(extra, key)
            used.add(key)
    msgs = [{"role": "user", "content": user}, {"role": "assistant", "content": _text(rec, assistant_key)}]
    if HISTORY_COLUMN not in (user_key, assistant_key, system_key) and HISTORY_COLUMN in rec:
        msgs[:0] = _history(rec[HISTORY_COLUMN])
        used.add(HISTORY_COLUMN)
    system_key = system_key or next((k for k in SYSTEM_COLUMNS if isinstance(rec.get(k), str) and rec[k].strip()), None)
    if isinstance(rec.get(system_key), str) and rec[system_key].strip():
        msgs.insert(0, {"role": "system", "content": rec[system_key].strip()})
        used.add(system_key)
    return msgs


def _read(rec: dict, columns: dict | None, used: set) -> list[dict]:
    """The shape a record has, read as messages; the columns read are added to `used`."""
    if columns:
        col = {k: str(v).strip().lower() for k, v in columns.items()}
        return _pair(rec, col["user"], col["assistant"], col.get("system"), used)
    for key in ("messages", "conversations"):  # role/content or from/value turns in either
        if key in rec:
            used.add(key)
            return _conversation(rec[key], key)
    both = [(a, b) for a, b in COLUMN_PAIRS if a in rec and b in rec]
    some = [(a, b) for a, b in COLUMN_PAIRS if a in rec or b in rec]
    if both or (some and "text" not in rec):
        return _pair(rec, *(both or some)[0], used=used)
    if "text" in rec:
        used.add("text")
        return [{"role": "assistant", "content": _text(rec, "text")}]
    raise ValueError(f"unrecognised-record: keys {', '.join(sorted(map(str, rec)))[:80]}")


def to_messages(rec: dict, columns: dict | None = None, unused: set | None = None) -> list[dict]:
    """Normalize any supported record shape to chat messages; raises ValueError(reason) if it cannot.

    Shapes: chat `messages` (role/content), ShareGPT `conversations` (from/value), a column pair
    (instruction/output, prompt/completion, prompt/response, question/answer, ...; names case-insensitive) with
    optional input/context (joined to the question), system/system_prompt and history ([[question, answer], ...]),
    a lone `text` (one assistant turn), or an explicit mapping `columns={"user": COL, "assistant": COL, "system": COL
    (optional)}`. unused: the record's columns that hold something and were not read are added to it (01 names them).
    """
    lowered = {str(k).strip().lower(): v for k, v in reversed(list(rec.items()))}  # first spelling wins
    used: set = set()
    msgs = _read(lowered, columns, used)
    if unused is not None:
        unused.update(str(k) for k, v in rec.items() if str(k).strip().lower() not in used and not _blank(v))
    return msgs


def normalized_key(msgs: list[dict]) -> bytes:
    """What makes two conversations the same record: roles and text, case and runs of whitespace aside."""
    key = json.dumps([(m["role"], " ".join(m["content"].lower().split())) for m in msgs])
    return hashlib.blake2b(key.encode(), digest_size=16).digest()


def prompt_key(msgs: list[dict]) -> bytes | None:
    """What makes two records answers to the same prompt: the turns before the last answer, compared as
    normalized_key compares records; None for a record with none (plain text shares no prompt)."""
    return normalized_key(msgs[:-1]) if len(msgs) > 1 else None


def split_by_prompt(keys: list, eval_fraction: float, seed: int) -> tuple[list[int], list[int], dict]:
    """(train indexes, eval indexes, what moved): each record's random draw, then every record that shares its prompt
    (`records.prompt_key`; None shares nothing) with an earlier one put in that one's split, so a held-out prompt is
    never trained on. Without shared prompts this is the draw itself. Should grouping empty a split (all records one
    prompt), the draw stands and `prompts_in_both` counts the prompts on both sides."""
    order = list(range(len(keys)))
    random.Random(seed).shuffle(order)
    n_eval = min(len(keys) - 1, max(1, round(len(keys) * eval_fraction))) if len(keys) > 1 else 0
    drawn = [False] * len(keys)
    for i in order[:n_eval]:
        drawn[i] = True
    held, first, moved = list(drawn), {}, 0
    for i, key in enumerate(keys):
        j = i if key is None else first.setdefault(key, i)
        moved += held[i] != held[j]
        held[i] = held[j]
    if len(keys) > 1 and (all(held) or not any(held)):
        held, moved = drawn, 0
    sides = {}
    for key, h in zip(keys, held):
        sides.setdefault(key, set()).add(h)
    both = sum(len(v) == 2 for k, v in sides.items() if k is not None)
    return [i for i in order if not held[i]], [i for i in order if held[i]], {"moved": moved, "prompts_in_both": both}
