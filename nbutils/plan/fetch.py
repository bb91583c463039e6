"""A model's light files only: config.json, the tokenizer files and generation_config.json, never the weights.

From the Hub (a few files, kB to a few MB: the tokenizer is the largest) or from a folder (a download, a Kaggle
Model input), into one folder the dry run builds its twin from. A model that cannot be read gets the suite's
message (nbutils.runtime.modelsource): unreachable, gated, misspelt.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from nbutils.plan.shrink import COPIED
from nbutils.runtime import modelsource

WANTED = ("config.json", *COPIED)


def wanted(names) -> list[str]:
    """The files of a model repository the dry run needs (top level only: no weights, no subfolders)."""
    return sorted(n for n in names if n in WANTED)


def fetch(model: str, dest: str | Path) -> Path:
    """config.json, the tokenizer files and generation_config.json of `model` (Hub id or folder) in `dest`."""
    dest = Path(dest)
    modelsource.check(model)  # the suite's message for an unreachable, gated or misspelt model, now
    dest.mkdir(parents=True, exist_ok=True)
    source = Path(model)
    if source.is_dir():
        names = wanted(p.name for p in source.iterdir() if p.is_file())
        for name in names:
            shutil.copy2(source / name, dest / name)
        return dest
    from huggingface_hub import HfApi, hf_hub_download

    token = modelsource.token()
    for name in wanted(HfApi().list_repo_files(model, token=token)):
        shutil.copy2(hf_hub_download(model, name, token=token), dest / name)
    return dest
