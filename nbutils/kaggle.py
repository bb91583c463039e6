"""Kaggle and Colab: kernel metadata, push-ready bundles, the nbutils dataset, and the one-click badges.

One repository setting (`REPOSITORY`, or $NBUTILS_REPOSITORY for forks) drives every badge and URL;
the Kaggle owner comes from $KAGGLE_USERNAME, else `KAGGLE_OWNER`.

    python -m nbutils.kaggle metadata      # (re)write kaggle-metadata/<slug>/kernel-metadata.json
    python -m nbutils.kaggle bundle        # build/kaggle/<slug>/ ready for `kaggle kernels push -p`
    python -m nbutils.kaggle push          # push the bundles in chain order (needs credentials)
    python -m nbutils.kaggle dataset       # build/kaggle-dataset/: nbutils wheel + offline wheelhouse
    python -m nbutils.kaggle badges        # after changing REPOSITORY: rewrite badges/install URL, then make sync
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPOSITORY = "qlora-t4/notebook-suite"  # forks change this one line (or set NBUTILS_REPOSITORY)
BRANCH = "main"
KAGGLE_OWNER = "your-kaggle-username"  # used when KAGGLE_USERNAME is not set
ROOT = Path(__file__).resolve().parent.parent
# Chain order: (notebook stem, slug, title, GPU?, upstream slugs)
NOTEBOOKS = [
    ("01_data_prep", "qlora-01-data-prep", "QLoRA 01 Data Prep", False, []),
    ("02_train_qlora", "qlora-02-train-qlora", "QLoRA 02 Train QLoRA", True, ["qlora-01-data-prep"]),
    ("03_eval", "qlora-03-eval", "QLoRA 03 Eval", True, ["qlora-01-data-prep", "qlora-02-train-qlora"]),
]
DATASET_SLUG = "qlora-nbutils"


def repository() -> str:
    return os.environ.get("NBUTILS_REPOSITORY", REPOSITORY)


def owner() -> str:
    return os.environ.get("KAGGLE_USERNAME") or KAGGLE_OWNER


def kernel_metadata(stem: str, code_file: str, kernel_owner: str | None = None) -> dict:
    """kernel-metadata.json for one notebook, every field explicit (the client's defaults and docs disagree)."""
    kernel_owner = kernel_owner or owner()
    _, slug, title, gpu, upstream = next(n for n in NOTEBOOKS if n[0] == stem)
    meta = {
        "id": f"{kernel_owner}/{slug}", "title": title, "code_file": code_file, "language": "python",
        "kernel_type": "notebook", "is_private": True, "enable_gpu": gpu, "enable_tpu": False,
        "enable_internet": True,  # the install cell uses the index when the dataset's wheelhouse is absent
        "dataset_sources": [f"{kernel_owner}/{DATASET_SLUG}"],
        "competition_sources": [], "kernel_sources": [f"{kernel_owner}/{s}" for s in upstream], "model_sources": [],
    }
    if gpu:
        meta["machine_shape"] = "NvidiaTeslaT4"
    return meta


def write_metadata(root: Path = ROOT, kernel_owner: str | None = None) -> list[Path]:
    """kaggle-metadata/<slug>/kernel-metadata.json for every notebook (code_file points at notebooks/)."""
    out = []
    for stem, slug, *_ in NOTEBOOKS:
        path = root / "kaggle-metadata" / slug / "kernel-metadata.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(kernel_metadata(stem, f"../../notebooks/{stem}.ipynb", kernel_owner), indent=2) + "\n")
        out.append(path)
    return out


def bundle(dest: Path = ROOT / "build" / "kaggle", root: Path = ROOT) -> list[Path]:
    """build/kaggle/<slug>/ with kernel-metadata.json and the .ipynb without outputs, for `kaggle kernels push -p`."""
    import nbformat

    folders = []
    for stem, slug, *_ in NOTEBOOKS:
        folder = dest / slug
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        nb = nbformat.read(root / "notebooks" / f"{stem}.ipynb", as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
        nbformat.write(nb, folder / f"{stem}.ipynb")
        (folder / "kernel-metadata.json").write_text(json.dumps(kernel_metadata(stem, f"{stem}.ipynb"), indent=2) + "\n")
        folders.append(folder)
    return folders


def credentials_problem() -> str | None:
    """None when the kaggle client can authenticate, else what is missing and where to put it."""
    if os.environ.get("KAGGLE_API_TOKEN") or (os.environ.get("KAGGLE_USERNAME") and os.environ.get("KAGGLE_KEY")):
        return None
    config = Path(os.environ.get("KAGGLE_CONFIG_DIR", Path.home() / ".kaggle"))
    if (config / "kaggle.json").exists() or (config / "access_token").exists():
        return None
    return ("No Kaggle credentials: set KAGGLE_USERNAME and KAGGLE_KEY (or KAGGLE_API_TOKEN), or put kaggle.json "
            f"in {config} (Kaggle > Settings > API > Create New Token). Nothing was pushed.")


def push(folders: list[Path]) -> int:
    """Push bundles in chain order with the kaggle CLI; a clear message and exit 1 without credentials."""
    problem = credentials_problem()
    if problem:
        print(problem, file=sys.stderr)
        return 1
    for folder in folders:
        print(f"[kaggle] pushing {folder.name}")
        subprocess.run(["kaggle", "kernels", "push", "-p", str(folder)], check=True)
    return 0


def dataset(dest: Path = ROOT / "build" / "kaggle-dataset", python_version: str = "3.11") -> Path:
    """Dataset folder: dataset-metadata.json, the nbutils wheel, and wheels/ for internet-off installs.

    The wheelhouse holds every package the install step may install (nbutils.install.PINS) with its
    full dependency closure, for the Kaggle Python version, resolved with torch taken as present.
    """
    from nbutils.install import PINS

    if dest.exists():
        shutil.rmtree(dest)
    wheels = dest / "wheels"
    wheels.mkdir(parents=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dest), str(ROOT)], check=True)
    specs = [f"{name}=={version}" for name, version in PINS.items()]
    # torch is preinstalled on Kaggle: a constraint pins it to this machine's version so nothing pulls a new one,
    # and its own (CUDA) dependencies are not downloaded.
    # Kaggle's image is Ubuntu 22.04 (glibc 2.35): every manylinux tag up to 2_35 runs there.
    platforms = [a for tag in ("2014", "_2_17", "_2_24", "_2_27", "_2_28", "_2_31", "_2_34", "_2_35")
                 for a in ("--platform", f"manylinux{tag}_x86_64")]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "--python-version",
                    python_version, *platforms, "--platform", "any", "-d", str(wheels), *specs], check=True)
    for wheel in wheels.glob("*.whl"):
        if wheel.name.startswith(("torch-", "nvidia_", "triton-")):
            wheel.unlink()
    (dest / "dataset-metadata.json").write_text(json.dumps({
        "id": f"{owner()}/{DATASET_SLUG}", "title": "QLoRA nbutils", "licenses": [{"name": "apache-2.0"}],
    }, indent=2) + "\n")
    return dest


def badges_markdown(stem: str) -> str:
    """'Open in Colab' and 'Open in Kaggle' badges for one notebook, from the one repository setting."""
    blob = f"https://github.com/{repository()}/blob/{BRANCH}/notebooks/{stem}.ipynb"
    colab = f"https://colab.research.google.com/github/{repository()}/blob/{BRANCH}/notebooks/{stem}.ipynb"
    return (f"[![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab}) "
            f"[![Open in Kaggle](https://kaggle.com/static/images/open-in-kaggle.svg)]"
            f"(https://kaggle.com/kernels/welcome?src={blob})")


def notebooks_table_markdown() -> str:
    rows = ["| notebook | open |", "|---|---|"]
    rows += [f"| `notebooks/{stem}` | {badges_markdown(stem)} |" for stem, *_ in NOTEBOOKS]
    return "\n".join(rows)


def update_notebooks(root: Path = ROOT) -> list[Path]:
    """Rewrite each notebook .py's badge line and install URL from the repository setting (then run make sync)."""
    import re

    changed = []
    for stem, *_ in NOTEBOOKS:
        path = root / "notebooks" / f"{stem}.py"
        text = path.read_text()
        new = re.sub(r"^# \[!\[Open in Colab\].*$", "# " + badges_markdown(stem), text, count=1, flags=re.M)
        new = re.sub(r"git\+https://github\.com/[^@\"]+@[\w.-]+", f"git+https://github.com/{repository()}@{BRANCH}", new)
        if new != text:
            path.write_text(new)
            changed.append(path)
    return changed


def main(argv: list[str] | None = None) -> int:
    cmd = (argv or sys.argv[1:] or ["bundle"])[0]
    if cmd == "metadata":
        print("\n".join(str(p) for p in write_metadata()))
    elif cmd == "bundle":
        print("\n".join(str(p) for p in bundle()))
    elif cmd == "push":
        return push(bundle())
    elif cmd == "dataset":
        print(dataset())
    elif cmd == "table":
        print(notebooks_table_markdown())
    elif cmd == "badges":
        print("\n".join(str(p) for p in update_notebooks()) or "notebooks already match the repository setting")
    else:
        print(f"unknown command {cmd!r}: use metadata, bundle, push, dataset, table or badges", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
