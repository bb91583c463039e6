"""After pip: what it changed, whether the kernel still holds old builds, whether everything imports, and
pip's dependency conflicts, each as one readable line.

Stdlib only: it runs in the kernel right after an install, on whatever image the notebook landed on.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field

CONFLICT = re.compile(r"^(?P<who>[A-Za-z0-9_.-]+) (?P<ver>\S+) (?:requires|has requirement) (?P<need>.+?)"
                      r"(?:, but you have (?P<have>.+?)(?: which is incompatible)?|, which is not installed)\.?$")
# A fresh interpreter imports each module and prints what it found (run as `python -c`).
PROBE = r'''
import importlib, importlib.metadata, json, os, sys
out = {}
for module, dist in json.loads(sys.argv[1]).items():
    try:
        mod = importlib.import_module(module)
        out[module] = {"ok": True, "version": str(getattr(mod, "__version__", "")), "installed": importlib.metadata.version(dist)}
    except BaseException as e:
        out[module] = {"ok": False, "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]}
print(json.dumps(out), flush=True)
os._exit(0)  # the interpreter's teardown after torch & co: seconds of collecting what is thrown away
'''
# What the last probe found: module -> its result plus "dist" and "at" (the version installed when it ran). The
# harness's post-cell hook reads it in the kernel (nbutils/harness/sandbox.py) and probes only what this one did
# not cover, so one fresh interpreter (tens of seconds: it imports torch, transformers, peft...) serves both.
PROBED: dict[str, dict] = {}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def distribution_versions() -> dict[str, str]:
    """Every installed distribution, canonical name -> version (what pip may change)."""
    return {canonical(d.metadata["Name"]): d.version for d in importlib.metadata.distributions() if d.metadata["Name"]}


def metadata_folders(paths=None) -> tuple[str, ...]:
    """The *.dist-info / *.egg-info folder names on the path: a directory listing, no file opened.

    Cheap enough to take before every notebook cell (the harness's hook does); reading every distribution's
    metadata took ~0.1 s per cell, most of the harness's overhead over plain papermill."""
    names = []
    for folder in (sys.path if paths is None else paths):
        try:
            names += [n for n in os.listdir(folder or ".") if n.endswith((".dist-info", ".egg-info"))]
        except OSError:
            continue
    return tuple(names)


def versions_of_folders(names) -> dict[str, str]:
    """canonical name -> version read from metadata folder names (`name-version.dist-info`); first on the path wins."""
    found: dict[str, str] = {}
    for folder in names:
        name, _, rest = folder.rsplit(".", 1)[0].partition("-")
        found.setdefault(canonical(name), rest.split("-")[0])
    return found


def changed(before: dict[str, str], after: dict[str, str]) -> dict[str, tuple[str | None, str | None]]:
    """name -> (old, new) for distributions pip installed, upgraded, downgraded or removed."""
    return {n: (before.get(n), after.get(n)) for n in sorted(before.keys() | after.keys()) if before.get(n) != after.get(n)}


def modules_of(packages: dict[str, list[str]] | None = None) -> dict[str, list[str]]:
    """Canonical distribution -> its top-level import names. `packages`: importlib.metadata.packages_distributions()
    when the caller already has it (it reads every distribution's file list)."""
    out: dict[str, list[str]] = {}
    for module, dists in (importlib.metadata.packages_distributions() if packages is None else packages).items():
        for d in dists:
            out.setdefault(canonical(d), []).append(module)
    return out


def primary_module(dist: str, tops: dict[str, list[str]]) -> str | None:
    """The import name that stands for a distribution (pyarrow -> pyarrow, scikit-learn -> sklearn)."""
    names = [m for m in tops.get(dist, []) if not m.startswith("_") and m not in ("tests", "test", "docs", "examples")]
    for m in names:
        if canonical(m) == dist or canonical(m) == dist.replace("python-", ""):
            return m
    return names[0] if len(names) == 1 else None


# Loaded by a .pth file as every interpreter starts (setuptools' distutils shim), not by anything the notebook ran:
# when pip moves setuptools, "restart and run the install cell first" would be advice nobody can follow.
AT_STARTUP = frozenset({"_distutils_hack"})


def stale_modules(moved: dict[str, tuple], tops: dict[str, list[str]]) -> dict[str, str]:
    """Loaded top-level module -> distribution, for every module pip replaced under the running kernel."""
    loaded = {name.split(".")[0] for name in list(sys.modules)} - AT_STARTUP
    return {m: d for d, (old, _) in moved.items() if old is not None for m in tops.get(d, []) if m in loaded}


def probe_groups(wanted: dict[str, str]) -> list[dict[str, str]]:
    """`wanted` (module -> distribution) split in two for two fresh interpreters side by side: what needs torch
    (peft, bitsandbytes, accelerate: seconds of torch and compiling its users) and the rest (datasets, pyarrow...).

    Both halves compile what pip just installed (it runs with --no-compile), so on a 2-core image the check
    takes about the longer half instead of the sum; each package is still imported in a fresh interpreter.
    """
    memo: dict[str, list[str]] = {}  # one read of each package's metadata for all the closures below
    heavy = {m: d for m, d in wanted.items() if "torch" in requirement_closure([d], memo)}
    return [g for g in (heavy, {m: d for m, d in wanted.items() if m not in heavy}) if g]


def _run_probe(procs: list, timeout: float = 600) -> dict[str, dict]:
    found = {}
    for proc, group in procs:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:  # a hung import: stop every interpreter of this check, not only this one
            for other, _ in procs:
                other.kill()
                other.communicate()
            raise RuntimeError(f"importing {', '.join(group)} in a fresh interpreter took over {timeout:.0f} s: "
                               "run `import " + ", ".join(group) + "` in a new cell to see where it hangs") from None
        if proc.returncode != 0 or not out.strip():
            tail = (err.strip().splitlines() or ["no output"])[-1]
            found.update({m: {"ok": False, "error": f"the import check itself died: {tail}"} for m in group})
        else:
            found.update(json.loads(out.strip().splitlines()[-1]))
    return found


def probe_imports(dists: list[str], tops: dict[str, list[str]], python: str = sys.executable) -> dict[str, dict]:
    """Import each distribution's module in a fresh interpreter: module -> {ok, version, installed | error}."""
    wanted = {m: d for d in dists if (m := primary_module(d, tops))}
    procs = [(subprocess.Popen([python, "-c", PROBE, json.dumps(group)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True), group) for group in probe_groups(wanted)]
    found = _run_probe(procs)
    for module, res in found.items():
        try:
            at = importlib.metadata.version(wanted[module])
        except importlib.metadata.PackageNotFoundError:
            at = None
        PROBED[module] = {**res, "dist": wanted[module], "at": at}
    return found


@dataclass
class Conflict:
    who: str  # the package whose requirement is broken
    line: str  # pip's line
    matters: bool  # does the chain import `who` (or something that needs it)?

    def __str__(self) -> str:
        why = "matters: the chain uses it" if self.matters else "does not matter to the chain: the notebooks never import it"
        return f"{self.line.rstrip('.')} ({why})"


def _requires(name: str) -> list[str]:
    """A distribution's direct requirements as installed now, extras left out."""
    try:
        reqs = importlib.metadata.requires(name) or []
    except importlib.metadata.PackageNotFoundError:
        return []
    return [canonical(re.split(r"[\s;<>=!~\[(]", r, maxsplit=1)[0]) for r in reqs if "extra ==" not in r]


def requirement_closure(roots, memo: dict[str, list[str]] | None = None) -> set[str]:
    """Canonical names of roots and everything they require (installed metadata, extras left out).

    `memo`: a dict shared by several closures taken at one moment (probe_groups takes one per package); never kept
    across installs, which change what a package requires."""
    memo = {} if memo is None else memo
    seen, todo = set(), [canonical(r) for r in roots]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += memo[name] if name in memo else memo.setdefault(name, _requires(name))
    return seen


def conflicts(pip_output: str, chain_roots) -> list[Conflict]:
    """pip's 'dependency conflicts' lines, each judged against what the chain imports."""
    used = requirement_closure(chain_roots)
    out = []
    for raw in pip_output.splitlines():
        m = CONFLICT.match(raw.strip())
        if m:
            out.append(Conflict(m.group("who"), raw.strip(), canonical(m.group("who")) in used))
    return out


# Each platform's own menu for a fresh interpreter (Colab's "Runtime > Restart session"; Kaggle's Run menu).
RESTART = {"kaggle": "restart the session (Run > Restart)", "colab": "restart the session (Runtime > Restart session)",
           "local": "restart the kernel (Kernel > Restart Kernel)"}



def restart_advice(platform: str) -> str:
    """How to get a fresh interpreter on this platform ("kaggle", "colab", anything else: Jupyter)."""
    return RESTART.get(platform, RESTART["local"])


@dataclass
class Verdict:
    moved: dict[str, tuple] = field(default_factory=dict)
    stale: dict[str, str] = field(default_factory=dict)
    broken: dict[str, str] = field(default_factory=dict)  # module -> error in a fresh process
    mismatched: dict[str, str] = field(default_factory=dict)  # module -> "loaded X, installed Y"
    conflicts: list[Conflict] = field(default_factory=list)

    def errors(self, platform: str = "local") -> list[str]:
        """What leaves the environment broken, each with what to do (the restart named by `platform`'s menu)."""
        restart = restart_advice(platform)
        out = []
        if self.broken:
            out += [f"{m} does not import in a fresh process after the install: {e} -- the install left it broken; "
                    "rebuild the dataset with `make kaggle-dataset` (its pins fit this image's numpy) or report it"
                    for m, e in self.broken.items()]
        if self.mismatched:
            out += [f"{m}: {v} -- two copies are installed; {restart} and run this cell again"
                    for m, v in self.mismatched.items()]
        if self.stale:
            names = ", ".join(f"{m} ({self.moved[d][0]} -> {self.moved[d][1]})" for m, d in sorted(self.stale.items()))
            out.append(f"{names} were loaded before this cell replaced them, so the old builds are still in memory: "
                       f"{restart} and run this cell first; move any cell that imports "
                       "numpy/pandas/transformers (Kaggle's template cell) below it")
        out += [f"pip left a conflict the chain depends on: {c}" for c in self.conflicts if c.matters]
        return out


def verify(before: dict[str, str], pinned: list[str], pip_output: str, chain_roots) -> Verdict:
    """Everything pip changed since `before`, checked in this kernel and in a fresh interpreter."""
    after = distribution_versions()
    verdict = Verdict(changed(before, after))
    tops = modules_of()
    verdict.stale = stale_modules(verdict.moved, tops)
    check = sorted({canonical(p) for p in pinned} | {d for d, (_, new) in verdict.moved.items() if new})
    for module, res in probe_imports(check, tops).items():
        if not res["ok"]:
            verdict.broken[module] = res["error"]
        elif res["version"] and res["version"].split("+")[0] != res["installed"].split("+")[0] and \
                res["version"].lstrip("v")[:1].isdigit():
            verdict.mismatched[module] = f"imports {res['version']} but {res['installed']} is installed"
    verdict.conflicts = conflicts(pip_output, chain_roots)
    return verdict
