"""What the fault-injection tests of 04 and 05 share: a notebook run as a script in a child forked from a server that
imported torch once (a kill costs no import time), and the check made after every kill: nothing partial under a
final name, and a summary, when there is one, that lists only files that are there and whole."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest

from nbutils.train import atomic, faultpoints, reports, runlock

ROOT = Path(__file__).resolve().parents[1]
PRELOAD = ["torch", "transformers", "peft", "bitsandbytes", "datasets", "jupytext", "nbutils.train.training",
           "nbutils.train.modeling", "nbutils.train.launch", "nbutils.export.merge", "nbutils.data"]


def context(*more: str):
    """A forkserver context that imports torch (and `more`) once for every child."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([*PRELOAD, *more])
    return ctx


def _kill_mid_shard(nth: int) -> None:
    """The nth safetensors shard a model's save_pretrained writes gets half its bytes, then the process is SIGKILLed."""
    import safetensors.torch
    import transformers.modeling_utils as mu

    calls = []

    def save(tensors, filename, metadata=None):
        calls.append(filename)
        if len(calls) == nth:
            data = safetensors.torch.save(tensors, metadata=metadata)
            Path(filename).write_bytes(data[: len(data) // 2])
            os.kill(os.getpid(), signal.SIGKILL)
        return safetensors.torch.save_file(tensors, filename, metadata=metadata)

    mu.safe_save_file = save


def _hold(module: str, name: str, seconds: float) -> None:
    """Make `module.name` wait `seconds` first: a run held there while a second one is started."""
    import importlib

    mod = importlib.import_module(module)
    real = getattr(mod, name)

    def slow(*a, **k):
        print(f"[test] holding in {name} for {seconds:.0f} s", flush=True)
        time.sleep(seconds)
        return real(*a, **k)

    setattr(mod, name, slow)


def _fool_disk_plan(free: int) -> None:
    """04's disk plan (only it) reads `free` bytes free on every disk."""
    import shutil
    import types

    from nbutils.export import diskplan

    diskplan.shutil = types.SimpleNamespace(disk_usage=lambda p: shutil.disk_usage(p)._replace(free=free))


def notebook(path: str, params: dict, env: dict, kill_at: str | None = None, full_at: str | None = None,
             log: str | None = None, hold: tuple | None = None, disk_free: int | None = None) -> None:
    """Run a notebook's .py as a script (nbutils.train.launch) with these parameters. In a child process.
    kill_at "shard:N": the Nth safetensors shard is cut short by a kill; any other: a fault point's kill.
    hold: (module, function, seconds). disk_free: what shutil.disk_usage says is free (a disk plan fooled into
    writing more than fits, so the disk fills mid-write)."""
    if log:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
    os.environ.update(env)
    if kill_at and kill_at.startswith("shard:"):
        _kill_mid_shard(int(kill_at.split(":")[1]))
    elif kill_at:
        os.environ[faultpoints.ENV] = kill_at
    if full_at:
        os.environ[faultpoints.FULL_ENV] = full_at
    if hold:
        _hold(*hold)
    if disk_free is not None:
        _fool_disk_plan(disk_free)
    from nbutils.train import launch

    script, _ = launch.build_script(ROOT / path, params)
    exec(compile(script, f"{path} (as script)", "exec"), {"__name__": "__main__"})  # noqa: S102


def call(ctx, fn, *args, timeout: float = 300) -> None:
    """fn(*args) in a child (torch already imported there, and never in the test's own process)."""
    p = ctx.Process(target=fn, args=args)
    p.start()
    p.join(timeout)
    if p.is_alive():
        p.kill()
    assert p.exitcode == 0, f"{fn.__name__}{args} failed (exit {p.exitcode})"


def train_sft(data_dir: str, out: str, steps: int, save_steps: int) -> None:
    """02's run (its own recipe) on the embedded data: the adapter 04 and 05 start from. In a child process."""
    from nbutils.harness import notebook_recipe

    model, tok, session = notebook_recipe.train(data_dir, out, max_steps=steps, eval_steps=save_steps,
                                                save_steps=save_steps, probe_prompts=0)
    notebook_recipe.finish(session, model, tok)


def start(ctx, path: str, params: dict, env: dict, **kw):
    """Start the notebook in a child; the process."""
    p = ctx.Process(target=notebook, args=(path, params, env), kwargs=kw)
    p.start()
    return p


def run(ctx, path: str, params: dict, env: dict, timeout: float = 300, **kw) -> int:
    """Run the notebook in a child; its exit code (-9: killed, 1: it raised)."""
    p = start(ctx, path, params, env, **kw)
    p.join(timeout)
    if p.is_alive():
        p.kill()
        pytest.fail(f"{path} still running after {timeout}s")
    return p.exitcode


def final_files(folder: Path) -> dict[str, Path]:
    """Files under their final names (no temporary or trash names, no lock files), by path relative to `folder`."""
    out = {}
    for p in sorted(Path(folder).rglob("*")):
        rel = p.relative_to(folder)
        if p.is_file() and not any(atomic.is_leftover(Path(part)) for part in rel.parts) \
                and p.name not in reports.LOCK_FILES:
            out[rel.as_posix()] = p
    return out


def consistent(folder: Path, summary: str, *known: dict, volatile=()) -> dict:
    """After a kill: every file under a final name is whole (its SHA-256 one of the `known` runs' checksums for that
    path; `volatile` names and folders, written per run, are only checked by the summary), and the summary, if there is one,
    parses and lists only files that are there and whole. Returns the summary (or {})."""
    from nbutils.train import checksums

    for rel, path in final_files(folder).items():
        if rel == summary or rel.startswith(tuple(volatile)):
            continue
        seen = {k[rel]["sha256"] for k in known if rel in k}
        assert seen, f"{rel} under a final name belongs to no known run: {sorted(final_files(folder))}"
        assert checksums.sha256(path) in seen, f"{rel} is partial or mixed (its SHA-256 is no known run's)"
    assert reports.problems(folder, summary) == [], reports.problems(folder, summary)
    path = Path(folder) / summary
    return json.loads(path.read_text()) if path.exists() else {}


def tail(log: Path, n: int = 3000) -> str:
    return log.read_text()[-n:] if log.exists() else "(no log)"


def holder_written(folder: Path, timeout: float = 120, alive=lambda: True) -> bool:
    """Wait until a run holds `folder`'s lock (its holder file is there)."""
    deadline = time.time() + timeout
    while time.time() < deadline and alive():
        if (Path(folder) / runlock.HOLDER).exists():
            return True
        time.sleep(0.2)
    return (Path(folder) / runlock.HOLDER).exists()
