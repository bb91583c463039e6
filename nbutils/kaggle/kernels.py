"""Kaggle kernels: kernel-metadata.json for each notebook of the chain, push-ready bundles, and the push.

    python -m nbutils.kaggle metadata | bundle | push      (see nbutils/kaggle/__main__.py)
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

from nbutils import chain
from nbutils.runtime import settings

ROOT = Path(__file__).resolve().parents[2]
METADATA_FILE = "kernel-metadata.json"


def kernel_metadata(stem: str, code_file: str, owner: str | None = None) -> dict:
    """kernel-metadata.json for one notebook, every field explicit (the client's defaults and its docs disagree)."""
    owner = owner or settings.kaggle_owner()
    nb = chain.by_notebook(stem)
    meta = {
        "id": f"{owner}/{nb.slug}",
        "title": nb.title,
        "code_file": code_file,
        "language": "python",
        "kernel_type": "notebook",
        "is_private": True,
        "enable_gpu": nb.gpu,
        "enable_tpu": False,
        # Explicit: the client defaults to on, its docs say off. On: the install cell takes from PyPI (nbutils from
        # GitHub) what the attached dataset cannot install, a dataset built from another nbutils or older than the
        # pins, and base models come from the hub; internet-off competitions flip it (the dataset covers installs).
        "enable_internet": True,
        "dataset_sources": [f"{owner}/{settings.DATASET_SLUG}"],
        "competition_sources": [],
        "kernel_sources": [f"{owner}/{chain.by_stage(up).slug}" for up in nb.upstream],
        "model_sources": [],
    }
    if nb.gpu:
        meta["machine_shape"] = "NvidiaTeslaT4"
    return meta


def _dump(obj: dict) -> str:
    return json.dumps(obj, indent=2) + "\n"


def write_metadata(root: Path = ROOT, owner: str = settings.KAGGLE_OWNER) -> list[Path]:
    """kaggle-metadata/<slug>/kernel-metadata.json (code_file points at notebooks/), for the configured owner."""
    out = []
    for nb in chain.STAGES:
        path = root / "kaggle-metadata" / nb.slug / METADATA_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_dump(kernel_metadata(nb.notebook, f"../../notebooks/{nb.notebook}.ipynb", owner)))
        out.append(path)
    return out


def bundle(dest: Path = ROOT / "build" / "kaggle", root: Path = ROOT, owner: str | None = None) -> list[Path]:
    """build/kaggle/<slug>/: kernel-metadata.json + the .ipynb without outputs, for `kaggle kernels push -p`."""
    import nbformat

    folders = []
    for nb in chain.STAGES:
        source = root / "notebooks" / f"{nb.notebook}.ipynb"
        if not source.exists():
            raise FileNotFoundError(f"{source} is missing: run `make sync` to generate it from the .py")
        notebook = nbformat.read(source, as_version=4)
        for cell in notebook.cells:
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
        folder = dest / nb.slug
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        nbformat.write(notebook, folder / f"{nb.notebook}.ipynb")
        (folder / METADATA_FILE).write_text(_dump(kernel_metadata(nb.notebook, f"{nb.notebook}.ipynb", owner)))
        folders.append(folder)
    return folders


def credentials_problem() -> str | None:
    """None when the kaggle client has credentials to use, else what is missing and where to put it."""
    env = os.environ
    if env.get("KAGGLE_API_TOKEN") or (env.get("KAGGLE_USERNAME") and env.get("KAGGLE_KEY")):
        return None
    config = settings.kaggle_config_dir()
    home = Path.home() / ".kaggle"
    if any(p.exists() for p in (config / "kaggle.json", home / "access_token", home / "access_token.txt",
                                home / "credentials.json")):
        return None
    where = env.get("KAGGLE_CONFIG_DIR") or "~/.kaggle"
    return ("No Kaggle credentials, nothing was pushed. Create a token at https://www.kaggle.com/settings/api "
            "(API > Create New Token), then either export KAGGLE_API_TOKEN=<token>, or export KAGGLE_USERNAME=<you> "
            f"KAGGLE_KEY=<key>, or save kaggle.json as {where}/kaggle.json (chmod 600).")


TERMINAL = ("COMPLETE", "ERROR", "CANCEL_REQUESTED", "CANCEL_ACKNOWLEDGED")
STARTED = ("QUEUED", "RUNNING")


def _wait(api, kernel_id: str, poll_s: float, grace_s: float = 300.0) -> str:
    """Poll a kernel's run until it ends; the final status name (COMPLETE, ERROR, CANCEL_...).

    Right after kernels_push the status can still be the previous version's (COMPLETE from the last run): taken at face
    value, the next notebook would start on that run's output. A terminal status counts once this run was seen queued
    or running, or after grace_s (a run that ended between two polls is never seen running)."""
    last, started, since = None, False, time.monotonic()
    while True:
        response = api.kernels_status(kernel_id)
        status = getattr(response.status, "name", str(response.status)).upper()
        if status != last:
            print(f"[kaggle] {kernel_id}: {status}", flush=True)
            last = status
        started = started or status in STARTED
        waited = time.monotonic() - since
        if status in TERMINAL and (started or waited >= grace_s):
            if not started:
                print(f"[kaggle] {kernel_id}: not seen queued or running in {waited:.0f} s; taking {status} as this "
                      "version's (check its log on Kaggle if in doubt)", flush=True)
            if response.failure_message:
                print(f"[kaggle] {kernel_id}: {response.failure_message}", file=sys.stderr)
            return status
        time.sleep(poll_s)


def push(dest: Path = ROOT / "build" / "kaggle", wait: bool = True, poll_s: float = 60.0) -> int:
    """Bundle and push every notebook in chain order; wait for each run so the next one finds its output.

    Uses the kaggle client library (what `kaggle kernels push` calls), because the CLI exits 0 even
    when the server rejects a push. Returns a process exit code; says plainly what is missing.
    """
    problem = credentials_problem()
    if problem:
        print(problem, file=sys.stderr)
        return 1
    from kaggle.api.kaggle_api_extended import KaggleApi

    api = KaggleApi()
    api.authenticate()
    owner = os.environ.get("KAGGLE_USERNAME") or api.config_values.get("username") or settings.kaggle_owner()
    if owner == settings.KAGGLE_OWNER and owner == "your-kaggle-username":
        print("Unknown Kaggle account: export KAGGLE_USERNAME=<you> (or set KAGGLE_OWNER in nbutils/runtime/settings.py).",
              file=sys.stderr)
        return 1
    folders = bundle(dest, owner=owner)
    for i, folder in enumerate(folders):
        kernel_id = json.loads((folder / METADATA_FILE).read_text())["id"]
        print(f"[kaggle] pushing {kernel_id} from {folder}", flush=True)
        response = api.kernels_push(str(folder))
        if response is None or response.error:
            print(f"[kaggle] push of {kernel_id} failed: {getattr(response, 'error', 'no response')}", file=sys.stderr)
            return 1
        for what in ("invalid_dataset_sources", "invalid_kernel_sources", "invalid_competition_sources"):
            if getattr(response, what, None):
                print(f"[kaggle] warning: {what.replace('_', ' ')}: {getattr(response, what)} "
                      f"(upload the {settings.DATASET_SLUG} dataset first: see docs/kaggle-colab.md)", file=sys.stderr)
        print(f"[kaggle] version {response.version_number}: {response.url}", flush=True)
        if wait and i < len(folders) - 1:
            status = _wait(api, kernel_id, poll_s)
            if status != "COMPLETE":
                print(f"[kaggle] {kernel_id} ended {status}; not pushing the notebooks that read its output.",
                      file=sys.stderr)
                return 1
    return 0
