"""The notebooks' install step: install only what the platform lacks, pinned, and never torch.

Kaggle and Colab images ship torch, and usually older transformers/peft/bitsandbytes. Upgrading a
package after it was imported leaves the old one loaded (the classic background-run killer), so
this runs in the first cell, before anything heavy is imported. Decisions are a pure function
(`plan_install`) so they can be tested per platform without running pip.
"""

from __future__ import annotations

import importlib.metadata
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

# The one list of runtime pins (requirements.txt must agree; a test checks it). torch is absent on purpose.
PINS = {
    "transformers": "5.23.0", "peft": "0.21.2", "bitsandbytes": "0.50.2", "accelerate": "1.15.0",
    "datasets": "5.2.0", "matplotlib": "3.11.2", "pandas": "3.1.1", "pyarrow": "26.0.1",
    "beautifulsoup4": "4.15.0", "tqdm": "4.70.1", "ipywidgets": "8.1.9",
}
# Oldest version the notebooks work with: a preinstalled package at or above it is left alone.
MINIMUM = {"transformers": "5.0", "peft": "0.18", "bitsandbytes": "0.45", "accelerate": "1.0", "datasets": "4.0",
           "matplotlib": "3.7", "pandas": "2.0", "pyarrow": "14.0", "beautifulsoup4": "4.12", "tqdm": "4.66",
           "ipywidgets": "8.0"}
NEVER = {"torch", "torchvision", "torchaudio"}
DATASET_SLUG = "qlora-nbutils"  # the Kaggle dataset holding the nbutils wheel and the offline wheelhouse


@dataclass
class InstallPlan:
    platform: str
    source: str  # "none" | "wheelhouse" | "index"
    packages: list[str] = field(default_factory=list)  # pinned specs, e.g. "peft==0.21.2"
    pip_args: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _version(v: str) -> tuple[int, ...]:
    out = []
    for part in v.split("+")[0].split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)


def installed_versions(names=PINS) -> dict[str, str | None]:
    out = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def plan_install(platform: str, has_internet: bool, wheelhouse: Path | None, installed: dict) -> InstallPlan:
    """What to install and from where. Local: nothing (make setup did it). Kaggle/Colab: what is missing or too old."""
    plan = InstallPlan(platform, "none")
    if platform == "local":
        plan.notes.append("local run: `make setup` installs the pinned environment; nothing to do")
        return plan
    need = [n for n in PINS if n not in NEVER and
            (installed.get(n) is None or _version(installed[n]) < _version(MINIMUM[n]))]
    if not need:
        plan.notes.append("every package is present and recent enough")
        return plan
    plan.packages = [f"{n}=={PINS[n]}" for n in need]
    if wheelhouse is not None:
        plan.source = "wheelhouse"
        plan.pip_args = ["--no-index", "--find-links", str(wheelhouse)]
        plan.notes.append(f"installing from the attached dataset {wheelhouse} (works with the internet off)")
    elif has_internet:
        plan.source = "index"
        plan.notes.append("installing from PyPI")
    else:
        raise RuntimeError(
            f"Missing or too old: {', '.join(need)}, and there is no internet and no wheelhouse. On Kaggle: "
            f"attach the '{DATASET_SLUG}' dataset (Add Input) or turn Internet on in the notebook settings."
        )
    return plan


def find_wheelhouse(input_root: Path) -> Path | None:
    """The attached dataset's wheels folder, if a dataset with our wheelhouse is mounted."""
    for path in sorted(input_root.glob("*/wheels")) + sorted(input_root.glob("*/*/wheels")):
        if any(path.glob("*.whl")):
            return path
    return None


def has_internet(host: str = "pypi.org") -> bool:
    """DNS only: resolving a name opens no connection, so an offline harness run is not tripped by it."""
    try:
        socket.getaddrinfo(host, 443)
        return True
    except OSError:
        return False


def run_install(plan: InstallPlan) -> None:
    """Run pip for the plan (output shown, never captured), then verify every pin took."""
    for note in plan.notes:
        print(f"[install] {note}")
    if not plan.packages:
        return
    cmd = [sys.executable, "-m", "pip", "install", "-q", *plan.pip_args, *plan.packages]
    print("[install] " + " ".join(cmd[1:]))
    subprocess.run(cmd, check=True)
    after = installed_versions([p.split("==")[0] for p in plan.packages])
    wrong = [f"{spec} (found {after[spec.split('==')[0]]})" for spec in plan.packages
             if after[spec.split("==")[0]] != spec.split("==")[1]]
    if wrong:
        raise RuntimeError("Installed versions differ from the pins: " + ", ".join(wrong) +
                           ". Restart the session and run the install cell first, before any import.")
    print("[install] verified: " + ", ".join(plan.packages))


def ensure_packages() -> InstallPlan:
    """The install cell's second half: decide for this platform, install, verify."""
    from nbutils.environment import detect_platform

    platform = detect_platform()
    installed = installed_versions()
    wheelhouse = find_wheelhouse(platform.input_root) if platform.name == "kaggle" else None
    needs_network = platform.name != "local" and wheelhouse is None and any(
        v is None or _version(v) < _version(MINIMUM[n]) for n, v in installed.items())
    plan = plan_install(platform.name, has_internet() if needs_network else False, wheelhouse, installed)
    run_install(plan)
    return plan


if __name__ == "__main__":
    ensure_packages()
    sys.exit(0)
