"""A Kaggle background run, simulated locally for one notebook.

- KAGGLE_KERNEL_RUN_TYPE=Batch; input/working/temp roots inside <out>/sandbox/<notebook>/ (through
  the same NBUTILS_*_ROOT variables the path helper reads); cwd is the working dir.
- Every cache and temp dir a kernel or pip could write to points into the sandbox.
- Upstream outputs are copied in as read-only inputs, as Kaggle mounts them under /kaggle/input/<slug>/;
  root ignores chmod, so the harness also fingerprints the input root before and after the run.
- Internet off, as Kaggle turns it off: no offline variables (Kaggle sets no HF_HUB_OFFLINE or PIP_NO_INDEX, so the
  libraries take the paths they take there), and a sitecustomize on the kernel's path that fails name lookups
  (socket.getaddrinfo) as an offline kernel's DNS does and refuses non-loopback connections, logging each, in the
  kernel and in the Python processes it starts (pip, `!python ...`). The suite's own connectivity probes
  (`_PROBES` below) ask on purpose and take "no" as the offline answer: they are refused without a log. Tools that
  are not Python (`!curl`, `!wget`, `!git clone`, bash's /dev/tcp) do not load it and are not stopped: the runner
  reports them from the source before an internet-off run (nbchecks.offline_problems).
- An IPython startup file records, per cell, shell commands that failed while the cell went on, and
  after a cell that ran pip: loaded modules whose distribution pip replaced (stale-module), changed
  distributions that no longer import in a fresh interpreter (broken-import), and `pip check`'s
  conflicts one per line, marked as mattering when the chain's packages or a loaded module need them.
- At the kernel's exit, files left open for writing are flushed and the interpreter's final garbage collection
  is skipped (gc.freeze): seconds of CPU per kernel once torch is loaded, and nothing a run could see.
Events go to <sandbox>/events.jsonl for the harness to turn into problems.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import stat
import subprocess
import sys
import time
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
# Code that asks whether the network is there and takes "no" as the offline answer (module, function): a refusal
# inside one is that answer, not an attempt to report. install.has_internet picks the install's offline branch,
# export.hub.reachable skips the push, hubdata.unreachable says why a hub dataset cannot be read; pip's check for a
# newer pip of itself fails silently.
_PROBES = {("nbutils.runtime.install", "has_internet"), ("nbutils.export.hub", "reachable"),
           ("nbutils.data.hubdata", "unreachable")}
_PROBE_MODULES = ("pip._internal.self_outdated_check",)
def _probing():
    f = sys._getframe(1)
    while f is not None:
        module = f.f_globals.get("__name__") or ""
        if (module, f.f_code.co_name) in _PROBES or module.startswith(_PROBE_MODULES):
            return True
        f = f.f_back
    return False
def _refuse(host, error):
    if not _probing():
        _event(type="network-access", address=str(host), execution_count=int(os.environ.get("NBUTILS_CELL", "0")) or None)
    raise error
def _resolved_here(host):
    # What an offline kernel still resolves: no name (a bind), loopback names, numeric addresses (no lookup), its own name.
    if host is None or host in ("", "localhost", "ip6-localhost", "ip6-loopback", socket.gethostname()):
        return True
    if host.endswith(".localhost"):
        return True
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host.split("%")[0])
            return True
        except (OSError, ValueError):
            pass
    return False
if os.environ.get("NBUTILS_NO_INTERNET") == "1":
    _connect, _connect_ex, _getaddrinfo = socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo
    def _guard(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not _local(address):
            _refuse(address[0] if isinstance(address, tuple) else address,
                    OSError(errno.ENETUNREACH, "internet is off in this run (nbutils harness): " + str(address)))
    def getaddrinfo(host, *args, **kwargs):
        name = host.decode() if isinstance(host, bytes) else host
        if not _resolved_here(name):  # Kaggle's offline kernels fail here: "[Errno -3] Temporary failure in name resolution"
            _refuse(name, socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution (internet is off "
                                                              "in this run, nbutils harness): " + str(name)))
        return _getaddrinfo(host, *args, **kwargs)
    socket.getaddrinfo = getaddrinfo
    def connect(self, address):
        _guard(self, address)
        return _connect(self, address)
    def connect_ex(self, address):
        _guard(self, address)
        return _connect_ex(self, address)
    socket.socket.connect, socket.socket.connect_ex = connect, connect_ex
'''

VERIFY_SOURCE = Path(__file__).resolve().parents[1] / "runtime" / "install_verify.py"
STARTUP = r'''
import hashlib, importlib.metadata, importlib.util, json, os, subprocess, sys, warnings
_LOG = os.environ.get("NBUTILS_EVENTS")
_CHAIN = [n for n in os.environ.get("NBUTILS_CHAIN_PACKAGES", "").split(",") if n]
def _event(**kw):
    with open(_LOG, "a") as f:
        f.write(json.dumps(kw) + "\n")
_ip = get_ipython()
def _load_verify():
    # The install step's own stdlib-only module, loaded by path under a private name: one copy of its rules (names,
    # what pip changed, stale modules, the import probe, requirement closure); nbutils stays unimportable from the checkout.
    spec = importlib.util.spec_from_file_location("_nbutils_install_verify", @VERIFY@)
    mod = sys.modules["_nbutils_install_verify"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
_verify = _load_verify()
_before = []
def _probed():
    # The install step's own fresh-interpreter import check (nbutils.runtime.install_verify.PROBED), if it ran here.
    return getattr(sys.modules.get("nbutils.runtime.install_verify"), "PROBED", {})
def _pre(info):
    # IPython has already counted this cell when pre_run_cell fires; child processes inherit the value.
    os.environ["NBUTILS_CELL"] = str(_ip.execution_count - 1)
    _ip.user_ns["_exit_code"] = 0
    _probed().clear()  # only this cell's findings stand in for the hook's own check
    _before[:] = _verify.metadata_folders()  # a listing: reading every metadata file cost ~0.1 s per cell
def _after_pip(count):
    # pip check runs beside the stale and import checks below (it only reads metadata): one core each.
    chk = subprocess.Popen([sys.executable, "-m", "pip", "check"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    after = _verify.distribution_versions()  # metadata versions: what the install step's findings were taken at
    moved = _verify.changed(_verify.versions_of_folders(_before), _verify.versions_of_folders(_verify.metadata_folders()))
    pkgs = importlib.metadata.packages_distributions()  # once: it reads every distribution's file list
    tops = _verify.modules_of(pkgs)
    loaded = {m.split(".")[0] for m in list(sys.modules)}
    # Loaded before this cell, replaced on disk during it.
    stale = {m: (moved[d][0], moved[d][1] or "removed") for m, d in _verify.stale_modules(moved, tops).items()}
    for module in loaded - set(stale):  # also a module whose own __version__ disagrees with what is installed now
        with warnings.catch_warnings():  # some packages deprecate reading __version__
            warnings.simplefilter("ignore")
            ver = getattr(sys.modules.get(module), "__version__", None)
        for d in pkgs.get(module, [])[:1] if isinstance(ver, str) else []:
            try:
                installed = importlib.metadata.version(d)
            except importlib.metadata.PackageNotFoundError:
                continue
            if installed.split("+")[0] != ver.split("+")[0]:
                stale[module] = (ver, installed)
    for module, (old, new) in sorted(stale.items()):
        _event(type="stale-module", execution_count=count, module=module, loaded=old, installed=new)
    probe = {m: d for d, (_, new) in moved.items() if new and (m := _verify.primary_module(d, tops))}
    # The install step (nbutils.runtime.install_verify) already imported these in a fresh interpreter during this
    # cell: its findings stand for the modules whose installed version has not moved since; the rest are probed here.
    dist_of = dict(probe)
    done = {m: r for m, r in _probed().items() if m in probe and r.get("dist") == probe[m] and r.get("at") == after.get(probe[m])}
    bad = {m: r["error"] for m, r in done.items() if not r["ok"]}
    probe = {m: d for m, d in probe.items() if m not in done}
    if probe:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # the kernel's own path
        res = subprocess.run([sys.executable, "-c", _verify.PROBE, json.dumps(probe)], capture_output=True, text=True,
                             env=env)
        lines = res.stdout.strip().splitlines()
        bad.update({m: r["error"] for m, r in (json.loads(lines[-1]) if lines else {}).items() if not r["ok"]})
    for module, error in sorted(bad.items()):
        _event(type="broken-import", execution_count=count, module=module, package=dist_of[module], error=error)
    out = chk.communicate()[0]
    if chk.returncode:
        used = _verify.requirement_closure(_CHAIN + [d for m in loaded for d in pkgs.get(m, [])])
        for line in out.strip().splitlines():
            who = _verify.canonical(line.split(" ", 1)[0])
            _event(type="package-conflict", execution_count=count, detail=line.strip(), matters=who in used)
_SNAP = os.environ.get("NBUTILS_INSTALL_SNAPSHOT", "")
def _snapshot(result):
    # A twin's first notebook: right after its install cell succeeded, this copy of the image as hard links, where
    # the chain's later notebooks start (nbutils/harness/shared_install.py).
    global _SNAP
    want, _, dest = _SNAP.partition(":")
    info = getattr(result, "info", None)
    if not dest or not result.success or info is None or hashlib.sha256(info.raw_cell.encode()).hexdigest() != want:
        return
    _SNAP = ""
    if subprocess.run(["cp", "-al", sys.prefix, dest + ".partial"]).returncode == 0:
        os.rename(dest + ".partial", dest)
def _post(result):
    count = result.execution_count
    code = _ip.user_ns.get("_exit_code", 0)
    if code and result.error_in_exec is None:
        _event(type="shell-error", execution_count=count, exit_code=code)
    if os.path.exists(_LOG + ".pip"):  # a pip install ran during this cell (flag set by sitecustomize)
        os.remove(_LOG + ".pip")
        _after_pip(count)
    _snapshot(result)
_ip.events.register("pre_run_cell", _pre)
_ip.events.register("post_run_cell", _post)
def _quick_exit():
    # CPython ends a process by collecting everything still in a reference cycle: with torch, transformers and peft
    # loaded, half a million objects, about 1.5 s of CPU per kernel, most of its shutdown. What that collection
    # would do that a run can see, flushing files a notebook left open for writing, is done here; then it is skipped.
    import gc, io
    for obj in gc.get_objects():
        try:
            if isinstance(obj, io.IOBase) and not obj.closed and obj.writable():
                obj.flush()
        except Exception:
            pass
    gc.freeze()
import atexit
atexit.register(_quick_exit)  # registered first, run last: after every exit hook the notebook's packages added
'''

# What an internet-off run must not carry: Kaggle sets none of them, and each makes a library skip the request (and
# the failure handling) a Kaggle run goes through.
OFFLINE_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "PIP_NO_INDEX")
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


def discard(path: Path) -> None:
    """Rename a folder aside at once (a hidden `.NAME.<ns>.old` beside it) and delete it in the background: a twin's
    copy is tens of thousands of links, seconds of unlink() calls nobody needs to wait for."""
    if path.exists():
        trash = path.with_name(f".{path.name.lstrip('.')}.{time.time_ns()}.old")
        path.rename(trash)
        subprocess.Popen(["rm", "-rf", str(trash)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)


def create(out: Path, name: str) -> Sandbox:
    """Fresh sandbox folders for one notebook (anything left from an earlier run is removed)."""
    root = out / "sandbox" / name
    if root.exists():
        make_writable(root)
        if (root / "env").exists():  # a twin's copy: tens of thousands of links, deleted in the background
            discard(root)
        else:
            shutil.rmtree(root)
    box = Sandbox(root, root / "input", root / "working", root / "temp", root / "events.jsonl")
    for d in (box.input, box.working, box.temp, root / "site", root / "ipython" / "profile_default" / "startup"):
        d.mkdir(parents=True, exist_ok=True)
    (root / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    verify = shutil.copy(VERIFY_SOURCE, root / "ipython" / "nbutils_install_verify.py")  # a copy: the checkout stays out
    (root / "ipython" / "profile_default" / "startup" / "00-nbutils-harness.py").write_text(
        STARTUP.replace("@VERIFY@", repr(str(verify))))
    box.events.touch()
    return box


def environment(box: Sandbox, internet: bool, base: dict | None = None, python: str | None = None,
                chain_packages: tuple[str, ...] = ()) -> dict:
    """The kernel's environment: Kaggle batch, sandbox roots, caches inside, internet on or off.

    `python`: the kernel's interpreter (a twin's copy), whose bin/ comes first on PATH so `!pip` is its pip.
    """
    env = dict(os.environ if base is None else base)
    # Read-only lookups that HOME would otherwise move: kernelspecs/config, and a --user site-packages.
    from jupyter_core.paths import jupyter_config_dir, jupyter_data_dir

    env.setdefault("JUPYTER_DATA_DIR", jupyter_data_dir())
    env.setdefault("JUPYTER_CONFIG_DIR", jupyter_config_dir())
    env.setdefault("PYTHONUSERBASE", site.getuserbase())
    env.update({
        # Kaggle's image is built on Colab's and sets COLAB_RELEASE_TAG too (Kaggle/kagglehub#230): a notebook that
        # branches on COLAB_ takes here the branch it takes on Kaggle.
        "KAGGLE_KERNEL_RUN_TYPE": "Batch", "COLAB_RELEASE_TAG": env.get("COLAB_RELEASE_TAG") or "kaggle-image",
        "NBUTILS_INPUT_ROOT": str(box.input),
        "NBUTILS_WORKING_ROOT": str(box.working), "NBUTILS_TEMP_ROOT": str(box.temp),
        "NBUTILS_EVENTS": str(box.events), "IPYTHONDIR": str(box.root / "ipython"),
        "PYTHONPATH": os.pathsep.join([str(box.root / "site"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "PYTHONDONTWRITEBYTECODE": "1", "MPLBACKEND": "Agg", "HF_HUB_DISABLE_TELEMETRY": "1",
        # `!pip` must be the kernel's pip, as on Kaggle (locally a venv's bin is often not on PATH).
        "PATH": os.pathsep.join([os.path.dirname(python or sys.executable), env.get("PATH", "")]),
        "NBUTILS_CHAIN_PACKAGES": ",".join(chain_packages),
    })
    if python:  # a twin: nothing from the checkout, the project venv or this machine's pip setup
        env["PYTHONPATH"] = str(box.root / "site")
        # Bytecode is written as on Kaggle: the install (pip --no-compile) leaves none, and without it every fresh
        # interpreter (the install's import check, the kernel) compiled transformers, datasets... from source again.
        # It lands in the copy's own folders (cp -al copies folders; a .pyc is replaced by rename, never written
        # through a hard link), so the cached twin stays pristine.
        env.pop("PYTHONDONTWRITEBYTECODE")
        env["PIP_CONFIG_FILE"] = os.devnull
        for var in ("VIRTUAL_ENV", "PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_INDEX_URL"):
            env.pop(var, None)
    # HOME too: secrets only from environment variables, as a fresh Kaggle container has no ~/.kaggle,
    # HF login or ~/.netrc; and whatever a library writes under ~ stays in the sandbox.
    for var in CACHE_VARS:
        path = box.temp / var.lower()
        path.mkdir(exist_ok=True)  # tempfile falls back to /tmp when TMPDIR does not exist
        env[var] = str(path)
    if not internet:
        # The guard alone (SITECUSTOMIZE): a failing pip reaches for the index and prints what it prints on Kaggle.
        env["NBUTILS_NO_INTERNET"] = "1"
        for var in OFFLINE_VARS:  # nor from the caller's shell
            env.pop(var, None)
    return env


def mount_readonly(src: Path, box: Sandbox, slug: str, link: bool = False) -> Path:
    """Copy an upstream notebook's working dir to <input>/<slug>/ read-only, as Kaggle mounts its output.

    link=True hard-links the files instead (a large dataset such as the wheelhouse; its files turn read-only).
    """
    dest = box.input / slug
    shutil.copytree(src, dest, symlinks=True, copy_function=os.link if link else shutil.copy2)
    for path in [dest, *dest.rglob("*")]:
        mode = path.stat().st_mode
        path.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    return dest


def make_writable(root: Path) -> None:
    """Folders writable again, so what is inside can be removed. Files keep their mode: removing one needs no write
    bit on it, and a hard-linked input's mode is its inode's, shared with every other link (another run's input
    among them, whose fingerprint would then say it was written)."""
    for path in [root, *root.rglob("*")]:
        if path.is_dir() and not path.is_symlink():
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
