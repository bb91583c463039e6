"""Secrets (HF token, W&B key ...) read the right way on each platform, never printed or saved.

Order of preference: Kaggle secrets on Kaggle, Colab's userdata on Colab, then the environment.
Values fetched here are remembered (in memory only) so `redact` can scrub them from anything written.
"""

from __future__ import annotations

import os
import re

from nbutils.nbchecks import SECRET_SHAPES

_SEEN: set[str] = set()
WHERE = {
    "kaggle": "Kaggle: Add-ons > Secrets, add {name} and tick it for this notebook",
    "colab": "Colab: the key icon in the left sidebar, add {name} and enable 'Notebook access'",
    "local": "locally: export {name}=... before starting Jupyter (or put it in your shell profile)",
}


class SecretMissing(KeyError):
    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0]


def _kaggle(name: str) -> str | None:
    try:
        from kaggle_secrets import UserSecretsClient
    except ImportError:
        return None
    try:
        return UserSecretsClient().get_secret(name)
    except Exception:  # noqa: BLE001 -- the client raises its own types when a secret is not attached
        return None


def _colab(name: str) -> str | None:
    try:
        from google.colab import userdata
    except ImportError:
        return None
    try:
        return userdata.get(name)
    except Exception:  # noqa: BLE001 -- SecretNotFoundError / NotebookAccessError
        return None


def get_secret(name: str) -> str:
    """The secret's value from the platform's store or the environment; a message saying where to add it if absent."""
    from nbutils.environment import detect_platform

    platform = detect_platform().name
    readers = {"kaggle": [_kaggle], "colab": [_colab]}.get(platform, [])
    for read in [*readers, lambda n: os.environ.get(n)]:
        value = read(name)
        if value:
            _SEEN.add(value)
            return value
    raise SecretMissing(f"secret {name} not found. Add it on {WHERE[platform].format(name=name)}; "
                        f"or set the environment variable {name}.")


def redact(obj):
    """A copy of a string/dict/list with known secret values and token shapes replaced by '***'."""
    if isinstance(obj, str):
        for value in _SEEN:
            obj = obj.replace(value, "***")
        for rx in SECRET_SHAPES.values():
            obj = rx.sub("***", obj)
        return obj
    if isinstance(obj, dict):
        return {k: "***" if re.search(r"token|secret|password|api_key", str(k), re.I) else redact(v)
                for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(redact(v) for v in obj)
    return obj
