"""Hugging Face Hub datasets as an input: `owner/name[:config][@split]`, read as `nbutils.data.readers` reads a file.

The split defaults to train, else the first split whose name starts with train (ultrachat_200k has train_sft and
train_gen, no train); a dataset with several configs (gsm8k: main, socratic) needs one named. Only a connection
failure gets the advice for a run without internet; any other failure says what the dataset offers and how to name it.
"""

from __future__ import annotations

import ast
import os
import re
import socket
from collections.abc import Iterator
from urllib.parse import urlparse

from nbutils.runtime import modelsource

ID = re.compile(r"^(?P<name>[^:@\s]+)(?::(?P<config>[^:@\s]+))?(?:@(?P<split>[^:@\s]+))?$")
OFFLINE = ("Without internet (Kaggle: Settings > Internet off; or locally), download it once and pass the saved folder "
           "or a file instead, or set HF_HUB_OFFLINE=1 to use the local cache.")
_SPLITS = re.compile(r"Unknown split \"[^\"]*\"\. Should be one of (\[.*?\])")
_CONFIGS = re.compile(r"(?:available configs|Available): (\[.*?\])")
_CONNECTION = re.compile(r"couldn't reach|connection error|connecterror|timed out|offline|name resolution", re.IGNORECASE)


def parse(path: str) -> tuple[str, str | None, str | None] | None:
    """(name, config, split) of `owner/name[:config][@split]`, or None when `path` is not a hub dataset id."""
    m = ID.match(path.strip())
    if not m or not modelsource.REPO_ID.match(m["name"]):
        return None
    return m["name"], m["config"], m["split"]


def describe(path: str, split: str | None = None) -> str:
    """What the log says about a hub id: its name, and the config and split asked for."""
    name, config, named = parse(path) or (path, None, None)
    asked = named or split
    return (f"a hub dataset id ({name}" + (f", config {config!r}" if config else "")
            + (f", split {asked!r}" if asked else ", split train or the first train*") + ")")


def unreachable(timeout: float = 3.0) -> str | None:
    """Why the hub cannot be reached, or None; a few seconds here instead of a minute of retries."""
    if any(os.environ.get(v, "").lower() in ("1", "true") for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")):
        return None  # offline mode: load_dataset answers from the local cache, quickly
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
    except OSError as e:
        return f"cannot reach {host}: {e}"
    return None


def _listed(pattern: re.Pattern, error: Exception) -> list[str]:
    """The names an error message lists (`Should be one of ['a', 'b']`), or []."""
    m = pattern.search(str(error))
    try:
        return [str(x) for x in ast.literal_eval(m.group(1))] if m else []
    except (ValueError, SyntaxError):
        return []


def _connection_failure(error: BaseException | None) -> bool:
    """Whether an error (or one it was raised from) is a failure to reach the hub, not an answer from it."""
    while error is not None:
        if isinstance(error, (ConnectionError, TimeoutError, socket.gaierror)) or _CONNECTION.search(
                f"{type(error).__name__} {error}"):
            return True
        error = error.__cause__ or error.__context__
    return False


def _load(load_dataset, name: str, config: str | None, split: str | None):
    """load_dataset with the split asked for, else train, else the first train* split the error lists."""
    try:
        return load_dataset(path=name, name=config, split=split or "train"), split or "train"
    except ValueError as e:
        names = _listed(_SPLITS, e)
        chosen = next((n for n in names if n.startswith("train")), None)
        if split or not chosen:
            raise
        return load_dataset(path=name, name=config, split=chosen), chosen


def read(path: str, split: str | None = None) -> Iterator[tuple[str, int, dict]]:
    """Every record of `owner/name[:config][@split]` (split: the `split` parameter, when the id names none)."""
    from datasets import load_dataset

    name, config, named = parse(path) or (path, None, None)
    if why := unreachable():
        raise ValueError(f"{path}: looks like a Hugging Face dataset id, but {why}. {OFFLINE}")
    try:
        ds, chosen = _load(load_dataset, name, config, named or split)
    except Exception as e:  # noqa: BLE001 -- the hub raises many types; the message says what to do
        raise ValueError(_failure(path, name, config, e)) from e
    if chosen != (named or split or "train"):
        print(f"[data] {path}: no split 'train'; read {chosen!r} (name another as {name}"
              f"{f':{config}' if config else ''}@SPLIT)")
    for n, rec in enumerate(ds, 1):
        yield path, n, rec


def _failure(path: str, name: str, config: str | None, error: Exception) -> str:
    """What went wrong loading a hub dataset, and what to do about it."""
    what = f"{type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}"
    if _connection_failure(error):
        return f"{path}: could not reach the Hugging Face Hub ({what}). {OFFLINE}"
    configs, names = _listed(_CONFIGS, error), _listed(_SPLITS, error)
    if configs:
        return (f"{path}: the dataset has several configs ({', '.join(configs)}): name one, as "
                f"{name}:{configs[0]} (and a split as {name}:{configs[0]}@SPLIT).")
    if names:
        return (f"{path}: no such split; it has {', '.join(names)}: name one, as "
                f"{name}{f':{config}' if config else ''}@{names[0]}.")
    if type(error).__name__ == "DatasetNotFoundError":
        return (f"{path}: no such dataset on the Hugging Face Hub ({what}). Check the id (owner/name, as on its "
                "page); a gated or private one needs a token (HF_TOKEN) that may read it.")
    return (f"{path}: could not load it as a Hugging Face dataset ({what}). A dataset id is owner/name, with an "
            "optional :config and @split (owner/name:config@split).")
