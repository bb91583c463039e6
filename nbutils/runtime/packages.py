"""The package table: what the notebooks need besides torch, at which pin and minimum, what is never installed,
and the one version parser.

install (what to install), preflight (what is recent enough to run), the Kaggle wheelhouse (what to download) and
the twins (which torch) read it here (what the images preinstall: kaggle-image/freezes/, read by the harness' lint);
requirements.txt must agree with the pins (tests/runtime/test_packages.py checks it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

REPO = Path(__file__).resolve().parents[2]  # the source checkout: requirements.txt is read by the tools, not the notebooks


@dataclass(frozen=True)
class Need:
    pin: str  # the version installed when the package is missing or too old
    minimum: str  # a preinstalled version at or above this is left alone (and preflight accepts it)
    module: str  # import name, to spot a package imported before it was upgraded
    exact: bool = False  # only the pinned version will do (APIs that move between minor releases)


# What the notebooks need besides torch. A minimum is at least what the pins require of the package (trl 1.16 needs
# datasets>=4.7.0, accelerate>=1.10.1, pandas>=2.1.1; datasets 5.2 needs pyarrow>=24, tqdm>=4.66.3): one below it
# leaves an image's older release "acceptable", and pip, told only `name>=minimum`, then moves it to the newest
# release of the day instead of the pin (tests/runtime/test_packages.py reads the pins' metadata). transformers is
# exact: 5.x renames APIs between minor releases (the notebooks are written against 5.23), so preflight no longer
# accepts any 5.x: what install leaves is what preflight accepts, one rule (`acceptable`).
NEEDED = {
    "transformers": Need("5.23.0", "5.23.0", "transformers", exact=True),
    "peft": Need("0.21.2", "0.18", "peft"),
    "bitsandbytes": Need("0.50.2", "0.45", "bitsandbytes"),
    "accelerate": Need("1.15.0", "1.10.1", "accelerate"),
    "datasets": Need("5.2.0", "4.7.0", "datasets"),
    "matplotlib": Need("3.11.2", "3.7", "matplotlib"),
    "pandas": Need("3.1.1", "2.1.1", "pandas"),
    "pyarrow": Need("26.0.1", "24.0", "pyarrow"),
    "beautifulsoup4": Need("4.15.0", "4.12", "bs4"),
    "tqdm": Need("4.70.1", "4.66.3", "tqdm"),
    # 7: what tqdm.auto's notebook bars need (tqdm asks ipywidgets>=6). Colab keeps 7.7.1 on purpose: its frontend
    # renders 8.x widgets badly (googlecolab/colabtools#3020), so an upgrade broke the progress bars there.
    "ipywidgets": Need("8.1.9", "7.0", "ipywidgets"),
    "rouge-score": Need("0.1.2", "0.1.2", "rouge_score"),
    "sacrebleu": Need("2.6.0", "2.0", "sacrebleu"),
    "filelock": Need("4.2.11", "3.10", "filelock"),  # the output_dir run lock (nbutils.train.runlock)
    # 05's trainers. Exact: trl moves trainers between releases (ORPO went to trl.experimental in 1.x).
    "trl": Need("1.16.0", "1.16.0", "trl", exact=True),
}
PINS = {name: need.pin for name, need in NEEDED.items()}
# What one step needs and only that step installs (runtime.install.ensure_extra), never the install cell: 04's
# GGUF export (llama.cpp's converter imports sentencepiece; transformers reads GGUF with gguf) and its k-quants
# (cmake builds llama-quantize). The Kaggle wheelhouse carries them, so they install with the internet off.
EXTRA = {
    "gguf": Need("0.19.0", "0.10.0", "gguf"),
    "sentencepiece": Need("0.2.3", "0.1.98", "sentencepiece"),
    "cmake": Need("4.4.5", "3.14", "cmake"),
}
EXTRA_PINS = {name: need.pin for name, need in EXTRA.items()}
# What the chain imports: a pip conflict about one of these (or what they need) matters to the chain.
CHAIN_PACKAGES = (*NEEDED, "nbutils", "torch")
# The versions preflight shows in its table (protobuf: the background-run killer when upgraded after import).
PREFLIGHT_VERSIONS = ("torch", "transformers", "peft", "bitsandbytes", "accelerate", "datasets", "protobuf")
# numpy is held at the image's version: the image's own compiled packages (matplotlib, scipy, scikit-learn,
# opencv, numba ...) are built against it, and moving it would mean moving all of them. On a numpy-1 image
# these pins replace ours: the newest releases that still run on numpy 1 (pyarrow 26 stops at import with
# "pyarrow requires NumPy 2.0 or newer" without declaring it; pandas 3 declares numpy>=2). The wheelhouse
# carries both sets. name -> (pin on numpy 1, cap passed to pip as a constraint).
NUMPY1_PINS = {"pyarrow": ("25.0.1", "<26"), "pandas": ("2.3.3", "<3")}

# The image's own CUDA stack: never installed or upgraded by the notebooks (the platform's torch matches its
# driver), never put in the wheelhouse. A trailing '-' is a name prefix (nvidia-cublas-cu12 ...).
TORCH_STACK = ("torch", "torchvision", "torchaudio", "triton", "nvidia-", "cuda-")


def torch_pin(root: Path = REPO) -> str:
    """The torch version requirements.txt pins: this machine's torch, standing in for the image's own (which
    the notebooks never install). The Kaggle wheelhouse is resolved against it and the twins run it."""
    for line in (root / "requirements.txt").read_text().splitlines():
        if line.startswith("torch=="):
            return line.split("==")[1].split()[0]
    raise ValueError(f"{root / 'requirements.txt'} pins no torch")


def is_torch_stack(name: str) -> bool:
    """Is this distribution torch or part of the CUDA stack that comes with it?"""
    name = canonicalize_name(name)
    return any(name == t or (t.endswith("-") and name.startswith(t)) for t in TORCH_STACK)


def version(text: str) -> Version:
    """The one version parser (PEP 440, `packaging`), release numbers only: '2.6.0+cu124' is 2.6.0 and a
    pre-release counts as its release ('4.0.0rc1' meets a minimum of 4.0, as images ship rc builds).

    Text that is no version at all reads as 0, i.e. too old: install then installs the pin."""
    try:
        return Version(".".join(map(str, Version(text).release)))
    except InvalidVersion:
        return Version("0")


def acceptable(name: str, installed: str | None) -> bool:
    """Does the installed version do? Present, at least the minimum, and the pin itself for exact pins."""
    need = NEEDED[name]
    if installed is None:
        return False
    if need.exact:
        return version(installed) == version(need.pin)
    return version(installed) >= version(need.minimum)
