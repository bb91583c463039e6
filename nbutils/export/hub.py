"""Push an export folder to the Hugging Face Hub: private by default, the token from `get_secret`, never shown.

Without a repo name, a token or a way to reach the Hub, it says why and skips (returns None) instead of
failing the run: a model that was merged and verified is still in the working dir. HF_ENDPOINT points it
at another hub (a mirror, or a local fake one in the tests).
"""

from __future__ import annotations

import os
import socket
from urllib.parse import urlparse

from nbutils.runtime.secrets import WHERE, get_secret, redact

TOKEN_NAME = "HF_TOKEN"


def endpoint() -> str:
    """The Hub's URL: $HF_ENDPOINT, else huggingface.co."""
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def reachable(url: str, timeout: float = 3.0) -> bool:
    """A TCP connection to the endpoint's host opens (DNS alone says nothing with the internet off)."""
    parsed = urlparse(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((parsed.hostname, port), timeout=timeout):
            return True
    except OSError:
        return False


def skip_reason(repo_id: str, token: str | None, internet: bool | None = None) -> str | None:
    """Why a push cannot happen here, as a sentence with what to do; None when it can."""
    from nbutils.runtime.environment import detect_platform

    if not repo_id:
        return "hub_repo is empty: set it to '<your-username>/<model-name>' to push"
    if not token:
        where = WHERE[detect_platform().name].format(name=TOKEN_NAME)
        return f"no {TOKEN_NAME} secret (a write token from https://huggingface.co/settings/tokens); add it {where}"
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return "HF_HUB_OFFLINE is set (an internet-off run): the export folders stay in the working dir to upload later"
    if internet is False or (internet is None and not reachable(endpoint())):
        return (f"{endpoint()} cannot be reached (internet off?): on Kaggle turn Settings > Internet on; "
                "the export folders stay in the working dir to upload later")
    return None


def targets(hub_repo: str, hub_what: str) -> dict[str, str]:
    """Export folder name -> repo id: one folder to hub_repo; with 'both', the merged model to '<hub_repo>-merged'."""
    if hub_what not in ("adapter", "merged", "both"):
        raise ValueError(f"hub_what={hub_what!r}: use adapter, merged or both")
    if not hub_repo:
        return {}
    if hub_what == "both":
        return {"adapter": hub_repo, "merged": f"{hub_repo}-merged"}
    return {hub_what: hub_repo}


def push(folder: str, repo_id: str, private: bool = True, token_name: str = TOKEN_NAME,
         commit_message: str = "Upload from the QLoRA notebooks (04_export)") -> str | None:
    """Create the repo (private unless told otherwise) and upload the folder; the repo URL, or None when skipped or
    when the push failed: a read-only token or a network error is said, token scrubbed, and the export goes on (the
    files are written; a failed push stopping 04 would cost the merge again)."""
    token = get_secret(token_name, required=False)
    why = skip_reason(repo_id, token)
    if why:
        print(f"[hub] skipped: {why}", flush=True)
        return None
    from huggingface_hub import HfApi

    api = HfApi(endpoint=endpoint(), token=token)
    try:
        url = api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
        api.upload_folder(folder_path=str(folder), repo_id=repo_id, repo_type="model", commit_message=commit_message)
    except Exception as e:  # noqa: BLE001 -- said with the token scrubbed from the message; the export goes on
        print(redact(f"[hub] push of {folder} to {repo_id} FAILED: {type(e).__name__}: {e}. Check that the token has "
                     f"write access and the repo name is yours; the files stay in {folder}: push them later with "
                     f"`huggingface-cli upload {repo_id} {folder}`"), flush=True)
        return None
    seen = "asked private" if private else "asked public"
    print(f"[hub] pushed {folder} to {url} ({seen}; a repo that existed keeps its own visibility)", flush=True)
    return str(url)
