"""Proof that the nbutils dataset alone is enough: the notebooks' real bootstrap cell, offline, in a venv
holding only torch (the bare minimum) and in a pristine copy of each Kaggle image twin (older packages
preinstalled, numpy 1 or 2), then every module the chain needs imported in a fresh interpreter.

    python -m nbutils.kaggle wheelhouse-check      # what `make kaggle-wheelhouse-check` runs (TWINS=0: torch-only)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from nbutils.runtime import settings
from nbutils.runtime.install import bootstrap_cell_source
from nbutils.runtime.packages import NEEDED

ROOT = Path(__file__).resolve().parents[2]


def _offline_prefix() -> list[str]:
    ok = shutil.which("unshare") and subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0
    return ["unshare", "-n"] if ok else []


def _freeze(py: str) -> set[str]:
    out = subprocess.run([py, "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def check_env(name: str, py: str, work: Path, dataset_dir: Path, strict: bool) -> dict:
    """Run the bootstrap cell with python `py` (Kaggle batch simulated, no network), then import the chain's modules.

    strict: also require a clean `pip check` (the torch-only venv); an image's own conflicts that do not matter to
    the chain are judged by the install step itself, which stops on the ones that do.
    """
    (work / "input").mkdir(parents=True, exist_ok=True)
    (work / "home").mkdir(exist_ok=True)
    link = work / "input" / settings.DATASET_SLUG
    if not link.exists():
        link.symlink_to(dataset_dir.resolve())
    env = {"PATH": f"{Path(py).parent}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}", "HOME": str(work / "home"),
           "KAGGLE_KERNEL_RUN_TYPE": "Batch", "NBUTILS_INPUT_ROOT": str(work / "input"), "PIP_CONFIG_FILE": os.devnull,
           "PIP_NO_CACHE_DIR": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    prefix = _offline_prefix()
    if not prefix:
        env["PIP_NO_INDEX"] = "1"
        print("[wheelhouse-check] `unshare -n` unavailable: relying on --no-index and PIP_NO_INDEX", flush=True)
    before = _freeze(py)
    start = time.monotonic()
    cell = bootstrap_cell_source()  # its last line printed is ensure_packages()' one-line summary
    subprocess.run([*prefix, py, "-c", cell], cwd=work, env=env, check=True)
    install_s = time.monotonic() - start
    modules = ", ".join(sorted({n.module for n in NEEDED.values()} | {"nbutils.runtime.install"}))
    subprocess.run([*prefix, py, "-c", f"import {modules}; import nbutils; print('[wheelhouse-check] {name}: imports OK')"],
                   cwd=work, env=env, check=True)
    if strict:
        subprocess.run([py, "-m", "pip", "check"], cwd=work, env=env, check=True)
    return {"env": name, "installed": len(_freeze(py) - before), "network_namespace": bool(prefix),
            "install_s": round(install_s, 1)}


def wheelhouse_check(dataset_dir: Path = ROOT / "build" / "kaggle-dataset", work: Path = ROOT / "build" / "wheelhouse-check",
                     twins: bool = True) -> list[dict]:
    """The torch-only venv, then each twin's pristine copy; one result per environment (it raises on the first failure)."""
    from nbutils.harness import twin as twin_mod
    from nbutils.runtime.packages import torch_pin

    if work.exists():
        shutil.rmtree(work)
    results = []
    start = time.monotonic()
    venv = work / "torch-only" / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    # Like Kaggle's image: torch is there before the notebook starts (here from the machine's pip config).
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", f"torch=={torch_pin()}"], check=True)
    results.append(check_env("torch-only", str(venv / "bin" / "python"), work / "torch-only", dataset_dir, strict=True))
    shutil.rmtree(venv)  # 1-2 GB; kept only when a step failed, for a look inside
    for t in twin_mod.twins() if twins else []:
        twin_mod.build(t)
        py = twin_mod.pristine_copy(t, work / t.name / "venv")
        results.append(check_env(f"twin {t.name}", str(py), work / t.name, dataset_dir, strict=False))
        shutil.rmtree(work / t.name / "venv")
    wheels = list(dataset_dir.glob("*.whl"))
    results.append({"env": "all", "wheels": len(wheels), "size_mb": round(sum(w.stat().st_size for w in wheels) / 2**20, 1),
                    "total_s": round(time.monotonic() - start, 1)})
    return results
