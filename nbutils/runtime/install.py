"""The notebooks' install step: install only what the platform lacks, pinned, and never torch.

Kaggle and Colab images ship torch (built for their CUDA) and often older transformers/datasets;
bitsandbytes and peft are usually absent. Upgrading a package after it was imported leaves the old
one loaded (the classic background-run killer), so this runs in the first code cell, before anything
heavy is imported. The decision is a pure function (`plan_install`), tested per platform without pip;
`run_install` executes a plan and checks the versions afterwards.

The notebook cell is `bootstrap_cell_source()`: it installs nbutils itself (it cannot import nbutils
before nbutils is there), then calls `ensure_packages()`.
"""

from __future__ import annotations

import glob
import importlib
import importlib.metadata
import json
import os
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import Requirement

from nbutils.runtime import settings
from nbutils.runtime.packages import CHAIN_PACKAGES, EXTRA, NEEDED, NUMPY1_PINS, PINS, acceptable, is_torch_stack, version

WHEELHOUSE_MANIFEST = "wheelhouse.json"


@dataclass
class InstallPlan:
    platform: str
    source: str  # "none" | "wheelhouse" | "index"
    packages: list[str] = field(default_factory=list)  # pip specs: "peft==0.21.2", "nbutils @ git+..."
    pip_args: list[str] = field(default_factory=list)  # e.g. ["--no-index", "--find-links", DIR]
    constraints: dict[str, str] = field(default_factory=dict)  # name -> specifier: "==2.6.0" holds torch/numpy
    notes: list[str] = field(default_factory=list)
    summary: str = ""  # one line, set by run_install; what the cell shows last
    # Present packages handed to pip as `name>=minimum`: satisfied, so left alone, unless a pin's dependencies
    # need them moved (transformers 5.23 needs huggingface-hub 2, which datasets 4.8 refuses: pip then moves datasets).
    keep: list[str] = field(default_factory=list)

    def __repr__(self) -> str:
        return self.summary or f"install plan: {len(self.packages)} package(s) from {self.source}"

    def command(self, constraints_file: str | None = None) -> list[str]:
        """The pip command line (without the interpreter) this plan runs."""
        extra = ["-c", constraints_file] if constraints_file else []
        # --no-compile: a session imports a few hundred of the thousands of modules it installs; compiling
        # them all up front took most of the install's time. -q: pip's ~130 "Processing"/"Requirement already
        # satisfied" lines filled the notebook; warnings, errors and the dependency-conflict block still print.
        return ["-m", "pip", "install", "-q", "--progress-bar", "off", "--no-compile", *self.pip_args, *extra, *self.packages,
                *self.keep]


def needs_install(name: str, installed: str | None) -> bool:
    """Missing, below the minimum, or (for exact pins) not the pinned version: packages.acceptable says no."""
    return not acceptable(name, installed)


def nbutils_git_spec() -> str:
    """nbutils from GitHub at the notebooks' own version (settings.ref: the tag the install cell is built with)."""
    return f"nbutils @ git+https://github.com/{settings.repository()}@{settings.ref()}"


def plan_install(platform_name: str, has_internet: bool, dataset_dir: str | os.PathLike | None,
                 installed: dict[str, str | None]) -> InstallPlan:
    """What to install and from where; raises with what to do when it cannot be installed at all.

    Local: nothing (`make setup` installed the pinned environment). Kaggle: from the attached
    dataset's wheelhouse with --no-index when it is there (works with the internet off), else from
    PyPI. Colab: from PyPI, nbutils from GitHub at the notebooks' version tag. Never torch; torch is held at its installed version.
    """
    plan = InstallPlan(platform_name, "none")
    if platform_name == "local":
        plan.notes.append("local run: `make setup` installed the pinned environment")
        return plan
    numpy1 = version(installed.get("numpy") or "2").major < 2
    pins = {**PINS, **({n: pin for n, (pin, _) in NUMPY1_PINS.items()} if numpy1 else {})}
    need = [n for n in NEEDED if not is_torch_stack(n) and needs_install(n, installed.get(n))]
    for name in need:
        have = installed.get(name)
        plan.notes.append(f"{name}: {'missing' if have is None else have} -> {pins[name]}")
    specs = [f"{n}=={pins[n]}" for n in need]
    if not installed.get("nbutils"):
        specs.insert(0, "nbutils" if dataset_dir is not None else nbutils_git_spec())
    if not specs:
        plan.notes.append("every package is present and recent enough")
        return plan
    plan.packages = specs
    plan.keep = [f"{n}>={NEEDED[n].minimum}" for n in NEEDED if n not in need and not is_torch_stack(n)]
    for held in ("torch", "numpy"):
        if installed.get(held):
            plan.constraints[held] = f"=={installed[held]}"
    if numpy1:
        plan.constraints.update({n: cap for n, (_, cap) in NUMPY1_PINS.items()})
        plan.notes.append(f"numpy {installed['numpy']} held (the image's compiled packages need numpy 1); "
                          + ", ".join(f"{n}{cap}" for n, (_, cap) in NUMPY1_PINS.items()) + " (later releases need numpy 2)")
    if dataset_dir is not None:
        plan.source = "wheelhouse"
        plan.pip_args = ["--no-index", "--find-links", str(dataset_dir)]
        plan.notes.append(f"installing from the attached dataset {dataset_dir} with --no-index (no internet needed)")
    elif has_internet:
        plan.source = "index"
        plan.notes.append("installing from PyPI")
    else:
        where = {"kaggle": f"attach the '{settings.DATASET_SLUG}' dataset (Add Input > Datasets) or turn "
                           "Internet on (Settings > Internet)",
                 "colab": "check the runtime's internet connection"}.get(platform_name, "connect to the internet")
        raise RuntimeError(f"Need {', '.join(specs)} but there is no internet and no wheelhouse: {where}, "
                           "then run this cell again.")
    return plan


def installed_versions(names=(*NEEDED, "nbutils", "torch", "numpy")) -> dict[str, str | None]:
    """Installed distribution versions (None when absent), read from package metadata without importing."""
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def find_dataset(input_root: str | os.PathLike) -> Path | None:
    """The attached nbutils dataset (a folder holding nbutils-*.whl) under the input root, a few levels deep."""
    for depth in ("*", "*/*", "*/*/*"):
        wheels = sorted(glob.glob(os.path.join(str(input_root), depth, "nbutils-*.whl")))
        if wheels:
            return Path(wheels[-1]).parent
    return None


def has_internet(host: str = "pypi.org") -> bool:
    """DNS only (no connection is opened): an offline Kaggle kernel cannot resolve names. The harness's internet-off
    guard fails the lookup the same way and knows this probe, so its "no" is no network-access finding."""
    try:
        socket.getaddrinfo(host, 443)
        return True
    except OSError:
        return False


class PipFailed(RuntimeError):
    """pip itself failed (nothing was verified): the one failure ensure_packages may retry from PyPI."""


def _failure_hint(plan: InstallPlan, output: str) -> str:
    """What to do after pip failed: a full disk is said as such (it is not the dataset's fault), else the dataset hint."""
    if "No space left on device" in output or "[Errno 28]" in output:
        import shutil
        import sysconfig

        # Either can be the full one: pip unpacks under the temp folder, then writes into site-packages.
        free = ", ".join(f"{shutil.disk_usage(d).free / 2**30:.1f} GB free at {d}"
                         for d in (sysconfig.get_paths()["purelib"], tempfile.gettempdir()))
        return (f" The disk is full ({free}): delete what you do not need (old checkpoints, ~/.cache) or restart "
                "the session, then run this cell again.")
    return _wheelhouse_hint(plan)


def _wheelhouse_hint(plan: InstallPlan) -> str:
    if plan.source != "wheelhouse":
        return ""
    folder = Path(plan.pip_args[-1])
    try:
        built_for = json.loads((folder / WHEELHOUSE_MANIFEST).read_text()).get("python_version", "?")
    except (OSError, ValueError):
        built_for = "?"
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    return (f" The attached dataset {folder} may be older than these pins, or built for another Python "
            f"(built for {built_for}, this kernel runs {here}): rebuild it with `make kaggle-dataset` "
            f"(KAGGLE_PYTHON={here} if they differ) and upload a new version, or turn Internet on and detach it.")


def _run_pip(plan: InstallPlan) -> tuple[int, str]:
    """Run pip for the plan, quietly; its output is returned for the conflict check and for the error on failure."""
    with tempfile.TemporaryDirectory() as tmp:
        constraints = None
        if plan.constraints:
            constraints = os.path.join(tmp, "constraints.txt")
            Path(constraints).write_text("".join(f"{n}{spec}\n" for n, spec in plan.constraints.items()))
        cmd = [sys.executable, *plan.command(constraints)]
        held = f", holding {', '.join(f'{n}{v}' for n, v in plan.constraints.items())}" if constraints else ""
        print(f"[install] pip installs {len(plan.packages)} package(s) and their dependencies{held}: "
              "this takes a minute or two", flush=True)
        # Kaggle runs notebooks as root: pip's warning about that says nothing a notebook user can act on.
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, "PIP_ROOT_USER_ACTION": "ignore"})
        return proc.returncode, proc.stdout or ""


def _pip_messages(output: str) -> list[str]:
    """pip's quiet output less its dependency-conflict block, which run_install reprints judged (install_verify)."""
    from nbutils.runtime.install_verify import CONFLICT

    return [line for line in output.splitlines() if line.strip() and not CONFLICT.match(line.strip())
            and "dependency resolver does not currently take into account" not in line]


def run_install(plan: InstallPlan) -> None:
    """Run pip for the plan, then check what it left: pins, stale modules, fresh imports, conflicts."""
    from nbutils.runtime import install_verify

    if not plan.packages:  # one line: the notes only say why there is nothing to do
        plan.summary = f"[install] nothing to install: {plan.notes[-1] if plan.notes else plan.platform}"
        print(plan.summary, flush=True)
        return
    for note in plan.notes:
        print(f"[install] {note}")
    requirements = [Requirement(p) for p in plan.packages]  # "peft==0.21.2", "nbutils", "nbutils @ git+..."
    assert not any(is_torch_stack(r.name) for r in requirements), "never install torch here"
    before = install_verify.distribution_versions()
    returncode, output = _run_pip(plan)
    if returncode != 0:
        tail = "\n".join(output.strip().splitlines()[-30:]) or "(no output)"
        raise PipFailed(f"pip failed (exit {returncode}) installing {', '.join(plan.packages)}." + _failure_hint(plan, output)
                           + f"\npip's last lines:\n{tail}")
    for line in _pip_messages(output):  # warnings pip printed even when quiet
        print(f"[install] pip: {line.strip()}", flush=True)
    importlib.invalidate_caches()  # packages new to this process become importable in this kernel
    pinned = {r.name: s.version for r in requirements for s in r.specifier if s.operator == "=="}
    after = installed_versions(pinned)
    wrong = [f"{n}=={v} (found {after[n]})" for n, v in pinned.items()
             if after[n] is None or version(after[n]) != version(v)]
    if wrong:
        raise RuntimeError("Installed versions differ from the pins: " + ", ".join(wrong) +
                           f"; {install_verify.restart_advice(plan.platform)} and run this cell first, "
                           "before any other import.")
    verdict = install_verify.verify(before, list(pinned), output, CHAIN_PACKAGES)
    for conflict in verdict.conflicts:
        print(f"[install] conflict: {conflict}", flush=True)
    errors = verdict.errors(plan.platform)
    if errors:
        raise RuntimeError("The install left this environment broken:\n- " + "\n- ".join(errors))
    moved = len(verdict.moved) - len(pinned)
    harmless = sum(not c.matters for c in verdict.conflicts)
    held = ", ".join(f"{n}{v}" for n, v in plan.constraints.items() if v.startswith("=="))
    plan.summary = (f"[install] verified: {len(pinned)} pinned package(s) from "
                    f"{'the attached dataset (offline)' if plan.source == 'wheelhouse' else 'PyPI'}"
                    + (f", {moved} more moved by pip" if moved > 0 else "") + (f"; held {held}" if held else "")
                    + (f"; {harmless} conflict(s) that do not matter to the chain" if harmless else "")
                    + "; every changed package imports in a fresh process")
    print(plan.summary, flush=True)


def dataset_nbutils(dataset: Path) -> str | None:
    """The version of the nbutils wheel in an attached dataset (None when it holds none)."""
    from packaging.utils import parse_wheel_filename

    wheels = sorted(dataset.glob("nbutils-*.whl"))
    return str(parse_wheel_filename(wheels[-1].name)[1]) if wheels else None


def ensure_packages() -> None:
    """The install cell's second half: decide for this platform, install, verify; the last line printed says what
    happened (returns nothing, so the cell ends on that line rather than on a repr).

    An attached dataset is used first (it works offline); with the internet on, PyPI takes over when the dataset was
    built from another nbutils than this notebook's, or when pip cannot install the pins from it (an older dataset).
    """
    from nbutils.runtime.environment import detect_platform

    platform = detect_platform()
    installed = installed_versions()
    dataset = find_dataset(platform.input_root) if platform.name == "kaggle" else None
    missing = any(needs_install(n, installed.get(n)) for n in NEEDED)
    built = dataset_nbutils(dataset) if dataset is not None else None
    other = bool(built and installed.get("nbutils") and version(built) != version(installed["nbutils"]))
    # Asked only when the answer changes the plan: a current dataset installs offline without a DNS lookup.
    online = has_internet() if platform.name != "local" and missing and (dataset is None or other) else False
    if online and other:
        print(f"[install] the attached dataset {dataset} was built from nbutils {built}, this notebook runs "
              f"{installed['nbutils']}: installing from PyPI instead (the internet is on); to run offline, rebuild it "
              "with `make kaggle-dataset` and upload a new version", flush=True)
        dataset = None
    plan = plan_install(platform.name, online, dataset, installed)
    try:
        run_install(plan)
    except PipFailed as err:
        if plan.source != "wheelhouse" or not (online or has_internet()):  # asked once at most
            raise
        print(f"[install] the attached dataset {dataset} could not install the pins ({str(err).splitlines()[0]}): "
              "installing from PyPI instead (the internet is on); to run offline, rebuild it with `make kaggle-dataset` "
              "and upload a new version", flush=True)
        run_install(plan_install(platform.name, True, None, installed_versions()))


def ensure_extra(names: tuple[str, ...]) -> str:
    """Install packages only one step needs (packages.EXTRA: GGUF's converter, k-quants) when they are missing:
    pinned, from the attached Kaggle dataset when there is one (offline), else from PyPI. Safe mid-notebook:
    nothing has imported them yet. Returns one line saying what it did."""
    from nbutils.runtime.environment import detect_platform

    have = installed_versions(names)
    missing = [n for n in names if have[n] is None or version(have[n]) < version(EXTRA[n].minimum)]
    if not missing:
        return f"[install] {', '.join(names)}: present"
    platform = detect_platform()
    dataset = find_dataset(platform.input_root) if platform.name == "kaggle" else None
    source = ["--no-index", "--find-links", str(dataset)] if dataset else []
    specs = [f"{n}=={EXTRA[n].pin}" for n in missing]
    pip = [sys.executable, "-m", "pip", "install", "-q", "--progress-bar", "off"]
    proc = subprocess.run([*pip, *source, *specs], capture_output=True, text=True)
    if proc.returncode and dataset and has_internet():  # a dataset older than these pins: PyPI has them
        print(f"[install] the attached dataset {dataset} lacks {', '.join(specs)}: installing from PyPI instead "
              "(the internet is on); to run offline, rebuild it with `make kaggle-dataset`", flush=True)
        dataset = None
        proc = subprocess.run([*pip, *specs], capture_output=True, text=True)
    if proc.returncode:
        tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-3:])
        raise RuntimeError(f"pip could not install {', '.join(specs)} ({'from the attached dataset' if dataset else 'from PyPI'}): "
                           f"{tail}. Attach the nbutils dataset or turn the internet on.")
    importlib.invalidate_caches()
    line = f"[install] {', '.join(specs)} from {'the attached dataset (offline)' if dataset else 'PyPI'}"
    print(line, flush=True)
    return line


# pyproject.toml's requires-python (a test holds them equal): the pins (transformers 5.23, trl 1.16, pandas 3 ...) need
# it, and pip would otherwise refuse nbutils itself with a message that names no way out.
MIN_PYTHON = (3, 11)
PYTHON_ADVICE = (f"the notebooks need {MIN_PYTHON[0]}.{MIN_PYTHON[1]}+: on Kaggle, Settings > Environment > Always use "
                 "latest environment, then run this cell again")
# What the install cell says first when it found no wheel and GitHub did not resolve: Kaggle with the internet off.
OFFLINE_ADVICE = (f"no internet and no {settings.DATASET_SLUG} dataset: Add Input > Datasets > {settings.DATASET_SLUG}, "
                  "or Settings > Internet on (a phone-verified Kaggle account), then run this cell again. ")

# The install cell folds to its title line in Colab (a form) and in Kaggle and JupyterLab (input hidden): a learner
# meets one line saying what it does; the code is one click away.
BOOTSTRAP_CELL_METADATA = {"cellView": "form", "jupyter": {"source_hidden": True}, "_kg_hide-input": True}


def bootstrap_cell_source() -> str:
    """The notebooks' install cell: nbutils from the attached Kaggle dataset's wheel when it is the notebooks' version,
    else GitHub at settings.ref() (both written in when the notebooks are synced), else, offline, the dataset's wheel
    of another version; then the rest.

    nbutils cannot install itself before it is importable, so these few lines do only that; locally
    (make setup) nbutils is already installed and they skip straight to `ensure_packages()`. They also name
    `packaging`, the one package the install step imports beyond the stdlib: every Kaggle and Colab image has it
    (pip leaves it alone), a bare image with only torch does not (`make kaggle-wheelhouse-check` starts from one).
    """
    return f'''# @title Install nbutils (this notebook's version: dataset wheel, else GitHub), then what the image lacks; never torch
import glob, importlib.util, os, subprocess, sys

if sys.version_info < {MIN_PYTHON}:  # the pinned packages need it
    raise RuntimeError(f"this kernel runs Python {{sys.version_info[0]}}.{{sys.version_info[1]}}; {PYTHON_ADVICE}")
if importlib.util.find_spec("nbutils") is None:  # locally `make setup` installed it
    root = os.environ.get("NBUTILS_INPUT_ROOT", "/kaggle/input")
    wheels = sorted(w for d in ("*", "*/*", "*/*/*") for w in glob.glob(f"{{root}}/{{d}}/nbutils-*.whl"))
    own = [w for w in wheels if os.path.basename(w).startswith("nbutils-{settings.package_version()}-")]
    # This notebook's nbutils from the dataset, else from GitHub, else (internet off) the dataset's other version
    for spec in [*own[-1:], "{nbutils_git_spec()}", *[w for w in wheels[-1:] if not own]]:
        wheel = ["--no-index", "-f", os.path.dirname(spec)] if spec.endswith(".whl") else []  # packaging sits beside it
        pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", *wheel, spec, "packaging"],
                             capture_output=True, text=True)
        if pip.returncode == 0:
            break
    else:  # pip's own output does not reach every notebook UI: it goes into the error
        hint = "" if wheels or "resolve host" not in pip.stderr else "{OFFLINE_ADVICE}"
        raise RuntimeError(f"{{hint}}pip could not install nbutils ({{spec}}):\\n{{pip.stdout[-3000:]}}{{pip.stderr[-3000:]}}")
from nbutils.runtime.install import ensure_packages
ensure_packages()  # installs only what is missing or too old, pinned; never torch
'''

