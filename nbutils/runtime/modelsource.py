"""Where the base model comes from, and one clear message when it cannot be reached.

`base_model` is the embedded default, a local folder (a Kaggle Model or dataset input, a download) or a Hub id.
Before anything loads, `check` answers in well under a second: a Hub id that is neither in this machine's cache
nor reachable (a Kaggle background run with the internet off, a competition) would otherwise end in transformers'
"We couldn't connect to 'https://huggingface.co'" after about a minute of retries; a gated model (Llama, Gemma)
without a token, or a token without access, and a misspelt id each get a message that says what to do.
A token found with `secrets.get_secret("HF_TOKEN")` (Kaggle secrets, Colab userdata, the environment) is passed
to every load, so a gated model works once the secret is added.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from nbutils import embedded

REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")  # owner/name, as the Hub spells them
WHERE_TO_ATTACH = {
    "kaggle": "attach it to this notebook (Add Input > Models, or a dataset holding its files) and set base_model to "
              "its folder under /kaggle/input/ (the one that holds config.json)",
    "colab": "download it once with the internet on (or copy it to Drive) and set base_model to that folder",
    "local": "download it once with the internet on (`huggingface-cli download ID --local-dir DIR`) and set "
             "base_model to that folder",
}


class ModelNotReachable(OSError):
    """The base model cannot be read here: the message names it and says what to attach or set."""


def token() -> str | None:
    """HF_TOKEN from the platform's secret store or the environment, else None (public models need none)."""
    from nbutils.runtime.secrets import get_secret

    return get_secret("HF_TOKEN", required=False)


def resolve(base_model: str) -> str:
    """What `from_pretrained` is given: the embedded default's folder, a local folder, or the Hub id."""
    return embedded.resolve_model(base_model)


def _platform() -> str:
    from nbutils.runtime.environment import detect_platform

    return detect_platform().name


def _folder_problem(base_model: str) -> str | None:
    """Why a local folder is not a model folder (None: it is one)."""
    folder = Path(base_model)
    if (folder / "config.json").is_file():
        return None
    # a Kaggle Model attaches as <name>/<framework>/<variation>/<version>: the config one to three levels down
    inside = [str(p.parent) for depth in (1, 2, 3) for p in sorted(folder.glob("*/" * depth + "config.json"))]
    hint = f" The model is inside it: set base_model to {inside[0]!r}." if inside else ""
    return f"base_model={base_model!r} is a folder without config.json, so it is not a model folder.{hint}"


def _cached(repo: str) -> bool:
    """The model's config.json is already in this machine's Hub cache (then no network is needed)."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo, "config.json")
    return isinstance(found, str)


def _hub_problem(repo: str, secret: str | None) -> str | None:
    """Ask the Hub whether this token may read the repo; the suite's message when not (None: it may)."""
    from huggingface_hub import auth_check
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    from nbutils.runtime.secrets import WHERE

    where = _platform()
    try:
        auth_check(repo, token=secret)  # None: huggingface_hub's own (HF_TOKEN, a saved login)
    except GatedRepoError:
        if secret:
            return (f"{repo} is a gated model and the HF_TOKEN found here has no access to it yet: accept its license "
                    f"at https://huggingface.co/{repo} with the account that owns the token (approval can take a "
                    "while), then run again.")
        return (f"{repo} is a gated model and no HF_TOKEN was found: accept its license at https://huggingface.co/{repo}, "
                f"create a read token, and add it as a secret named HF_TOKEN ({WHERE[where].format(name='HF_TOKEN')}); "
                "the suite reads it with nbutils.runtime.secrets.get_secret.")
    except RepositoryNotFoundError:
        return (f"no model {repo!r} on the Hugging Face Hub: check the spelling (owner/name, as on its page); a private "
                f"model needs an HF_TOKEN secret of an account that can read it ({WHERE[where].format(name='HF_TOKEN')}).")
    except Exception as e:  # noqa: BLE001 -- httpx/requests connection errors, timeouts, offline mode: all 'unreachable'
        return _unreachable(repo, f"{type(e).__name__}: {str(e)[:120]}")
    return None


def _unreachable(repo: str, detail: str) -> str:
    return (f"The base model {repo!r} cannot be reached: it is not in this machine's cache and the Hugging Face Hub "
            f"does not answer ({detail}; a background run with the internet off, or a competition notebook). To use "
            f"it, {WHERE_TO_ATTACH[_platform()]}, then run again.")


_READABLE: set[tuple[str, str | None]] = set()  # Hub answers kept for the session: one request per model


def _problem(base_model: str, secret: str | None) -> str | None:
    if base_model == embedded.EMBEDDED:
        return None
    if Path(base_model).is_dir():
        return _folder_problem(base_model)
    if base_model.startswith(("/", "./", "../", "~")) or not REPO_ID.match(base_model):
        return (f"base_model={base_model!r} is neither a folder on this machine nor a Hub id (owner/name). Set it to "
                "a model folder (the one holding config.json) or a Hub id such as 'Qwen/Qwen2.5-0.5B-Instruct'.")
    if (base_model, secret) in _READABLE or _cached(base_model):
        return None
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return _unreachable(base_model, "HF_HUB_OFFLINE is set")
    problem = _hub_problem(base_model, secret)
    if problem is None:
        _READABLE.add((base_model, secret))
    return problem


def check(base_model: str) -> None:
    """Raise ModelNotReachable with the suite's message when base_model cannot be read here; quiet when it can."""
    problem = _problem(str(base_model), token())
    if problem:
        raise ModelNotReachable(problem)


def load(loader, base_model: str, **kwargs):
    """loader(resolve(base_model), **kwargs) (a from_pretrained), after `check`, with the HF token when there is one."""
    check(base_model)
    secret = token()
    if secret and base_model != embedded.EMBEDDED and not Path(base_model).is_dir():
        kwargs.setdefault("token", secret)
    return loader(resolve(base_model), **kwargs)


def load_config(base_model: str):
    """The model's config only (no weights): for the memory plan and the checks made before loading."""
    from transformers import AutoConfig

    return load(AutoConfig.from_pretrained, base_model)
