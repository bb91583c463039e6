"""A Kaggle background run, simulated locally for one notebook.

- KAGGLE_KERNEL_RUN_TYPE=Batch; input/working/temp roots inside <out>/sandbox/<notebook>/ (through
  the same NBUTILS_*_ROOT variables the path helper reads); cwd is the working dir.
- Every cache and temp dir a kernel or pip could write to points into the sandbox.
- Upstream outputs are copied in as read-only inputs, as Kaggle mounts them under /kaggle/input/<slug>/;
  root ignores chmod, so the harness also fingerprints the input root before and after the run.
- Internet off: hub offline variables, pip without an index, and a sitecustomize on the kernel's
  path that refuses non-loopback connections (also in pip and other child processes) and logs them.
- An IPython startup file records, per cell, shell commands that failed while the cell went on,
  and after install cells, modules whose loaded version differs from the installed one and `pip check`.
Events go to <sandbox>/events.jsonl for the harness to turn into problems.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

SITECUSTOMIZE = r'''
import errno, json, os, socket, sys
_LOG = os.environ.get("NBUTILS_EVENTS")
_argv = getattr(sys, "orig_argv", [])
if _LOG and "pip" in " ".join(_argv[:3]) and "install" in _argv:
    # An install that changed a package folder (sys.path or --target) leaves a flag for the kernel's post-cell
    # hook, which then looks for stale modules and runs `pip check`; "already satisfied" leaves none.
    import atexit
    _t = [_argv[i + 1] for i, a in enumerate(_argv[:-1]) if a in ("-t", "--target")]
    _t += [a.split("=", 1)[1] for a in _argv if a.startswith("--target=")]
    _dirs = [os.path.abspath(d) for d in sys.path[1:] + _t if d and not d.endswith(".zip")]
    def _mtimes():
        return [os.stat(d).st_mtime_ns if os.path.isdir(d) else None for d in _dirs]
    _before = _mtimes()
    def _flag():
        if _mtimes() != _before:
            open(_LOG + ".pip", "a").close()
    atexit.register(_flag)
def _event(**kw):
    if _LOG:
        with open(_LOG, "a") as f:
            f.write(json.dumps(kw) + "\n")
def _local(address):
    host = address[0] if isinstance(address, tuple) else str(address)
    return host in ("localhost", "::1", "") or host.startswith("127.") or host.startswith("/")
if os.environ.get("NBUTILS_NO_INTERNET") == "1":
    _connect, _connect_ex = socket.socket.connect, socket.socket.connect_ex
    def _guard(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not _local(address):
            _event(type="network-access", address=str(address[0] if isinstance(address, tuple) else address),
                   execution_count=int(os.environ.get("NBUTILS_CELL", "0")) or None)
            raise OSError(errno.ENETUNREACH, "internet is off in this run (nbutils harness): " + str(address))
    def connect(self, address):
        _guard(self, address)
        return _connect(self, address)
    def connect_ex(self, address):
        _guard(self, address)
        return _connect_ex(self, address)
    socket.socket.connect, socket.socket.connect_ex = connect, connect_ex
'''

STARTUP = r'''
import importlib, importlib.metadata, json, os, subprocess, sys
_LOG = os.environ.get("NBUTILS_EVENTS")
def _event(**kw):
    with open(_LOG, "a") as f:
        f.write(json.dumps(kw) + "\n")
_ip = get_ipython()
def _pre(info):
    # IPython has already counted this cell when pre_run_cell fires; child processes inherit the value.
    os.environ["NBUTILS_CELL"] = str(_ip.execution_count - 1)
    _ip.user_ns["_exit_code"] = 0
def _loaded_versions():
    out = {}
    for name in importlib.metadata.packages_distributions():
        mod = sys.modules.get(name)
        ver = getattr(mod, "__version__", None) if mod else None
        if isinstance(ver, str):
            out[name] = ver
    return out
def _post(result):
    count = result.execution_count
    code = _ip.user_ns.get("_exit_code", 0)
    if code and result.error_in_exec is None:
        _event(type="shell-error", execution_count=count, exit_code=code)
    if os.path.exists(_LOG + ".pip"):  # a pip install ran during this cell (flag set by sitecustomize)
        os.remove(_LOG + ".pip")
        dist = importlib.metadata.packages_distributions()
        for name, ver in _loaded_versions().items():
            for d in dist.get(name, [])[:1]:
                try:
                    installed = importlib.metadata.version(d)
                except importlib.metadata.PackageNotFoundError:
                    continue
                if installed.split("+")[0] != ver.split("+")[0]:
                    _event(type="stale-module", execution_count=count, module=name, loaded=ver, installed=installed)
        chk = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
        if chk.returncode:
            _event(type="package-conflict", execution_count=count, detail=chk.stdout.strip()[:500])
_ip.events.register("pre_run_cell", _pre)
_ip.events.register("post_run_cell", _post)
'''

CACHE_VARS = ("HOME", "TMPDIR", "HF_HOME", "XDG_CACHE_HOME", "MPLCONFIGDIR", "JUPYTER_RUNTIME_DIR", "TRITON_CACHE_DIR",
              "TORCHINDUCTOR_CACHE_DIR", "PIP_CACHE_DIR", "WANDB_DIR", "KAGGLE_CONFIG_DIR", "NUMBA_CACHE_DIR",
              "CUDA_CACHE_PATH")


@dataclass
class Sandbox:
    root: Path
    input: Path
    working: Path
    temp: Path
    events: Path

    def read_events(self) -> list[dict]:
        if not self.events.exists():
            return []
        return [json.loads(ln) for ln in self.events.read_text().splitlines() if ln.strip()]


def create(out: Path, name: str) -> Sandbox:
    """Fresh sandbox folders for one notebook (anything left from an earlier run is removed)."""
    root = out / "sandbox" / name
    if root.exists():
        make_writable(root)
        shutil.rmtree(root)
    box = Sandbox(root, root / "input", root / "working", root / "temp", root / "events.jsonl")
    for d in (box.input, box.working, box.temp, root / "site", root / "ipython" / "profile_default" / "startup"):
        d.mkdir(parents=True, exist_ok=True)
    (root / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (root / "ipython" / "profile_default" / "startup" / "00-nbutils-harness.py").write_text(STARTUP)
    box.events.touch()
    return box


def environment(box: Sandbox, internet: bool, base: dict | None = None) -> dict:
    """The kernel's environment: Kaggle batch, sandbox roots, caches inside, internet on or off."""
    env = dict(os.environ if base is None else base)
    # Read-only lookups that HOME would otherwise move: kernelspecs/config, and a --user site-packages.
    from jupyter_core.paths import jupyter_config_dir, jupyter_data_dir

    env.setdefault("JUPYTER_DATA_DIR", jupyter_data_dir())
    env.setdefault("JUPYTER_CONFIG_DIR", jupyter_config_dir())
    env.setdefault("PYTHONUSERBASE", site.getuserbase())
    env.update({
        "KAGGLE_KERNEL_RUN_TYPE": "Batch", "NBUTILS_INPUT_ROOT": str(box.input),
        "NBUTILS_WORKING_ROOT": str(box.working), "NBUTILS_TEMP_ROOT": str(box.temp),
        "NBUTILS_EVENTS": str(box.events), "IPYTHONDIR": str(box.root / "ipython"),
        "PYTHONPATH": os.pathsep.join([str(box.root / "site"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "PYTHONDONTWRITEBYTECODE": "1", "MPLBACKEND": "Agg", "HF_HUB_DISABLE_TELEMETRY": "1",
        # `!pip` must be the kernel's pip, as on Kaggle (locally a venv's bin is often not on PATH).
        "PATH": os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")]),
    })
    # HOME too: secrets only from environment variables, as a fresh Kaggle container has no ~/.kaggle,
    # HF login or ~/.netrc; and whatever a library writes under ~ stays in the sandbox.
    for var in CACHE_VARS:
        path = box.temp / var.lower()
        path.mkdir(exist_ok=True)  # tempfile falls back to /tmp when TMPDIR does not exist
        env[var] = str(path)
    if not internet:
        env.update({"NBUTILS_NO_INTERNET": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                    "HF_DATASETS_OFFLINE": "1", "PIP_NO_INDEX": "1"})
    return env


def mount_readonly(src: Path, box: Sandbox, slug: str) -> Path:
    """Copy an upstream notebook's working dir to <input>/<slug>/ read-only, as Kaggle mounts its output."""
    dest = box.input / slug
    shutil.copytree(src, dest, symlinks=True)
    for path in [dest, *dest.rglob("*")]:
        mode = path.stat().st_mode
        path.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    return dest


def make_writable(root: Path) -> None:
    for path in [root, *root.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | stat.S_IWUSR)


def fingerprint(root: Path) -> dict[str, tuple[int, int, int]]:
    """(size, mtime, mode) of everything under root: root writes through chmod, so writes are found after the fact.

    Stat, not a hash, so a multi-GB upstream checkpoint costs nothing to watch.
    """
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        out[str(p.relative_to(root))] = (st.st_size if p.is_file() else 0, st.st_mtime_ns, st.st_mode)
    return out


def changed(before: dict, after: dict) -> list[str]:
    """Paths added, removed or modified between two fingerprints."""
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


def usage(root: Path) -> tuple[int, int]:
    """(bytes, files) under root."""
    files = [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()]
    return sum(p.stat().st_size for p in files), len(files)
