"""The nbutils dataset for Kaggle: the nbutils wheel, an offline wheelhouse of every pinned package, and llama.cpp's
converter and sources (nbutils.runtime.llamacpp: from the pinned llama-cpp-python sdist) for 04's GGUF.

    python -m nbutils.kaggle dataset                        # build/kaggle-dataset/ (the twins' Python), flat
    KAGGLE_PYTHON=3.12 python -m nbutils.kaggle dataset     # build/kaggle-dataset-py3.12/: the upload for Kaggle's image
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from packaging.utils import canonicalize_name

from nbutils import embedded
from nbutils.runtime import llamacpp, settings
from nbutils.runtime.install import WHEELHOUSE_MANIFEST
from nbutils.runtime.packages import EXTRA_PINS, NUMPY1_PINS, PINS, is_torch_stack, torch_pin

ROOT = Path(__file__).resolve().parents[2]


METADATA_FILE = "dataset-metadata.json"


def _dump(obj: dict) -> str:
    return json.dumps(obj, indent=2) + "\n"


# The Python the wheelhouse is built for. TWIN_PYTHON by default: this machine's twins and `make kaggle-wheelhouse-check`
# run 3.11 and install the wheelhouse with --no-index, and one built for another Python has none of the compiled
# wheels they need (numpy, pandas, pyarrow ...). Kaggle's image runs image_python() (its freeze's header): the
# dataset to upload is built with KAGGLE_PYTHON set to that, and `python -m nbutils.kaggle dataset` says so.
TWIN_PYTHON = "3.11"  # mk/kaggle.mk's TWIN_PYTHON (a test holds them equal)
KAGGLE_PYTHON = os.environ.get("KAGGLE_PYTHON", TWIN_PYTHON)


def default_dest(python_version: str = KAGGLE_PYTHON) -> Path:
    """One folder per Python: build/kaggle-dataset/ for the twins' (what they attach: harness.twin.dataset_dir), else
    build/kaggle-dataset-py<version>/, so `make papermill-check` rebuilding the twins' never replaces an upload."""
    return ROOT / "build" / ("kaggle-dataset" if python_version == TWIN_PYTHON else f"kaggle-dataset-py{python_version}")


def image_python() -> str:
    """The Python of Kaggle's image, read from kaggle-image/freezes/kaggle.txt (the one source the lint reads too)."""
    from nbutils.harness.platforms import platform

    return ".".join(map(str, platform("kaggle").python))
# Kaggle's image is Ubuntu 22.04 (glibc 2.35): every manylinux tag up to 2_35 runs there
# (pip does not expand manylinux_2_X to older tags by itself, so they are listed).
PLATFORMS = tuple(f"{tag}_x86_64" for tag in ("manylinux2014", "manylinux_2_17", "manylinux_2_24", "manylinux_2_27",
                                               "manylinux_2_28", "manylinux_2_31", "manylinux_2_34", "manylinux_2_35"))


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
    torch = torch or torch_pin()
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "-qq",
                        "--report", str(report), *_target(python_version), *extra_args, *specs, f"torch=={torch}"],
                       check=True)
        items = json.loads(report.read_text())["install"]
    return {item["metadata"]["name"]: item["metadata"]["version"] for item in items
            if not is_torch_stack(item["metadata"]["name"])}


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
                       f"may need, for Kaggle's Python, without torch; and {llamacpp.ARCHIVE}, llama.cpp's GGUF "
                       f"converter, gguf-py and sources (MIT, from llama-cpp-python {llamacpp.VERSION} on PyPI). "
                       f"Source: https://github.com/{settings.repository()}",
        # The wheels keep their own licenses (MIT, BSD, Apache-2.0 ...): "other" is the honest group.
        "licenses": [{"name": "other"}],
    }


def _wheelhouse_current(dest: Path, specs: list[str], python_version: str) -> bool:
    try:
        manifest = json.loads((dest / WHEELHOUSE_MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return (manifest.get("requested") == specs and manifest.get("python_version") == python_version
            and "numpy1_closure" in manifest and manifest.get("torch_assumed") == torch_pin()
            and {(canonicalize_name(n), v) for n, v in manifest["closure"].items()} <= _wheels_in(dest))


def _wheels_in(folder: Path) -> set[tuple[str, str]]:
    from packaging.utils import parse_wheel_filename

    return {(canonicalize_name(str(name)), str(version)) for name, version, *_ in map(parse_wheel_filename,
                                                                              (w.name for w in folder.glob("*.whl")))}


def dataset(dest: Path | None = None, python_version: str = KAGGLE_PYTHON) -> Path:
    """default_dest(): dataset-metadata.json, the nbutils wheel, the offline wheelhouse and llama.cpp's archive.

    Flat because `kaggle datasets create` skips sub-folders by default (llama.cpp's files travel as one archive). The
    wheelhouse is every package in nbutils.runtime.packages.NEEDED and EXTRA at its pin plus its full dependency
    closure for Kaggle's Python, never torch.
    """
    dest = Path(dest) if dest is not None else default_dest(python_version)
    pins = {**PINS, **EXTRA_PINS}
    specs = [f"{name}=={version}" for name, version in pins.items()]
    _share_wheelhouse(dest, specs, python_version)
    if _wheelhouse_current(dest, specs, python_version):  # same pins: only nbutils itself changed
        if not (dest / llamacpp.ARCHIVE).exists():
            llamacpp.pack(dest)
        with tempfile.TemporaryDirectory(dir=dest) as tmp:
            fresh = _build_nbutils_wheel(Path(tmp))
            for old in dest.glob("nbutils-*.whl"):
                if old.name != fresh.name:
                    old.unlink()
            os.replace(fresh, dest / fresh.name)  # atomic: a run reading the dataset never finds it without a wheel
        _write_metadata(dest)
        return dest
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    wheel = _build_nbutils_wheel(dest)
    links = tuple(build_sdist_wheels(dest))  # rouge-score ships no wheel: built here, found through --find-links
    closure = resolve_closure(specs, python_version, extra_args=links)
    # A numpy-1 image gets the releases that still run there (packages.NUMPY1_PINS), numpy held below 2.
    numpy1 = [f"{n}=={NUMPY1_PINS[n][0] if n in NUMPY1_PINS else v}" for n, v in pins.items()] + ["numpy<2"]
    closure1 = resolve_closure(numpy1, python_version, extra_args=links)
    for wanted in (closure, {n: v for n, v in closure1.items() if closure.get(n) != v}):  # one version per call
        subprocess.run([sys.executable, "-m", "pip", "download", "-qq", "--no-deps", *_target(python_version), *links,
                        "-d", str(dest), *(f"{n}=={v}" for n, v in wanted.items())], check=True)
    have = {canonicalize_name(w.name.split("-")[0]) for w in dest.glob("*.whl")}
    missing = [n for n in closure if canonicalize_name(n) not in have]
    if missing:
        raise RuntimeError(f"pip download left out {missing}")
    stray = [w.name for w in dest.glob("*.whl") if is_torch_stack(w.name.split("-")[0])]
    if stray:
        raise RuntimeError(f"torch/CUDA wheels in the wheelhouse: {stray}")
    (dest / WHEELHOUSE_MANIFEST).write_text(_dump({
        "python_version": python_version, "platforms": list(PLATFORMS), "torch_assumed": torch_pin(),
        "nbutils": wheel.name, "requested": specs, "closure": dict(sorted(closure.items())),
        "numpy1_requested": numpy1, "numpy1_closure": dict(sorted(closure1.items())),
    }))
    llamacpp.pack(dest)
    _share_wheelhouse(dest, specs, python_version)
    _write_metadata(dest)
    return dest


def _write_metadata(dest: Path) -> None:
    """dataset-metadata.json for today's owner, written on every build: a wheelhouse kept from an earlier build (or
    taken from the cache) must not carry the owner of that build (`your-kaggle-username` before KAGGLE_USERNAME)."""
    (dest / METADATA_FILE).write_text(_dump(dataset_metadata()))


def _built_for(folder: Path) -> str | None:
    """The Python a dataset folder's wheelhouse was built for (None: no wheelhouse there)."""
    try:
        manifest = json.loads((folder / WHEELHOUSE_MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return manifest.get("python_version") if isinstance(manifest, dict) else None


def _share_wheelhouse(dest: Path, specs: list[str], python_version: str) -> None:
    """One download per set of pins on a machine: a checkout without a current wheelhouse takes the one in the suite's
    cache (a fresh clone, as CI makes), and a current one fills the cache when it holds none for these pins. A dest
    built for another Python is refused, never replaced: it may be the upload for Kaggle's image."""
    built = _built_for(dest)
    if built and built != python_version:
        raise RuntimeError(f"{dest} holds the nbutils dataset for Python {built}, and this build is for {python_version}: "
                           f"it is left as it is. Builds for {built} go to {default_dest(built)} (move it there, or "
                           "delete it), or pass a folder of its own for this one; then build again.")
    # One cache per Python: a build for Kaggle's Python (the upload) must not replace the one this machine's twins
    # install. The single folder of earlier versions is still read.
    cached = embedded.cache_root() / f"kaggle-wheelhouse-py{python_version}"
    source = next((c for c in (cached, cached.with_name("kaggle-wheelhouse"))
                   if _wheelhouse_current(c, specs, python_version)), None)
    here = _wheelhouse_current(dest, specs, python_version)
    if source is not None and not here:
        _copy_wheelhouse(source, dest)
    elif here and source != cached:
        _copy_wheelhouse(dest, cached)


def _copy_wheelhouse(src: Path, dest: Path) -> None:
    """The wheelhouse in src (all but the nbutils wheel and the metadata) to dest, through a temporary folder renamed into place: a
    copy cut short is never taken for a whole one. Hard links where both are on one filesystem (the files are
    only ever replaced, never written in place)."""
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)

    def link_or_copy(a, b):
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)

    # The nbutils wheel and the metadata belong to one checkout and one owner, never to the shared wheelhouse.
    shutil.copytree(src, tmp, copy_function=link_or_copy, ignore=shutil.ignore_patterns("nbutils-*.whl", ".*", METADATA_FILE))
    if dest.exists():
        shutil.rmtree(dest)
    os.replace(tmp, dest)
