"""Twins of the Kaggle image: one venv per snapshot in kaggle-image/, a hard-linked copy of it per notebook.

A snapshot (`kaggle-image/<name>.txt`) pins what a Kaggle GPU image preinstalls that matters to the chain;
torch is always this machine's own (requirements.txt's pin). A twin is a venv with the snapshot installed,
cached under NBUTILS_TWIN_CACHE (default ~/.cache/nbutils-twins) in a folder named by a hash of the
snapshot, the torch pin and the Python version, so it is rebuilt only when one of them changes.
Each notebook then runs in a hard-linked copy (pip unlinks a file before writing it, so installing into the
copy never touches the cached twin).

    python -m nbutils.harness.twin build [NAME ...]            # build (or find) the twins; register them as kernels
    python -m nbutils.harness.twin refresh FREEZE NAME         # a real `pip freeze --all` from Kaggle -> kaggle-image/NAME.txt
    python -m nbutils.harness.twin list                        # name, cache folder, built or not
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from nbutils.harness import sandbox
from nbutils.runtime.install_verify import canonical
from nbutils.runtime.packages import is_torch_stack, torch_pin

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOTS = ROOT / "kaggle-image"
KERNEL_PREFIX = "kaggle-"
# What a snapshot keeps from a freeze: the packages the chain imports or that pip moves under it, plus (refresh adds
# them) the requirement closure of the pins. A real image has nltk, rich, pydantic...: a twin without them would
# install two dozen packages that Kaggle's pip never touches.
KEEP = ("accelerate", "beautifulsoup4", "bitsandbytes", "datasets", "fsspec", "huggingface-hub", "ipykernel", "ipython",
        "ipywidgets", "jupyter-client", "matplotlib", "numpy", "pandas", "peft", "protobuf", "pyarrow", "safetensors",
        "scikit-learn", "scipy", "sentence-transformers", "tokenizers", "tqdm", "transformers")


@dataclass(frozen=True)
class Twin:
    name: str
    snapshot: Path
    key: str  # hash of the snapshot, the torch pin and the Python version

    @property
    def folder(self) -> Path:
        return cache_root() / f"{self.name}-{self.key}"

    @property
    def python(self) -> Path:
        return self.folder / "venv" / "bin" / "python"

    @property
    def built(self) -> bool:
        return (self.folder / "built.json").exists()


def cache_root() -> Path:
    return Path(os.environ.get("NBUTILS_TWIN_CACHE") or Path.home() / ".cache" / "nbutils-twins")


def requirements(snapshot: Path) -> list[str]:
    """The pinned lines of a snapshot (comments and blanks dropped); a clear error for anything else."""
    out = []
    for n, line in enumerate(snapshot.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if not re.match(r"^[A-Za-z0-9_.-]+==[A-Za-z0-9_.+!-]+$", line):
            raise ValueError(f"{snapshot}:{n}: {line!r} is not `name==version`: a snapshot pins exact versions")
        if is_torch_stack(line.split("==")[0]):
            raise ValueError(f"{snapshot}:{n}: {line.split('==')[0]} is torch's stack, never pinned in a snapshot "
                             "(the twin uses this machine's torch)")
        out.append(line)
    return out


def twins(names: list[str] | None = None) -> list[Twin]:
    """Every snapshot in kaggle-image/ (or the named ones), with its cache key."""
    paths = sorted(SNAPSHOTS.glob("*.txt"))
    if names:
        known = {p.stem: p for p in paths}
        missing = [n for n in names if n not in known]
        if missing:
            raise KeyError(f"no snapshot {', '.join(missing)} in {SNAPSHOTS}; known: {', '.join(known)}")
        paths = [known[n] for n in names]
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    return [Twin(p.stem, p, hashlib.sha256(p.read_bytes() + f"torch=={torch_pin()} python{version}".encode())
                 .hexdigest()[:12]) for p in paths]


def build(twin: Twin, quiet: bool = True) -> dict:
    """The twin's venv, built once per key (a lock keeps two builds of one twin from racing)."""
    from filelock import FileLock

    cache_root().mkdir(parents=True, exist_ok=True)
    with FileLock(str(twin.folder) + ".lock"):
        if twin.built:
            info = json.loads((twin.folder / "built.json").read_text())
            if "shared_mb" not in info:  # built before files were shared with the project venv
                info["shared_mb"] = _share(twin)
                (twin.folder / "built.json").write_text(json.dumps(info, indent=2))
            return {**info, "cached": True}
        start = time.monotonic()
        # Built in place (a venv's scripts name their folder); built.json, written last, marks it complete.
        shutil.rmtree(twin.folder, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(twin.folder / "venv")], check=True)
        py = str(twin.python)
        # Like the image: the machine's torch, then the snapshot, torch held at its pin.
        (twin.folder / "constraints.txt").write_text(f"torch=={torch_pin()}\n")
        subprocess.run([py, "-m", "pip", "install", *(["-q"] if quiet else []), f"torch=={torch_pin()}",
                        *requirements(twin.snapshot), "-c", str(twin.folder / "constraints.txt")], check=True)
        shared = _share(twin)
        freeze = subprocess.run([py, "-m", "pip", "freeze"], capture_output=True, text=True, check=True).stdout
        (twin.folder / "freeze.txt").write_text(freeze)
        info = {"name": twin.name, "key": twin.key, "seconds": round(time.monotonic() - start, 1), "shared_mb": shared,
                "packages": len(freeze.splitlines()), "built": datetime.datetime.now(datetime.timezone.utc).isoformat()}
        (twin.folder / "built.json").write_text(json.dumps(info, indent=2))
        return {**info, "cached": False}


def _site_packages(prefix: Path) -> Path:
    return prefix / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def _share(twin: Twin) -> int:
    """MiB of the twin's files now hard-linked to this (the project) venv's copies."""
    return round(share_files(_site_packages(twin.folder / "venv"), _site_packages(Path(sys.prefix))) / 2**20)


def share_files(site: Path, other: Path, least: int = 1 << 20) -> int:
    """Hard-link files of `site` (1 MiB or more) that `other` holds byte for byte at the same place; bytes saved.

    torch's shared libraries (about 0.5 GB) were on disk three times: the project venv and each twin install the same
    wheel. Sources and bytecode are never shared: each install stamps its own times on them, which the bytecode checks."""
    import filecmp

    saved = 0
    for path in site.rglob("*"):
        if path.suffix in (".py", ".pyc") or path.is_symlink() or not path.is_file() or path.stat().st_size < least:
            continue
        twin_of = other / path.relative_to(site)
        if not twin_of.is_file() or twin_of.stat().st_size != path.stat().st_size or path.samefile(twin_of) \
                or not filecmp.cmp(path, twin_of, shallow=False):
            continue
        tmp = path.with_name(path.name + ".nbutils-link")
        try:
            os.link(twin_of, tmp)
        except OSError:  # another filesystem (NBUTILS_TWIN_CACHE elsewhere): nothing can be shared
            return saved
        os.replace(tmp, path)  # a rename: the twin never holds a half-written file
        saved += path.stat().st_size
    return saved


def _fix_scripts(venv: Path, old: Path) -> None:
    """Point a copied venv's scripts at its own folder (`!pip` and friends name their interpreter by path)."""
    for path in (venv / "bin").iterdir():
        if path.is_symlink() or not path.is_file() or path.stat().st_size > 64 * 1024:
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        if str(old) in text:
            path.unlink()  # hard-linked to the cached twin: replace, never write through
            path.write_text(text.replace(str(old), str(venv)))
            path.chmod(0o755)


def register(twin: Twin, prefix: Path = Path(sys.prefix)) -> str:
    """Register the twin as a Jupyter kernel `kaggle-<name>` in the project venv (for a look by hand)."""
    name = KERNEL_PREFIX + twin.name
    subprocess.run([str(twin.python), "-m", "ipykernel", "install", "--prefix", str(prefix), "--name", name,
                    "--display-name", f"Kaggle twin {twin.name}"], check=True, capture_output=True)
    return name


def _spare(twin: Twin, near: Path) -> Path:
    """Where the next pristine copy of this twin is made ahead of time (beside the notebooks' sandboxes)."""
    return near / f".spare-{twin.name}-{twin.key}"


# Spare copies being made: folder -> the `cp -al` making it. A copy is 1-2 s of link() calls per notebook; made while
# the previous notebook runs, the next notebook starts without waiting for it.
_MAKING: dict[Path, subprocess.Popen] = {}


def prefetch(twin: Twin, near: Path) -> None:
    """Start making the next pristine copy of the twin under `near`, in the background (pristine_copy takes it).

    `<spare>.ready` is written only after cp succeeded, so a copy cut short (kill -9, full disk) is never handed out."""
    spare = _spare(twin, near)
    if spare in _MAKING or spare.exists():
        return
    near.mkdir(parents=True, exist_ok=True)
    _MAKING[spare] = subprocess.Popen(["sh", "-c", 'cp -al "$0" "$1" && touch "$1.ready"', str(twin.folder / "venv"),
                                       str(spare)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _finished_spare(twin: Twin, near: Path) -> tuple[Path, Path]:
    """(spare, its .ready mark) once the cp making the spare under `near`, if any, has ended."""
    spare = _spare(twin, near)
    proc = _MAKING.pop(spare, None)
    if proc is not None:
        proc.wait()
    return spare, spare.with_name(spare.name + ".ready")


def _take_spare(twin: Twin, dest: Path) -> bool:
    """Move a finished spare copy of the twin to dest (same folder tree, so a rename); False when there is none."""
    spare, ready = _finished_spare(twin, dest.parent.parent)
    if not ready.exists():  # none, or cut short: set aside and deleted in the background
        sandbox.discard(spare)
        return False
    ready.unlink()
    spare.rename(dest)
    return True


def drop_spare(twin: Twin, near: Path) -> None:
    """Delete a spare copy nobody will take (the chain stopped early), once its cp has finished."""
    spare, ready = _finished_spare(twin, near)
    ready.unlink(missing_ok=True)
    sandbox.discard(spare)


def pristine_copy(twin: Twin, dest: Path, spare: bool = False) -> Path:
    """A hard-linked copy of the twin's venv at dest (seconds, almost no disk); its python path.

    spare=True: take the copy `prefetch` made under dest's grandparent when there is one (the harness's sandboxes)."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if not (spare and _take_spare(twin, dest)):
        subprocess.run(["cp", "-al", str(twin.folder / "venv"), str(dest)], check=True)
    _fix_scripts(dest, twin.folder / "venv")  # a spare was made elsewhere: its scripts still name the cached twin
    (twin.folder / "used").touch()  # prune() leaves a build alone while a chain uses it
    return dest / "bin" / "python"


STALE_AFTER_S = 2 * 3600


def prune(twin: Twin) -> list[Path]:
    """Delete the other builds of this snapshot (an older snapshot, torch pin or Python) once unused for two hours.

    Each is about 1.3 GB, and the cache key changes whenever a snapshot does: on a machine that keeps ~/.cache they
    piled up. A build another process holds the lock of (being built) or used lately (a chain in another checkout)
    stays."""
    from filelock import FileLock, Timeout

    gone = []
    for old in cache_root().glob(f"{twin.name}-*"):
        if old == twin.folder or not old.is_dir() or not re.fullmatch(rf"{re.escape(twin.name)}-[0-9a-f]{{12}}", old.name):
            continue
        marks = [m.stat().st_mtime for m in (old / "used", old / "built.json") if m.exists()]
        if marks and time.time() - max(marks) < STALE_AFTER_S:
            continue
        try:
            with FileLock(str(old) + ".lock", timeout=0):
                sandbox.discard(old)
        except Timeout:
            continue
        gone.append(old)
    return gone


def kernelspec(python: Path, folder: Path, name: str = "kaggle-twin") -> tuple[str, Path]:
    """A kernelspec for one copy under folder/kernels/<name>; put folder on JUPYTER_PATH to use it."""
    spec = folder / "kernels" / name
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        # -Xfrozen_modules=off: older ipykernels' debugger warns about frozen modules on every start.
        "argv": [str(python), "-Xfrozen_modules=off", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": name, "language": "python", "metadata": {"debugger": False}}))
    return name, folder


def dataset_dir() -> Path:
    return Path(os.environ.get("NBUTILS_TWIN_DATASET") or ROOT / "build" / "kaggle-dataset")


def prepare(twin: Twin, box, ahead: bool = True, shared=None, key: tuple = ()) -> tuple[str, str, dict]:
    """For one notebook's sandbox: a copy of the twin, its kernelspec, the nbutils dataset attached.

    The copy is pristine, or with `shared` (a shared_install.SharedInstall for the chain) and a notebook whose `key`
    (internet setting, setup cells) is the first notebook's, a copy of that notebook's image right after its install.
    ahead: another notebook follows that needs a pristine copy, so it is made while this one runs.
    Returns (kernel name, python, environment additions) for the harness.
    """
    from nbutils.runtime import settings

    if not twin.built:
        raise RuntimeError(f"the {twin.name} twin is not built: run `make kaggle-twins` (or python -m nbutils.harness.twin build)")
    dataset = dataset_dir()
    if not (dataset / "wheelhouse.json").exists():
        raise RuntimeError(f"no nbutils dataset at {dataset}: run `make kaggle-twin-dataset` first")
    env = {}
    if shared is not None and shared.usable(key):
        python = shared.copy(box.root / "env", _fix_scripts)
    else:
        python = pristine_copy(twin, box.root / "env", spare=True)
        if ahead and shared is not None and not shared.key and len(key) > 1:  # the first notebook with an install
            env = shared.take_snapshot(key, box.root / "env", box.root)  # cell, and one follows it
    if ahead and shared is None:
        prefetch(twin, box.root.parent)  # the next notebook's copy, made while this one runs
    kernel, folder = kernelspec(python, box.root / "jupyter")
    sandbox.mount_readonly(dataset, box, settings.DATASET_SLUG, link=True)
    return kernel, str(python), {"JUPYTER_PATH": str(folder), **env}


def release(box_root: Path) -> None:
    """Drop a finished notebook's copy of the twin (its outputs stay). What pip installed and the bytecode written
    into a copy are its own files, 250-400 MB per notebook: kept, eight notebooks filled a CI machine's disk."""
    sandbox.discard(box_root / "env")


def rerun_install(box_root: Path) -> str:
    """Run the install cell again in a notebook's finished twin copy (offline); its one-line summary.

    A second run in the same session must find everything in place and install nothing.
    """
    from nbutils.harness.sandbox import Sandbox, environment
    from nbutils.runtime.install import bootstrap_cell_source

    box = Sandbox(box_root, box_root / "input", box_root / "working", box_root / "temp", box_root / "events.jsonl")
    python = box_root / "env" / "bin" / "python"
    env = environment(box, internet=False, python=str(python))
    cell = bootstrap_cell_source()  # its last line printed is ensure_packages()' one-line summary
    proc = subprocess.run([str(python), "-c", cell], cwd=box.working, env=env, capture_output=True, text=True)
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    return lines[-1] if lines else f"no output (exit {proc.returncode})"


def refresh(freeze: Path, name: str, dest: Path = SNAPSHOTS) -> Path:
    """kaggle-image/<name>.txt from a real `pip freeze --all` taken on Kaggle (--all lists pip): the KEEP packages, pip
    and everything the pins require (read from this venv's metadata, where `make setup` installed them), pinned; never
    torch's stack."""
    from nbutils.runtime.install_verify import requirement_closure
    from nbutils.runtime.packages import NEEDED

    keep = {canonical(k) for k in KEEP} | {n for n in requirement_closure(NEEDED) if not is_torch_stack(n)}
    # The image's pip runs the install cell: kept (`pip freeze --all` lists it). setuptools stays the venv's, at what
    # this machine's torch requires (torch 2.13 needs setuptools >= 77; a 2025 image had 75); wheel is unused at run time.
    keep = (keep - {"setuptools", "wheel"}) | {"pip"}
    found = {}
    for line in freeze.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)==([^\s;]+)", line.strip())
        if m and canonical(m.group(1)) in keep:
            found[canonical(m.group(1))] = f"{m.group(1)}=={m.group(2)}"
    if "numpy" not in found:
        raise ValueError(f"{freeze}: no numpy==... line; is it the output of `pip freeze` on Kaggle?")
    today = datetime.date.today().isoformat()
    header = (f"# Kaggle GPU image: the preinstalled packages that matter to the QLoRA chain.\n# date: {today}\n"
              f"# source: `pip freeze --all` in a Kaggle session ({freeze.name}), filtered by `make kaggle-image-refresh`\n"
              f"# python: {sys.version_info.major}.{sys.version_info.minor} (the twin's; check the session's)\n")
    path = dest / f"{name}.txt"
    path.write_text(header + "".join(f"{found[k]}\n" for k in sorted(found)))
    return path


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv) or ["list"]
    if args[0] == "build":
        for twin in twins(args[1:] or None):
            info = build(twin, quiet=True)
            kernel = register(twin)
            for old in prune(twin):
                print(f"[twin] {twin.name}: deleted the unused older build {old}", flush=True)
            how = "cached" if info["cached"] else f"built in {info['seconds']} s"
            print(f"[twin] {twin.name}: {how}, "
                  f"{info['packages']} packages, kernel {kernel}, {twin.folder}", flush=True)
    elif args[0] == "refresh" and len(args) == 3:
        print(refresh(Path(args[1]), args[2]))
    elif args[0] == "list":
        for twin in twins():
            print(f"{twin.name}\t{'built' if twin.built else 'not built'}\t{twin.folder}")
    else:
        print("usage: python -m nbutils.harness.twin build [NAME ...] | refresh FREEZE NAME | list", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
