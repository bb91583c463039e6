"""Kaggle and Colab: kernel metadata, push-ready bundles, the nbutils dataset, and the one-click badges.

Every URL comes from `nbutils.platform.settings` (REPOSITORY, BRANCH, KAGGLE_OWNER; env overrides there).

    python -m nbutils.kaggle metadata          # (re)write kaggle-metadata/<slug>/kernel-metadata.json
    python -m nbutils.kaggle bundle            # build/kaggle/<slug>/ ready for `kaggle kernels push -p`
    python -m nbutils.kaggle push              # bundle + push in chain order, waiting for each run
    python -m nbutils.kaggle dataset           # build/kaggle-dataset/: nbutils wheel + offline wheelhouse
    python -m nbutils.kaggle wheelhouse-check  # prove the wheelhouse installs with --no-index into torch-only venv
    python -m nbutils.kaggle table             # the README's notebooks table with badges
    python -m nbutils.kaggle sync              # after changing settings: metadata + notebooks' badges/install cell
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from nbutils.platform import settings
from nbutils.platform.install import NUMPY1_PINS, PINS, WHEELHOUSE_MANIFEST, bootstrap_cell_source

ROOT = Path(__file__).resolve().parents[2]
METADATA_FILE = "kernel-metadata.json"


@dataclass(frozen=True)
class Notebook:
    stem: str  # notebooks/<stem>.ipynb
    slug: str  # Kaggle kernel slug; kaggle's slugify(title) must give it back
    title: str
    gpu: bool
    upstream: tuple[str, ...] = field(default=())  # slugs whose output this notebook reads (kernel_sources)
    what: str = ""


# Chain order: each notebook reads the outputs of the ones before it.
NOTEBOOKS = (
    Notebook("01_data_prep", "qlora-01-data-prep", "QLoRA 01 Data Prep", False, (),
             "raw records -> chat-formatted train/eval data"),
    Notebook("02_train_qlora", "qlora-02-train-qlora", "QLoRA 02 Train QLoRA", True, ("qlora-01-data-prep",),
             "4-bit base + LoRA adapter, checkpointed"),
    Notebook("03_eval", "qlora-03-eval", "QLoRA 03 Eval", True, ("qlora-01-data-prep", "qlora-02-train-qlora"),
             "base vs fine-tuned: task metrics with intervals, eval loss, degeneration, chat"),
    Notebook("04_export", "qlora-04-export", "QLoRA 04 Export", True,
             ("qlora-01-data-prep", "qlora-02-train-qlora", "qlora-03-eval"),
             "gate on 03, merged fp16 (verified), adapter + card, Hub push, GGUF"),
)


def _notebook(stem: str) -> Notebook:
    stem = Path(stem).stem
    for nb in NOTEBOOKS:
        if nb.stem == stem:
            return nb
    raise KeyError(f"no notebook {stem!r}; known: {', '.join(n.stem for n in NOTEBOOKS)}")


# --- kernel metadata and bundles ---------------------------------------------------------------

def kernel_metadata(stem: str, code_file: str, owner: str | None = None) -> dict:
    """kernel-metadata.json for one notebook, every field explicit (the client's defaults and its docs disagree)."""
    owner = owner or settings.kaggle_owner()
    nb = _notebook(stem)
    meta = {
        "id": f"{owner}/{nb.slug}",
        "title": nb.title,
        "code_file": code_file,
        "language": "python",
        "kernel_type": "notebook",
        "is_private": True,
        "enable_gpu": nb.gpu,
        "enable_tpu": False,
        # Explicit: the client defaults to on, its docs say off. On: the install cell falls back to PyPI
        # and base models come from the hub; internet-off competitions flip it (the dataset covers installs).
        "enable_internet": True,
        "dataset_sources": [f"{owner}/{settings.DATASET_SLUG}"],
        "competition_sources": [],
        "kernel_sources": [f"{owner}/{slug}" for slug in nb.upstream],
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
    for nb in NOTEBOOKS:
        path = root / "kaggle-metadata" / nb.slug / METADATA_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_dump(kernel_metadata(nb.stem, f"../../notebooks/{nb.stem}.ipynb", owner)))
        out.append(path)
    return out


def bundle(dest: Path = ROOT / "build" / "kaggle", root: Path = ROOT, owner: str | None = None) -> list[Path]:
    """build/kaggle/<slug>/: kernel-metadata.json + the .ipynb without outputs, for `kaggle kernels push -p`."""
    import nbformat

    folders = []
    for nb in NOTEBOOKS:
        source = root / "notebooks" / f"{nb.stem}.ipynb"
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
        nbformat.write(notebook, folder / f"{nb.stem}.ipynb")
        (folder / METADATA_FILE).write_text(_dump(kernel_metadata(nb.stem, f"{nb.stem}.ipynb", owner)))
        folders.append(folder)
    return folders


# --- pushing -----------------------------------------------------------------------------------

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


def _wait(api, kernel_id: str, poll_s: float) -> str:
    """Poll a kernel's run until it ends; the final status name (COMPLETE, ERROR, CANCEL_...)."""
    last = None
    while True:
        response = api.kernels_status(kernel_id)
        status = getattr(response.status, "name", str(response.status)).upper()
        if status != last:
            print(f"[kaggle] {kernel_id}: {status}", flush=True)
            last = status
        if status in ("COMPLETE", "ERROR", "CANCEL_REQUESTED", "CANCEL_ACKNOWLEDGED"):
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
        print("Unknown Kaggle account: export KAGGLE_USERNAME=<you> (or set KAGGLE_OWNER in nbutils/platform/settings.py).",
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


# --- the nbutils dataset: wheel + offline wheelhouse --------------------------------------------

KAGGLE_PYTHON = os.environ.get("KAGGLE_PYTHON", "3.11")  # the Kaggle image's Python
# Kaggle's image is Ubuntu 22.04 (glibc 2.35): every manylinux tag up to 2_35 runs there
# (pip does not expand manylinux_2_X to older tags by itself, so they are listed).
PLATFORMS = tuple(f"{tag}_x86_64" for tag in ("manylinux2014", "manylinux_2_17", "manylinux_2_24", "manylinux_2_27",
                                               "manylinux_2_28", "manylinux_2_31", "manylinux_2_34", "manylinux_2_35"))
EXCLUDED = ("torch", "torchvision", "torchaudio", "triton", "nvidia-", "cuda-")  # the image's own CUDA stack


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _excluded(name: str) -> bool:
    name = _canonical(name)
    return any(name == e or (e.endswith("-") and name.startswith(e)) for e in EXCLUDED)


def assumed_torch(root: Path = ROOT) -> str:
    """The torch version the closure is resolved against (requirements.txt's pin; the image's own torch)."""
    for line in (root / "requirements.txt").read_text().splitlines():
        if line.startswith("torch=="):
            return line.split("==")[1].split()[0]
    raise ValueError("requirements.txt pins no torch")


def _target(python_version: str) -> list[str]:
    args = ["--only-binary=:all:", "--python-version", python_version, "--implementation", "cp"]
    for platform in PLATFORMS:
        args += ["--platform", platform]
    return args


# Pure-Python packages on PyPI as sdists only (no wheel for --only-binary to find): built into wheels
# here first, then found through --find-links like any other wheel.
SDIST_ONLY = ("rouge-score",)


def build_sdist_wheels(dest: Path) -> list[str]:
    """Wheels of the SDIST_ONLY pins in dest; the pip arguments that let the resolver find them."""
    specs = [f"{n}=={PINS[n]}" for n in SDIST_ONLY if n in PINS]
    if specs:
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dest), *specs], check=True)
    return ["--find-links", str(dest)]


def resolve_closure(specs: list[str], python_version: str = KAGGLE_PYTHON, torch: str | None = None,
                    extra_args: tuple[str, ...] = ()) -> dict[str, str]:
    """name -> version of everything `pip install specs` needs on Kaggle, torch taken as installed (and left out).

    A dry-run resolve for the target Python/platform reads metadata only (no wheel downloads); torch
    is pinned in it so nothing pulls another torch, then torch and its CUDA packages are dropped.
    """
    torch = torch or assumed_torch()
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "-qq",
                        "--report", str(report), *_target(python_version), *extra_args, *specs, f"torch=={torch}"],
                       check=True)
        items = json.loads(report.read_text())["install"]
    return {item["metadata"]["name"]: item["metadata"]["version"] for item in items
            if not _excluded(item["metadata"]["name"])}


def _build_nbutils_wheel(dest: Path, root: Path = ROOT) -> Path:
    # Built from a clean copy: setuptools' build/lib would otherwise carry deleted modules into the wheel.
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy2(root / "pyproject.toml", tmp)
        shutil.copytree(root / "nbutils", Path(tmp) / "nbutils", ignore=shutil.ignore_patterns("__pycache__"))
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                        "-w", str(dest), tmp], check=True)
    return next(dest.glob("nbutils-*.whl"))


def dataset_metadata(owner: str | None = None) -> dict:
    """dataset-metadata.json for `kaggle datasets create -p` (slug/title 6-50 chars, exactly one license)."""
    return {
        "id": f"{owner or settings.kaggle_owner()}/{settings.DATASET_SLUG}",
        "title": "QLoRA nbutils and wheelhouse",
        "subtitle": "nbutils wheel plus pinned wheels for internet-off QLoRA runs",
        "description": "The nbutils helper wheel for the QLoRA notebook suite and every package its install cell "
                       f"may need, for Kaggle's Python, without torch. Source: https://github.com/{settings.repository()}",
        # The wheels keep their own licenses (MIT, BSD, Apache-2.0 ...): "other" is the honest group.
        "licenses": [{"name": "other"}],
    }


def _wheelhouse_current(dest: Path, specs: list[str], python_version: str) -> bool:
    try:
        manifest = json.loads((dest / WHEELHOUSE_MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return (manifest.get("requested") == specs and manifest.get("python_version") == python_version
            and "numpy1_closure" in manifest and manifest.get("torch_assumed") == assumed_torch()
            and {(_canonical(n), v) for n, v in manifest["closure"].items()} <= _wheels_in(dest))


def _wheels_in(folder: Path) -> set[tuple[str, str]]:
    from packaging.utils import parse_wheel_filename

    return {(_canonical(str(name)), str(version)) for name, version, *_ in map(parse_wheel_filename,
                                                                              (w.name for w in folder.glob("*.whl")))}


def dataset(dest: Path = ROOT / "build" / "kaggle-dataset", python_version: str = KAGGLE_PYTHON) -> Path:
    """build/kaggle-dataset/: dataset-metadata.json, the nbutils wheel and the offline wheelhouse, all flat.

    Flat because `kaggle datasets create` skips sub-folders by default. The wheelhouse is every package
    in nbutils.platform.install.NEEDED at its pin plus its full dependency closure for Kaggle's Python, never torch.
    """
    specs = [f"{name}=={version}" for name, version in PINS.items()]
    if _wheelhouse_current(dest, specs, python_version):  # same pins: only nbutils itself changed
        with tempfile.TemporaryDirectory(dir=dest) as tmp:
            fresh = _build_nbutils_wheel(Path(tmp))
            for old in dest.glob("nbutils-*.whl"):
                if old.name != fresh.name:
                    old.unlink()
            os.replace(fresh, dest / fresh.name)  # atomic: a run reading the dataset never finds it without a wheel
        return dest
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    wheel = _build_nbutils_wheel(dest)
    links = tuple(build_sdist_wheels(dest))  # rouge-score ships no wheel: built here, found through --find-links
    closure = resolve_closure(specs, python_version, extra_args=links)
    # A numpy-1 image gets the releases that still run there (install.NUMPY1_PINS), numpy held below 2.
    numpy1 = [f"{n}=={NUMPY1_PINS[n][0] if n in NUMPY1_PINS else v}" for n, v in PINS.items()] + ["numpy<2"]
    closure1 = resolve_closure(numpy1, python_version, extra_args=links)
    for wanted in (closure, {n: v for n, v in closure1.items() if closure.get(n) != v}):  # one version per call
        subprocess.run([sys.executable, "-m", "pip", "download", "-qq", "--no-deps", *_target(python_version), *links,
                        "-d", str(dest), *(f"{n}=={v}" for n, v in wanted.items())], check=True)
    have = {_canonical(w.name.split("-")[0]) for w in dest.glob("*.whl")}
    missing = [n for n in closure if _canonical(n) not in have]
    if missing:
        raise RuntimeError(f"pip download left out {missing}")
    stray = [w.name for w in dest.glob("*.whl") if _excluded(w.name.split("-")[0])]
    if stray:
        raise RuntimeError(f"torch/CUDA wheels in the wheelhouse: {stray}")
    (dest / WHEELHOUSE_MANIFEST).write_text(_dump({
        "python_version": python_version, "platforms": list(PLATFORMS), "torch_assumed": assumed_torch(),
        "nbutils": wheel.name, "requested": specs, "closure": dict(sorted(closure.items())),
        "numpy1_requested": numpy1, "numpy1_closure": dict(sorted(closure1.items())),
    }))
    (dest / "dataset-metadata.json").write_text(_dump(dataset_metadata()))
    return dest


# --- badges and the notebooks' generated parts --------------------------------------------------

def _blob_path(stem: str) -> str:
    return f"{settings.repository()}/blob/{settings.branch()}/notebooks/{_notebook(stem).stem}.ipynb"


def colab_url(stem: str) -> str:
    return f"https://colab.research.google.com/github/{_blob_path(stem)}"


def kaggle_url(stem: str) -> str:
    return f"https://kaggle.com/kernels/welcome?src=https://github.com/{_blob_path(stem)}"


def badges_markdown(notebook_name: str) -> str:
    """'Open in Colab' and 'Open in Kaggle' badges for one notebook (title cell and README), from settings."""
    return (f"[![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab_url(notebook_name)}) "
            f"[![Open in Kaggle](https://kaggle.com/static/images/open-in-kaggle.svg)]({kaggle_url(notebook_name)})")


def notebooks_table_markdown() -> str:
    """The README's notebooks table: what each does, its Kaggle kernel and accelerator, and its badges."""
    rows = ["| notebook | what it does | Kaggle kernel | accelerator | open |", "|---|---|---|---|---|"]
    for nb in NOTEBOOKS:
        rows.append(f"| `notebooks/{nb.stem}` | {nb.what} | `{nb.slug}` | {'T4 GPU' if nb.gpu else 'CPU'} "
                    f"| {badges_markdown(nb.stem)} |")
    return "\n".join(rows)


BADGE_LINE = re.compile(r"^# \[!\[Open in Colab\].*$", re.M)
BOOTSTRAP_BLOCK = re.compile(r"^# Bootstrap nbutils.*?^ensure_packages\(\).*?$\n", re.M | re.S)


def sync_notebooks(root: Path = ROOT) -> list[Path]:
    """Rewrite each notebook .py's badge line and install cell from settings (then `make sync` for the .ipynb)."""
    changed = []
    cell = "".join(f"{line}\n" for line in bootstrap_cell_source().splitlines())
    for nb in NOTEBOOKS:
        path = root / "notebooks" / f"{nb.stem}.py"
        text = path.read_text()
        new = BADGE_LINE.sub(lambda _, s=nb.stem: "# " + badges_markdown(s), text, count=1)
        new = BOOTSTRAP_BLOCK.sub(lambda _: cell, new, count=1)
        if new != text:
            path.write_text(new)
            changed.append(path)
    return changed


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv) or ["bundle"]
    cmd = args[0]
    if cmd == "metadata":
        print("\n".join(str(p) for p in write_metadata()))
    elif cmd == "bundle":
        print("\n".join(str(p) for p in bundle()))
    elif cmd == "push":
        return push(wait=os.environ.get("KAGGLE_PUSH_WAIT", "1") != "0")
    elif cmd == "dataset":
        dest = dataset()
        wheels = list(dest.glob("*.whl"))
        print(f"{dest}: {len(wheels)} wheels, {sum(w.stat().st_size for w in wheels) / 2**20:.0f} MiB for Python "
              f"{KAGGLE_PYTHON}. Upload: kaggle datasets create -p {dest} (later: kaggle datasets version -p {dest} -m ...)")
    elif cmd == "wheelhouse-check":
        from nbutils.kaggle.wheelhouse_check import wheelhouse_check

        for result in wheelhouse_check(twins=os.environ.get("TWINS", "1") != "0"):
            print("[wheelhouse-check] OK " + " ".join(f"{k}={v}" for k, v in result.items()), flush=True)
    elif cmd == "table":
        print(notebooks_table_markdown())
    elif cmd in ("sync", "badges"):  # "badges": the older name
        paths = write_metadata() + sync_notebooks()
        print("\n".join(str(p) for p in paths))
    else:
        print(f"unknown command {cmd!r}: metadata, bundle, push, dataset, wheelhouse-check, table or sync", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
