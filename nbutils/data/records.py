"""Records to chat messages: every supported record shape (chat, ShareGPT, column pairs, plain text) turned into
validated messages, or a ValueError("<reason-id>: <detail>") the quarantine keeps.
"""

from __future__ import annotations

import hashlib
import json

# Column pairs (user, assistant) recognised in any tabular record, in order of preference; names
# are compared case-insensitively. A lone `text` column is a single assistant turn (plain text).
COLUMN_PAIRS = [("instruction", "output"), ("prompt", "completion"), ("prompt", "response"),
                ("question", "answer"), ("input", "output"), ("query", "response"), ("instruction", "response"),
                ("prompt", "answer"), ("question", "response"), ("context", "response")]
CHAT_COLUMNS = ("messages", "conversations", "text")
PREFERENCE_PAIRS = [("chosen", "rejected")]  # 05's pairs (its KTO rows are prompt/completion, a pair above)
ROLES = {"system": "system", "user": "user", "assistant": "assistant", "human": "user", "gpt": "assistant",
         "model": "assistant", "bot": "assistant", "chatgpt": "assistant"}

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


def text_field(value, name: str) -> str:
    """A required string, stripped, wherever it appears (a record's field, a preference side); raises
    ValueError("<reason-id>: <detail>") naming it: missing-field, wrong-type, empty-field."""
    if value is None:
        raise ValueError(f"missing-field: {name}")
    if not isinstance(value, str):
        raise ValueError(f"wrong-type: {name} is {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"empty-field: {name}")
    return value.strip()


def _first(turn: dict, *keys: str):
    """The first of `keys` that the turn holds with a value (not None)."""
    return next((turn[k] for k in keys if turn.get(k) is not None), None)


def turns(value, name: str) -> list[dict]:
    """A message list as {"role", "content"} turns, wherever it appears (SFT records, preference prompts and answers).

    Each turn may say role/content or ShareGPT's from/value; role aliases are mapped (human -> user, gpt -> assistant
    ...); an empty system turn is dropped (an empty `system` column is too). Raises ValueError("<reason-id>: <detail>")
    naming the field and the turn: wrong-type, unknown-role, missing-field, empty-field."""
    if isinstance(value, str):
        try:
            value = json.loads(value)  # CSV/SQL cells hold JSON text
        except json.JSONDecodeError:
            raise ValueError(f"malformed-json: {name}") from None
    if not isinstance(value, list):
        raise ValueError(f"wrong-type: {name} is {type(value).__name__}")
    out = []
    for i, t in enumerate(value, 1):
        where = f"{name} turn {i}"
        if not isinstance(t, dict):
            raise ValueError(f"wrong-type: {where} is {type(t).__name__}")
        t = {str(k).strip().lower(): v for k, v in t.items()}
        role = _first(t, "role", "from")  # Arrow/Parquet unify the shapes: both keys, one of them null
        if not isinstance(role, str) or role.strip().lower() not in ROLES:
            raise ValueError(f"unknown-role: {role} in {where}" if role is not None else f"missing-field: {where} role")
        content = _first(t, "content", "value")
        if content is None:
            raise ValueError(f"missing-field: {where} content")
        if not isinstance(content, str):
            raise ValueError(f"wrong-type: {where} content is {type(content).__name__}")
        if not content.strip():
            if ROLES[role.strip().lower()] == "system":
                continue  # an empty system prompt (common in Orca/ShareGPT exports) says nothing: dropped, as the column is
            raise ValueError(f"empty-field: {where}")
        out.append({"role": ROLES[role.strip().lower()], "content": content.strip()})
    return out


def _conversation(value, name: str) -> list[dict]:
    """An SFT conversation: its turns up to the last answer (turns after it teach nothing; dropping them keeps EOS at
    the very end)."""
    out = turns(value, name)
    while out and out[-1]["role"] != "assistant":
        out.pop()
    if not out:
        raise ValueError(f"no-assistant-turn: {name} has no assistant turn")
    return out


def _pair(rec: dict, user_key: str, assistant_key: str, system_key: str | None = None) -> list[dict]:
    user = _text(rec, user_key)  # raises missing-field / empty-field / wrong-type
    # alpaca: instruction + optional input; dolly: instruction + optional context
    extra_key = next((k for k in ("input", "context") if k in rec), None) if user_key == "instruction" else None
    extra = rec.get(extra_key) if extra_key else None
    if extra is not None and not isinstance(extra, str):
        raise ValueError(f"wrong-type: {extra_key} is {type(extra).__name__}")
    if extra and extra.strip():
        user += "\n" + extra.strip()
    msgs = [{"role": "user", "content": user}, {"role": "assistant", "content": _text(rec, assistant_key)}]
    system = rec.get(system_key or "system")
    if isinstance(system, str) and system.strip():
        msgs.insert(0, {"role": "system", "content": system.strip()})
    return msgs


def to_messages(rec: dict, columns: dict | None = None) -> list[dict]:
    """Normalize any supported record shape to chat messages; raises ValueError(reason) if it cannot.

    Shapes: chat `messages` (role/content), ShareGPT `conversations` (from/value), a column pair
    (instruction/output with optional input, prompt/completion, prompt/response, question/answer,
    ...; names case-insensitive), a lone `text` (one assistant turn), or an explicit mapping
    `columns={"user": COL, "assistant": COL, "system": COL (optional)}`.
    """
    rec = {str(k).strip().lower(): v for k, v in reversed(list(rec.items()))}  # first spelling wins
    if columns:
        col = {k: str(v).strip().lower() for k, v in columns.items()}
        return _pair(rec, col["user"], col["assistant"], col.get("system"))
    for key in ("messages", "conversations"):  # role/content or from/value turns in either
        if key in rec:
            return _conversation(rec[key], key)
    both = [(a, b) for a, b in COLUMN_PAIRS if a in rec and b in rec]
    some = [(a, b) for a, b in COLUMN_PAIRS if a in rec or b in rec]
    if both or (some and "text" not in rec):
        return _pair(rec, *(both or some)[0])
    if "text" in rec:
        return [{"role": "assistant", "content": _text(rec, "text")}]
    raise ValueError(f"unrecognised-record: keys {', '.join(sorted(map(str, rec)))[:80]}")


def normalized_key(msgs: list[dict]) -> bytes:
    """What makes two conversations the same record: roles and text, case and runs of whitespace aside."""
    key = json.dumps([(m["role"], " ".join(m["content"].lower().split())) for m in msgs])
    return hashlib.blake2b(key.encode(), digest_size=16).digest()
