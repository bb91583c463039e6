"""papermill-check: run notebooks the way a Kaggle background run does, and stricter (the command line: cli.py).

Each notebook runs in a fresh kernel inside a sandbox (sandbox.py), the internet as its kernel metadata says unless
the caller turns it off (`check` does, with a time budget: chainrun.py); the static checks (nbchecks.py) run first;
`run_twins` runs them again in each Kaggle image twin (twin.py).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from unittest import mock

from nbutils import chain
from nbutils.harness import sandbox
from nbutils.harness.nbchecks import apply_allowances, check_notebook, offline_problems
from nbutils.harness.problems import Problem
from nbutils.harness.results import Result
from nbutils.harness.shared_install import SharedInstall, setup_cells
from nbutils.runtime.packages import CHAIN_PACKAGES
from nbutils.runtime.secrets import SECRET_SHAPES

ROOT = Path(__file__).resolve().parents[2]
FATAL_SIGNATURES = re.compile(r"Traceback \(most recent call last\)|GetPrototype|CUDA out of memory|"
                              r"Segmentation fault|core dumped|Killed\b")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
OUTPUT_LIMIT_BYTES, OUTPUT_LIMIT_FILES = 20 * 2**30, 500  # Kaggle's /kaggle/working limits
# The kernel's own log is noise in a harness run ("running over TCP without encryption"; at shutdown jupyter_client
# interrupts the kernel first, and ipykernel logs "KeyboardInterrupt caught in kernel" as an ERROR). Findings come
# from the outputs and the sandbox's events, never from this log, so only critical lines show.
KERNEL_ARGS = ["--IPKernelApp.log_level=CRITICAL"]


def kernel_metadata(root: Path = ROOT) -> dict[str, dict]:
    """kernel-metadata.json of our notebooks keyed by notebook stem (empty when none are shipped)."""
    out = {}
    for path in sorted((root / "kaggle-metadata").glob("*/kernel-metadata.json")):
        meta = json.loads(path.read_text())
        out[Path(meta.get("code_file", "")).stem] = meta
    return out


PAPERMILL_TAGS = {"injected-parameters", "papermill-error-cell-tag"}


def _original_index(executed_cells, index: int | None) -> int | None:
    """Index in the notebook as written of executed cell `index` (papermill inserts parameter/error cells)."""
    if index is None or index >= len(executed_cells):
        return None
    if PAPERMILL_TAGS & set(executed_cells[index].get("metadata", {}).get("tags", [])):
        return None
    return sum(1 for c in executed_cells[:index] if not PAPERMILL_TAGS & set(c.get("metadata", {}).get("tags", [])))


def _error_index(cells) -> int | None:
    """Index of the first cell that raised (an error output, or papermill's exception flag)."""
    for i, c in enumerate(cells):
        if any(o.get("output_type") == "error" for o in c.get("outputs", [])) or \
                c.get("metadata", {}).get("papermill", {}).get("exception"):
            return i
    return None


def _failing_line(source: str, traceback: list[str]) -> str:
    text = ANSI.sub("", "\n".join(traceback))
    m = re.search(r"Cell In\[\d+\], line (\d+)", text)
    lines = source.splitlines()
    if m and 0 < int(m.group(1)) <= len(lines):
        return lines[int(m.group(1)) - 1].strip()
    arrows = re.findall(r"^-+> ?\d*\s*(.*)$", text, re.M)
    return arrows[0].strip() if arrows else (lines[-1].strip() if lines else "")


def _interrupted_index(executed_path: Path) -> int | None:
    """Executed-notebook index of the cell papermill was running when execution stopped (timeout, dead kernel)."""
    import nbformat

    if not executed_path.exists():
        return None
    cells = nbformat.read(executed_path, as_version=4).cells
    started = [i for i, c in enumerate(cells)
               if c.cell_type == "code" and c.get("metadata", {}).get("papermill", {}).get("start_time")]
    return started[-1] if started else None


def _output_text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out.get("text", ""))
        elif out.get("output_type") in ("execute_result", "display_data"):
            parts.append(str(out.get("data", {}).get("text/plain", "")))
        elif out.get("output_type") == "error":
            parts.append("\n".join(out.get("traceback", [])))
    return ANSI.sub("", "".join(parts))


def _secret_values() -> list[str]:
    """Values of environment variables named like secrets (Kaggle and Colab hand secrets over this way)."""
    return [v for k, v in os.environ.items() if re.search(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL", k.upper())
            and len(v) >= 8 and not v.startswith(("/", "."))]  # a path to a key file is not the key


# Sandbox event type -> (what happened, the fix), for the checks the kernel-side hooks record.
EVENT_PROBLEMS = {
    "network-access": (lambda ev: f"tried to connect to {ev['address']} with the internet off",
                       "ship the file as an input (dataset/model) or enable internet in kernel-metadata"),
    "shell-error": (lambda ev: f"a shell command exited {ev['exit_code']} but the cell carried on",
                    "check the command's output; use subprocess.run(..., check=True)"),
    "stale-module": (lambda ev: f"{ev['module']} {ev['loaded']} is loaded but {ev['installed']} is installed",
                     "install before any import (first cell) or restart the kernel after installing"),
    "package-conflict": (lambda ev: f"pip check: {ev['detail'].splitlines()[0]}" + (
                             "" if ev.get("matters", True) else " (does not matter to the chain: nothing it imports "
                                                                "needs that package; kept in the report)"),
                         "pin compatible versions in the install cell"),
    "broken-import": (lambda ev: f"{ev['package']} no longer imports in a fresh interpreter after this cell's install: "
                                 f"{ev['error']}",
                      "pin versions that fit the image (its numpy above all: see NUMPY1_PINS in nbutils.runtime.packages)"),
}


def runtime_checks(name: str, original, executed, box: sandbox.Sandbox, failed: int | None) -> list[Problem]:
    """Problems visible only after a run: outputs, sandbox events, the working dir."""
    problems = []
    by_count = {c.get("execution_count"): i for i, c in enumerate(executed.cells) if c.get("cell_type") == "code"}

    def index_of(count):
        return _original_index(executed.cells, by_count.get(count))

    seen = []  # pip retries a refused lookup: one problem per host and cell
    for ev in box.read_events():
        if ev["type"] in EVENT_PROBLEMS and ev not in seen:
            seen.append(ev)
            what, fix = EVENT_PROBLEMS[ev["type"]]
            problems.append(Problem(ev["type"], name, index_of(ev.get("execution_count")), what(ev), fix,
                                    allowed=ev.get("matters") is False))
    secrets = _secret_values()
    for i, cell in enumerate(executed.cells):
        orig = _original_index(executed.cells, i)
        if cell.get("cell_type") != "code" or orig is None:
            continue
        text = _output_text(cell)
        if orig != failed:
            m = FATAL_SIGNATURES.search("\n".join(o.get("text", "") for o in cell.get("outputs", [])
                                                  if o.get("output_type") == "stream"))
            if m:
                problems.append(Problem("stderr-traceback", name, orig, f"printed {m.group(0)!r} yet the cell went on",
                                        "let the error raise (no bare except), or fix its cause"))
        if any(s in text for s in secrets) or any(rx.search(text) for rx in SECRET_SHAPES.values()):
            problems.append(Problem("secret-in-output", name, orig, "a secret value appears in the cell output",
                                    "never print tokens; nbutils.runtime.secrets.get_secret returns them without echo"))
    size, files = sandbox.usage(box.working)
    if size > OUTPUT_LIMIT_BYTES or files > OUTPUT_LIMIT_FILES:
        problems.append(Problem("output-limit", name, None, f"working dir holds {size / 2**30:.1f} GB in {files} files",
                                "Kaggle keeps 20 GB and 500 files: save only the final checkpoint, zip the rest"))
    return apply_allowances(problems, original.cells)


def run_notebook(path: Path, out: Path, params: dict, internet: bool, time_budget: float | None, mounts: list[tuple[Path, str]],
                 twin=None, ahead: bool = False, shared=None, upstream: dict | None = None) -> tuple[Result, sandbox.Sandbox]:
    """Execute one notebook in a fresh kernel inside its own Kaggle-batch sandbox (a twin's copy when `twin`; `shared`:
    the chain's shared install in that twin, harness/shared_install.py; `upstream`: for _unfound)."""
    import nbformat
    from papermill.exceptions import PapermillExecutionError

    from nbutils import embedded  # here: the harness's command line must not build the model to print --help

    name, original, box = path.name, nbformat.read(path, as_version=4), sandbox.create(out, path.stem)
    for src, slug in mounts:
        sandbox.mount_readonly(src, box, slug)
    params = {**params, **_unfound(path.stem, box, upstream or {})}  # after the mounts: what "auto" would find
    kernel, python, extra = _kernel(twin, box, ahead, shared, (internet, *setup_cells(original)))  # a twin's dataset: an input
    before = sandbox.fingerprint(box.input)
    executed_path = out / name
    result = Result(name, executed=str(executed_path))
    if not internet:  # what the sandbox's socket guard cannot see: curl, wget, git in `!` lines
        result.problems += offline_problems(name, original.cells)
    deadline = time.monotonic() + time_budget if time_budget else None
    kwargs = {"timeout_func": lambda cell: max(1, int(deadline - time.monotonic()))} if deadline else {}
    # The embedded default was built outside (an input, like a Kaggle dataset); the kernel only reads it.
    base = {**os.environ, "NBUTILS_CACHE": os.environ.get("NBUTILS_CACHE") or str(embedded.cache_dir().parent)}
    env = {**sandbox.environment(box, internet, base, python, CHAIN_PACKAGES), **extra}
    failed = None  # index (in the executed copy) of the cell that stopped the run
    t0 = time.monotonic()
    with mock.patch.dict(os.environ, env, clear=True):  # the kernel sees only the sandbox's environment
        try:
            _execute(path, executed_path, params, kernel, box.working, kwargs)
        except PapermillExecutionError as e:
            failed = -1  # found in the executed copy below: papermill inserts banner cells after taking e.cell_index
            what = f"{e.ename}: {e.evalue} (at `{_failing_line(e.source, e.traceback)}`)"
            result.problems.append(Problem("cell-error", name, None, what,
                                           f"fix the cell; the traceback is in the executed copy {executed_path}"))
        except Exception as e:  # timeouts and dead kernels surface here, not as PapermillExecutionError
            over = deadline is not None and time.monotonic() >= deadline - 1
            check = "time-budget" if over else "cell-error"
            fix = (f"the budget was {time_budget:.0f} s: use smoke=True, fewer steps, or the time_budget_min stop"
                   if over else "see the executed copy; a dead kernel is often out of memory")
            result.problems.append(Problem(check, name, None, f"{type(e).__name__}: {str(e).splitlines()[0][:200]}", fix))
            failed = _interrupted_index(executed_path)
    result.seconds = round(time.monotonic() - t0, 1)
    if time_budget and result.seconds > time_budget and not any(p.check == "time-budget" for p in result.problems):
        result.problems.append(Problem("time-budget", name, None, f"took {result.seconds:.0f} s, over the "
                                       f"{time_budget:.0f} s budget", "use smoke=True or fewer steps"))
    executed = nbformat.read(executed_path, as_version=4) if executed_path.exists() else original
    failed = _original_index(executed.cells, _error_index(executed.cells) if failed == -1 else failed)
    for p in result.problems:
        p.cell = failed if p.cell is None and p.check in ("cell-error", "time-budget") else p.cell
    result.problems += runtime_checks(name, original, executed, box, failed)
    written = sandbox.changed(before, sandbox.fingerprint(box.input))
    if written:
        result.problems.append(Problem("read-only-input", name, None, f"wrote into the input folder: {written[0]}"
                                       + (f" (+{len(written) - 1} more)" if len(written) > 1 else ""),
                                       "inputs are read-only on Kaggle: write under the working dir"))
    result.status = "failed" if result.failing else "passed"
    if twin is not None and ahead and not result.failing:  # the next notebook gets its own copy; a failed one stays
        _twins().release(box.root)
    return result, box


def _unfound(stem: str, box: sandbox.Sandbox, upstream: dict) -> dict:
    """The upstream folders to pass as parameters: a chain notebook finds its own with "auto" (environment.find_upstream
    over the input root, as on Kaggle), so it gets only those that search would miss; any other notebook gets all."""
    from nbutils.runtime.environment import Platform, find_upstream

    def found(stage: str) -> Path | None:
        try:
            return find_upstream(stage, "auto", Platform("kaggle", "batch", box.input, box.working, box.temp))
        except FileNotFoundError:
            return None

    chain_notebook = _stage(stem) is not None
    return {param: str(box.input / slug / stage) for param, (stage, slug) in upstream.items()
            if not chain_notebook or found(stage) != box.input / slug / stage}


def _execute(path: Path, executed: Path, params: dict, kernel: str, cwd: Path, kwargs: dict) -> None:
    import papermill

    from nbutils.harness import ipc_kernels

    papermill.execute_notebook(str(path), str(executed), parameters=params, kernel_name=kernel, cwd=str(cwd),
                               progress_bar=False, extra_arguments=KERNEL_ARGS, **ipc_kernels.ENGINE_KWARGS, **kwargs)


def _kernel(twin, box: sandbox.Sandbox, ahead: bool, shared=None, key: tuple = ()) -> tuple[str, str | None, dict]:
    """(kernel name, python, env additions): the project venv's kernel, or a copy of a Kaggle image twin
    (`nbutils.harness.twin.Twin`) with the nbutils dataset attached; ahead: a notebook follows (its copy is made now)."""
    return ("python3", None, {}) if twin is None else _twins().prepare(twin, box, ahead, shared, key)


def _twins():
    from nbutils.harness import twin  # here: the project-venv path never needs it

    return twin


def _scoped(params: dict, stem: str) -> dict:
    """The parameters one notebook gets: the plain ones, and those named `<notebook stem>:<name>` for it alone
    (`-p 01_data_prep:base_model X` names the model once, in 01, as a user does)."""
    plain = {k: v for k, v in params.items() if ":" not in k}
    return {**plain, **{k.split(":", 1)[1]: v for k, v in params.items() if k.split(":", 1)[0] == stem and ":" in k}}


def run(notebooks: list[Path], out: Path, params: dict, internet: bool | None, time_budget: float | None,
        twin=None) -> list[Result]:
    """Run notebooks in order; each gets the outputs of its kernel_sources mounted read-only as inputs."""
    from nbutils import embedded

    out.mkdir(parents=True, exist_ok=True)
    embedded.ensure()  # the embedded default is an input (like a Kaggle dataset), built before the sandboxed runs
    meta = kernel_metadata()
    slug_of = {p.stem: meta[p.stem]["id"].split("/")[-1] if p.stem in meta else p.stem.replace("_", "-")
               for p in notebooks}
    done: dict[str, sandbox.Sandbox] = {}
    results, unused = [], set(params)
    shared = SharedInstall() if twin is not None else None
    for path in notebooks:
        m = meta.get(path.stem, {})
        # Without shipped metadata, every earlier notebook counts as a source (a plain chain).
        sources = [s.split("/")[-1] for s in m.get("kernel_sources", [])] if m else [slug_of[s] for s in done]
        # Kaggle mounts an upstream kernel's whole /kaggle/working under /kaggle/input/<slug>/.
        mounts = [(box.working, slug_of[up]) for up, box in done.items() if slug_of[up] in sources]
        accepted = _parameter_names(path)
        unused -= accepted | {k for k in unused if k.split(":", 1)[0] == path.stem and k.split(":", 1)[1] in accepted}
        nb_params = _scoped(params, path.stem)
        upstream = {stage.param: (stage.stage, slug_of[up]) for up, box in done.items() if (stage := _stage(up))
                    and slug_of[up] in sources and stage.param in accepted and stage.param not in nb_params
                    and (box.working / stage.stage).exists()}
        net = internet if internet is not None else bool(m.get("enable_internet", True))
        result, box = run_notebook(path, out, {k: v for k, v in nb_params.items() if k in accepted}, net,
                                   time_budget, mounts, twin, ahead=path != notebooks[-1], shared=shared, upstream=upstream)
        stage = _stage(path.stem)
        if stage and not result.failing:
            if not (box.working / stage.stage / stage.marker).exists():
                result.problems.append(Problem("missing-artifact", path.name, None,
                                               f"did not write {stage.stage}/{stage.marker}, which the next notebook needs",
                                               "check the notebook's output_dir handling (nbutils.runtime.environment.stage_dir)"))
                result.status = "failed"
        done[path.stem] = box
        results.append(result)
        if result.failing:
            break  # like a chain of Kaggle kernels: later ones would only fail for lack of inputs
    if shared is not None and shared.folder is not None:
        sandbox.discard(shared.folder)  # the later notebooks' copies hold their own links
    if unused and len(results) == len(notebooks):
        print(f"note: no notebook has a parameter named {', '.join(sorted(unused))} (ignored)", file=sys.stderr)
    return results


def _stage(stem: str) -> chain.Stage | None:
    """The chain stage of one of our notebooks (None for any other notebook the harness runs)."""
    try:
        return chain.by_notebook(stem)
    except KeyError:
        return None


def _parameter_names(path: Path) -> set[str]:
    """Names assigned in the `parameters` cell (a cell that does not parse accepts none: lint reports it)."""
    import nbformat

    from nbutils.train.launch import parameter_defaults

    names = set()
    for cell in nbformat.read(path, as_version=4).cells:
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            try:
                names |= set(parameter_defaults(cell.source))
            except SyntaxError:
                continue
    return names


def lint(notebooks: list[Path], platform_name: str = "kaggle") -> list[Result]:
    """The static checks alone, the notebooks read as a run on the platform (kaggle, colab) executes them."""
    results = [Result(p.name, problems=check_notebook(p, platform_name)) for p in notebooks]
    for r in results:
        r.status = "failed" if r.failing else "passed"
    return results


def run_twins(notebooks: list[Path], out: Path, params: dict, internet: bool | None, time_budget: float | None,
              names: list[str], stamp=None) -> list[Result]:
    """The notebooks again in each named Kaggle image twin ('all': every snapshot), under out/twin-<name>/.

    `stamp`: chainrun.stamped, to stamp each twin's run for the tests (check does).
    """
    if not names:
        return []
    return [r for t in _twins().twins(None if "all" in names else names)
            for r in run_twin(t, notebooks, out, params, internet, time_budget, stamp)]


def run_twin(t, notebooks: list[Path], out: Path, params: dict, internet: bool | None, time_budget: float | None,
             stamp=None) -> list[Result]:
    """The notebooks in one Kaggle image twin `t`, under out/twin-<name>/, then the last install cell once more."""
    twins = _twins()
    t0 = time.monotonic()
    execute = lambda: run(notebooks, out / f"twin-{t.name}", params, internet, time_budget, twin=t)  # noqa: E731
    ran = stamp(execute, out / f"twin-{t.name}", params) if stamp else execute()
    twins.drop_spare(t, out / f"twin-{t.name}" / "sandbox")  # made for a notebook that never ran (a failure)
    print(f"[papermill-check] twin {t.name}: {len(ran)} notebooks in {time.monotonic() - t0:.0f} s", flush=True)
    last = out / f"twin-{t.name}" / "sandbox" / notebooks[-1].stem
    if len(ran) == len(notebooks) and not ran[-1].failing and (last / "env").exists():
        summary = twins.rerun_install(last)  # a second run in the same session installs nothing
        print(f"[papermill-check] twin {t.name}, install cell run again: {summary}", flush=True)
        if "nothing to install" not in summary:
            ran[-1].problems.append(Problem("rerun-install", ran[-1].notebook, None, "the install cell run again in "
                                            f"the same session installed something: {summary}", "see nbutils.runtime.install"))
            ran[-1].status = "failed"
        twins.release(last)
    for r in ran:
        r.notebook = f"{r.notebook} [twin {t.name}]"
        for p in r.problems:
            p.notebook = r.notebook
    return ran


def with_static(notebooks: list[Path], execute) -> list[Result]:
    """Static checks, then `execute()`; one row per notebook, its static problems first, then the run's."""
    linted = {r.notebook: r for r in lint(notebooks)}
    ran = execute()
    for r in ran:
        static = linted.pop(r.notebook.split(" [twin ")[0], None)  # once, on the first row for that notebook
        r.problems = (static.problems if static else []) + r.problems
        r.status = "failed" if r.failing else "passed"
    return ran + [Result(r.notebook, "not run", problems=r.problems) for r in linted.values()]
