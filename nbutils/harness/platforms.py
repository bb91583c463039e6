"""What a notebook finds on Kaggle or Colab: the packages preinstalled, the Python, environment variables, paths.

The lint decides branch conditions and judges installs from these facts. Packages and Python come from the
images' own `pip freeze` (kaggle-image/freezes/<platform>.txt, with their sources; the Kaggle twin snapshot is the
same freeze filtered); the environment variables and paths are written here, each with its source.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from nbutils.runtime.packages import is_torch_stack

FREEZES = Path(__file__).resolve().parents[2] / "kaggle-image" / "freezes"
# Distribution name -> import name where they differ (the rest: '-' becomes '_').
MODULE_OF = {"scikit-learn": "sklearn", "beautifulsoup4": "bs4", "pillow": "PIL", "opencv-python": "cv2",
             "opencv-python-headless": "cv2", "protobuf": "google", "pyyaml": "yaml", "python-dateutil": "dateutil",
             "scikit-image": "skimage", "attrs": "attr", "pyzmq": "zmq", "gitpython": "git", "pyjwt": "jwt"}
# Torch's CUDA stack on a GPU image: what a CPU freeze lacks or lists as a +cpu build (runtime/packages.TORCH_STACK).
GPU_STACK = ("torch", "torchvision", "torchaudio", "triton")


@dataclass(frozen=True)
class Platform:
    name: str  # kaggle | colab
    label: str  # for messages
    python: tuple[int, int]
    packages: dict[str, str]  # canonical distribution name -> version as frozen ("" for a URL install)
    gpu_stack: bool  # the GPU image adds torch's CUDA stack to the freeze
    # Variables set on the run (value None: set, value not known) and why, for messages.
    env: dict[str, str | None] = field(default_factory=dict)
    env_why: dict[str, str] = field(default_factory=dict)
    env_absent: tuple[str, ...] = ()  # no variable name contains one of these
    paths: dict[str, bool] = field(default_factory=dict)  # path -> exists

    def version(self, distribution: str) -> str | None:
        """The preinstalled version ('' when known only by name), None when the image lacks it."""
        name = canonicalize_name(distribution)
        if name in self.packages:
            found = self.packages[name]
            return found.split("+")[0] if self.gpu_stack and name in GPU_STACK else found
        return "" if self.gpu_stack and is_torch_stack(name) else None

    def has_module(self, module: str) -> bool:
        """Is `module` importable on a fresh image (standard library, or from a preinstalled distribution)?"""
        top = module.split(".")[0]
        if top in sys.stdlib_module_names:
            return True
        names = {module, top, *(d for d, m in MODULE_OF.items() if m == top)}
        return any(self.version(n) is not None for n in names)


def module_of(distribution: str) -> str:
    """The import name of a distribution (scikit-learn -> sklearn), best effort."""
    return MODULE_OF.get(distribution, distribution.replace("-", "_").replace(".", "_"))


def read_freeze(path: Path) -> tuple[dict[str, str], tuple[int, int]]:
    """The packages of a `pip freeze` (`name==version`, `name @ url`) and its `# python: X.Y` header line."""
    packages, python = {}, None
    for n, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if m := re.match(r"^#\s*python:\s*(\d+)\.(\d+)", line):
            python = (int(m.group(1)), int(m.group(2)))
        elif line and not line.startswith("#"):
            m = re.match(r"^([A-Za-z0-9][A-Za-z0-9_.-]*)\s*(?:==\s*([^\s;]+)|@\s*\S+)", line)
            if not m:
                raise ValueError(f"{path}:{n}: {line!r} is neither `name==version` nor `name @ url`")
            packages[canonicalize_name(m.group(1))] = m.group(2) or ""
    if python is None:
        raise ValueError(f"{path}: no `# python: X.Y` line in the header")
    return packages, python


@cache
def platform(name: str) -> Platform:
    """The facts of one platform (kaggle: a background run; colab: an interactive session)."""
    if name not in FACTS:
        raise KeyError(f"no platform {name!r}; known: {', '.join(FACTS)}")
    packages, python = read_freeze(FREEZES / f"{name}.txt")
    return Platform(name=name, python=python, packages=packages, **FACTS[name])


def admits(spec_text: str, version: str) -> bool | None:
    """Does a requirement's specifier (`>=0.34,<2`) admit the version? None when either cannot be read."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        return SpecifierSet(spec_text).contains(Version(version.split("+")[0]), prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return None


# Kaggle/docker-python's Dockerfile.tmpl builds FROM Colab's runtime image; Kaggle/kagglehub#230 (2025-02) stopped
# reading COLAB_RELEASE_TAG as Colab because the Kaggle image sets it; unslothai/unsloth#3869 (2026-01) saw Kaggle
# sessions with both KAGGLE_* and COLAB_* keys.
COLAB_BASE = "Kaggle's image is built on Colab's and sets COLAB_RELEASE_TAG (Kaggle/kagglehub#230)"
# Both run notebooks as root with HOME=/root (pip warns "Running pip as the 'root' user" in both logs; the Hub's
# cache is /root/.cache/huggingface there), so a path under /root exists on either.
FACTS = {
    "kaggle": {
        "label": "Kaggle", "gpu_stack": True,
        "env": {"KAGGLE_KERNEL_RUN_TYPE": "Batch", "KAGGLE_URL_BASE": None, "KAGGLE_DATA_PROXY_TOKEN": None,
                "COLAB_RELEASE_TAG": None},
        "env_why": {"KAGGLE_KERNEL_RUN_TYPE": "a background run sets KAGGLE_KERNEL_RUN_TYPE=Batch",
                    "KAGGLE_URL_BASE": "Kaggle's kernels set KAGGLE_URL_BASE",
                    "KAGGLE_DATA_PROXY_TOKEN": "Kaggle's kernels set KAGGLE_DATA_PROXY_TOKEN",
                    "COLAB_RELEASE_TAG": COLAB_BASE},
        "paths": {"/kaggle": True, "/kaggle/input": True, "/kaggle/working": True, "/kaggle/temp": True, "/root": True},
    },
    "colab": {
        "label": "Colab", "gpu_stack": True,
        "env": {"COLAB_RELEASE_TAG": None, "COLAB_GPU": None, "COLAB_BACKEND_VERSION": None},
        "env_why": {v: f"Colab's runtime sets {v}" for v in ("COLAB_RELEASE_TAG", "COLAB_GPU", "COLAB_BACKEND_VERSION")},
        "env_absent": ("KAGGLE_",),
        "paths": {"/content": True, "/kaggle": False, "/kaggle/input": False, "/kaggle/working": False, "/root": True},
    },
}
