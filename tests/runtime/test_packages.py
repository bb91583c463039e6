"""The package table is the one source of pins, minimums and the torch stack:
requirements.txt agrees with it, install and preflight apply the same rule, and one parser reads versions."""

import importlib.metadata
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from nbutils.runtime import install, packages
from nbutils.runtime.packages import NEEDED, PINS, acceptable, is_torch_stack, version

ROOT = Path(__file__).resolve().parents[2]


def test_requirements_agree_with_the_pins():
    pins = dict(line.split("#")[0].strip().split("==") for line in (ROOT / "requirements.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    for name, pin in PINS.items():
        assert pins.get(name) == pin, f"{name}: requirements.txt {pins.get(name)} vs nbutils.runtime.packages {pin}"


def test_every_pin_meets_its_own_minimum():
    for name, need in NEEDED.items():
        assert version(need.pin) >= version(need.minimum), name
        assert acceptable(name, need.pin), name


def _lower_bound(spec) -> str | None:
    """The least version a requirement's specifier admits, from its >=, >, == and ~= clauses (None: no floor)."""
    floors = [s.version for s in spec if s.operator in (">=", ">", "==", "~=")]
    return max(floors, key=version) if floors else None


def test_every_minimum_meets_what_the_pinned_packages_require():
    """A present package left alone at its minimum must satisfy every pin that needs it: below that, pip (told only
    `name>=minimum`) moves it to the newest release of the day instead of the pin (trl 1.16 needs datasets>=4.7 and
    Colab's 4.0 counted as recent enough). Read from the pins' own metadata, installed in this venv."""
    from packaging.requirements import Requirement

    from nbutils.runtime.packages import NUMPY1_PINS

    for name, need in NEEDED.items():
        assert version(importlib.metadata.version(name)) == version(need.pin), f"{name}: run make setup"
        for text in importlib.metadata.requires(name) or []:
            req = Requirement(text)
            dep = next((n for n in NEEDED if canonicalize_name(n) == canonicalize_name(req.name)), None)
            if dep is None or (req.marker and not req.marker.evaluate({"extra": ""})):
                continue
            floor = _lower_bound(req.specifier)
            assert floor is None or version(NEEDED[dep].minimum) >= version(floor), \
                f"{name} {need.pin} requires {req}: raise {dep}'s minimum ({NEEDED[dep].minimum}) to {floor}"
            if dep in NUMPY1_PINS:  # what a numpy-1 image gets instead of the pin must fit too, and count as enough
                assert req.specifier.contains(NUMPY1_PINS[dep][0]), f"{name} {need.pin} requires {req}"
                assert acceptable(dep, NUMPY1_PINS[dep][0]), f"{dep} {NUMPY1_PINS[dep][0]} is below its minimum"


def test_torch_pin_is_the_torch_this_venv_runs():
    # the wheelhouse is resolved against it and the twins run it (requirements.txt's pin, a CPU build here)
    assert packages.torch_pin() == importlib.metadata.version("torch").split("+")[0]


def test_torch_pin_without_a_pin_is_an_error(tmp_path):
    (tmp_path / "requirements.txt").write_text("transformers==5.23.0\n")
    with pytest.raises(ValueError, match="requirements.txt pins no torch"):
        packages.torch_pin(tmp_path)


def test_torch_and_cuda_are_never_needed_nor_in_the_wheelhouse():
    for name in ("torch", "triton", "nvidia-cublas-cu12", "nvidia_cudnn_cu12", "cuda-bindings", "torchvision", "Torch"):
        assert is_torch_stack(name), name
    for name in (*NEEDED, "torchmetrics", "nvidia", "numpy"):
        assert not is_torch_stack(name), name


def test_version_parser():
    assert version("2.6.0+cu124") == version("2.6.0")
    assert version("4.0.0rc1") == version("4.0") < version("4.0.1")  # a pre-release counts as its release
    assert version("1.10") > version("1.9")  # not a string comparison
    assert version("not a version") == version("0")  # unreadable: treated as too old, so the pin gets installed


@pytest.mark.parametrize(("name", "installed", "ok"), [
    ("transformers", "5.23.0", True), ("transformers", "5.0.0", False), ("transformers", "5.24.0", False),
    ("peft", "0.18.0", True), ("peft", "0.17.1", False), ("datasets", "4.7.0", True), ("datasets", "4.0.0", False),
    ("peft", None, False),
])
def test_install_and_preflight_apply_one_rule(name, installed, ok):
    """What install leaves alone is exactly what preflight accepts (preflight once took transformers >= 5.0)."""
    from nbutils.runtime.preflight import version_problems

    assert acceptable(name, installed) is ok
    assert install.needs_install(name, installed) is not ok
    if installed is not None:
        assert bool(version_problems({name: installed})) is not ok
