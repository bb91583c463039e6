"""Secrets (HF token, W&B key ...) read the right way on each platform, never printed or saved.

Order of preference: Kaggle secrets on Kaggle, Colab's userdata on Colab, then the environment
(the only source locally). Values fetched here are remembered in memory only, so `redact` can scrub
them from anything written (run configs, reports, logs). No message here ever contains a value.
"""

from __future__ import annotations

import os
import re

# Token shapes a leaked secret has; the harness's static check and `redact` both use these.
SECRET_SHAPES = {
    "Hugging Face token": re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"),
    "OpenAI key": re.compile(r"\bsk-(?:proj-)?[A-Za-z0-9_-]{20,}\b"),
    "Kaggle key": re.compile(r"""["']?key["']?\s*[:=]\s*["'][0-9a-f]{32}["']"""),
    "W&B key": re.compile(r"""wandb[^\n]{0,40}["'][0-9a-f]{40}["']""", re.IGNORECASE),
}
_SEEN: set[str] = set()
WHERE = {
    "kaggle": "on Kaggle: Add-ons > Secrets, add {name}, and tick it for this notebook (attach it)",
    "colab": "on Colab: the key icon in the left sidebar, add {name}, and enable 'Notebook access'",
    "local": "locally: export {name}=... in the shell that starts Jupyter (or papermill)",
}
# Token shapes scrubbed even when they were not fetched here (beyond nbchecks' list).
EXTRA_SHAPES = (
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"),  # GitHub tokens
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{30,}\b"),
    re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{20,}"),
)
# Keys whose values are secrets whatever they look like; not pad_token, max_new_tokens and friends.
SECRET_KEY = re.compile(r"(?i)(secret|passw(or)?d|api_?key|credential|^(hf|hub|access|auth|api|wandb|github|kaggle)_?token$"
                        r"|^token$|^kaggle_key$)")


class SecretMissing(KeyError):
    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0]


def _kaggle(name: str, why: list[str]) -> str | None:
    try:
        from kaggle_secrets import UserSecretsClient
    except ImportError:
        why.append("kaggle_secrets is not importable here")
        return None
    try:
        return UserSecretsClient().get_secret(name)
    except Exception as e:  # noqa: BLE001 -- not attached / not defined; only the type is reported, never text
        why.append(f"Kaggle secrets said {type(e).__name__}")
        return None


def _colab(name: str, why: list[str]) -> str | None:
    try:
        from google.colab import userdata
    except ImportError:
        why.append("google.colab is not importable here")
        return None
    try:
        return userdata.get(name)
    except Exception as e:  # noqa: BLE001 -- SecretNotFoundError / NotebookAccessError; type only
        why.append(f"Colab userdata said {type(e).__name__}")
        return None


def _env(name: str, why: list[str]) -> str | None:
    value = os.environ.get(name)
    if not value:
        why.append(f"${name} is not set")
    return value or None


def get_secret(name: str, required: bool = True) -> str | None:
    """The secret's value from the platform's store, else the environment; says where to add it if absent."""
    from nbutils.runtime.environment import detect_platform

    platform = detect_platform().name
    readers = {"kaggle": [_kaggle, _env], "colab": [_colab, _env]}.get(platform, [_env])
    why: list[str] = []
    for read in readers:
        value = read(name, why)
        if value:
            if len(value) >= 4:  # a shorter one would redact half of every text
                _SEEN.add(value)
            return value
    if not required:
        return None
    raise SecretMissing(f"Secret {name} not found ({'; '.join(why)}). Add it {WHERE[platform].format(name=name)}, "
                        f"then run the notebook again.")


def _redact_text(text: str) -> str:
    for value in sorted(_SEEN, key=len, reverse=True):
        text = text.replace(value, "***")
    for rx in (*SECRET_SHAPES.values(), *EXTRA_SHAPES):
        text = rx.sub("***", text)
    return text


def redact(obj):
    """A copy of a string/dict/list with fetched secret values, token shapes and secret-named keys' values as '***'."""
    if isinstance(obj, str):
        return _redact_text(obj)
    if isinstance(obj, dict):
        return {k: "***" if SECRET_KEY.search(str(k)) and isinstance(v, str) and v else redact(v)
                for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return type(obj)(redact(v) for v in obj)
    return obj
