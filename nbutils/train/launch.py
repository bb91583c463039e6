"""Several processes for the training notebook: from inside the notebook, or its .py from a shell.

Inside the notebook (Kaggle's 2xT4): `decide` picks the mode from the GPU count and the memory
plan, and `run_in_processes` runs the notebook's training function once per GPU through
accelerate's notebook launcher, which forks the kernel: nothing may touch the GPU before it (no
CUDA initialisation, no bitsandbytes import; preflight reads the GPUs through nvidia-smi).

From a shell, on any machine, the notebook's .py runs as a plain script, one process per GPU:

    accelerate launch --multi_gpu --num_processes 2 -m nbutils.train.launch notebooks/02_train_qlora.py --max_steps 200
    torchrun --nproc_per_node 2 -m nbutils.train.launch notebooks/02_train_qlora.py --config run.yaml

The script launcher does what papermill does for a kernel, in-process: it reads the jupytext
notebook, keeps the code cells, and injects the overrides right after the cell tagged `parameters`,
cast to the type of each default. Unknown names are an error (a typo would otherwise be ignored).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from nbutils.defaults import is_auto

MODES = ("auto", "ddp", "split", "single")
# What a forked process says when the kernel queried CUDA before the fork (both seen on an H100, torch 2.11).
FORK_CUDA_ERRORS = ("Cannot re-initialize CUDA in forked subprocess", "CUDA error: initialization error")


@dataclass(frozen=True)
class Launch:
    mode: str  # "single" | "ddp" | "split"
    processes: int  # processes this notebook starts itself (1: train in this kernel, or already one rank of many)
    world_size: int  # processes training together, however they were started
    why: str


def decide(multi_gpu: str = "auto", num_processes="auto", gpu_count: int = 0, memory_plan: dict | None = None,
           env: dict | None = None) -> Launch:
    """How this run trains: DDP over the GPUs when one GPU holds the model, split when only all together do.
    num_processes "auto": one per GPU; a number: that many (2 on a CPU trains over gloo, as the tests do)."""
    env = os.environ if env is None else env
    if multi_gpu not in MODES:
        raise ValueError(f"multi_gpu={multi_gpu!r} is not one of {', '.join(MODES)}.")
    given = num_processes
    num_processes = 0 if is_auto(num_processes) else int(num_processes)
    if (num_processes < 1 and not is_auto(given)) or (gpu_count and num_processes > gpu_count):
        raise ValueError(f"num_processes={given!r} but {gpu_count} GPU(s) are visible: use \"auto\" (one per GPU) "
                         f"or 1 to {max(1, gpu_count)}.")
    world = int(env.get("WORLD_SIZE", "1"))
    if world > 1:
        return Launch("ddp", 1, world, f"one of {world} processes started by accelerate launch / torchrun")
    if multi_gpu == "split":
        return Launch("split", 1, 1, f"one process, the model spread over {gpu_count} GPU(s) (device_map=auto): "
                                     "fits bigger models, no speed-up")
    if multi_gpu == "single" or num_processes == 1:
        return Launch("single", 1, 1, "one process (asked for)")
    if num_processes > 1:
        where = "GPUs" if gpu_count else "CPU processes (gloo)"
        return Launch("ddp", num_processes, num_processes, f"{num_processes} {where} through the notebook launcher")
    fits = memory_plan is None or memory_plan.get("fits", True)
    if gpu_count > 1 and (fits or multi_gpu == "ddp"):
        return Launch("ddp", gpu_count, gpu_count, f"one process per GPU ({gpu_count}) through the notebook launcher: "
                                                   "the memory plan says one GPU holds the model")
    if gpu_count > 1 and not (memory_plan or {}).get("split_fits", True):
        return Launch("split", 1, 1, f"the memory plan says even {gpu_count} GPUs together cannot hold it: lower the "
                                     "batch size or sequence length, or use a smaller model")
    if gpu_count > 1:
        return Launch("split", 1, 1, f"the memory plan says one GPU cannot hold it: spread over {gpu_count} GPUs in "
                                     "one process (device_map=auto; fits, but no faster)")
    return Launch("single", 1, 1, "one GPU" if gpu_count else "no GPU: one CPU process")


def run_in_processes(fn, processes: int):
    """fn() here when processes == 1 (its result is returned); else once per process through accelerate's
    notebook launcher (fork), and None: the processes' results are the files the first one wrote.

    Under `accelerate launch` / `torchrun` (this process is one rank of several) the ranks other than
    the first stop after fn(): what follows in the notebook reads and shows the first rank's files."""
    if processes <= 1:
        result = fn()
        if int(os.environ.get("RANK", "0")) > 0:
            raise SystemExit(0)
        return result
    import torch

    if "bitsandbytes" in sys.modules or torch.cuda.is_initialized():
        what = "bitsandbytes was imported" if "bitsandbytes" in sys.modules else "CUDA was initialised"
        raise RuntimeError(
            f"Cannot start {processes} processes from this notebook: {what} in an earlier cell, and the notebook "
            "launcher forks this kernel, which needs a GPU nobody has touched yet. Restart the kernel and run the "
            "cells in order (import nbutils.train.training, transformers' Trainer or peft only inside the training "
            "function), or set num_processes=1 to train in this kernel on one GPU.")
    from accelerate import notebook_launcher
    from accelerate.utils import patch_environment

    from nbutils.runtime.limits import session_start

    def each_process():
        if int(os.environ.get("RANK", "0")) > 0:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 -- one copy of the log; errors still reach stderr
        fn()  # its result stays in the process (a model does not pickle); the files are the result

    try:  # the processes' time budget counts from the kernel's start, not from the fork
        with patch_environment(NBUTILS_SESSION_START=session_start()):
            notebook_launcher(each_process, num_processes=processes, use_port=str(_free_port()))
    except Exception as e:
        if not any(sign in str(e) for sign in FORK_CUDA_ERRORS):
            raise
        raise RuntimeError(
            "The processes could not use the GPU: CUDA was touched in this kernel before the launch, though "
            "torch.cuda.is_initialized() said no (a backward pass, or torch.cuda.is_available() / device_count(), "
            "queries the devices and a fork cannot use CUDA after that). Restart the kernel and run the cells in "
            "order, keeping all GPU work inside the training function; or set num_processes=1.") from e
    return None


def _free_port() -> int:
    """A free local port for the processes' rendezvous (29500, the default, may be held by another run)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parameter_defaults(source: str) -> dict:
    """Every name a parameters cell assigns, with its default: the literal, or None when it is not one.

    The one parser of the parameters cell (the harness asks it which names a notebook accepts). ast, not
    papermill's own line parser, which skips any line holding two '='. SyntaxError propagates."""
    out = {}
    for node in ast.parse(source).body:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        value = node.value
        for target in (t for t in targets if isinstance(t, ast.Name)):
            try:
                out[target.id] = ast.literal_eval(value) if value is not None else None
            except (ValueError, SyntaxError, TypeError):
                out[target.id] = None  # a computed default: overrides are cast as if it were unknown
    return out


def _cast(name: str, raw, default):
    if isinstance(default, str) and is_auto(default) and isinstance(raw, str):  # "auto" or a value: --max_steps 200
        try:
            return ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            return raw
    if not isinstance(raw, str) or isinstance(default, str):
        return raw
    if isinstance(default, bool):
        if raw.lower() in ("1", "true", "yes", "on"):
            return True
        if raw.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"--{name} expects true or false, got {raw!r}")
    if isinstance(default, (int, float)):
        try:
            value = float(raw) if isinstance(default, float) or "." in raw or "e" in raw.lower() else int(raw)
        except ValueError:
            raise ValueError(f"--{name} expects a number, got {raw!r}") from None
        return value
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return raw


def load_config(path: str | Path) -> dict:
    """Parameters from a JSON or YAML file (same names as the parameters cell)."""
    text = Path(path).read_text()
    if str(path).endswith((".yaml", ".yml")):
        import yaml

        return yaml.safe_load(text) or {}
    return json.loads(text)


def build_script(notebook: str | Path, overrides: dict) -> tuple[str, dict]:
    """The notebook's code cells as one script with the overrides injected after `parameters`."""
    import jupytext

    nb = jupytext.read(notebook)
    cells = [c for c in nb.cells if c.cell_type == "code"]
    params = [i for i, c in enumerate(cells) if "parameters" in c.metadata.get("tags", [])]
    if not params:
        raise ValueError(f"{notebook}: no cell tagged 'parameters'; cannot take parameters from the command line.")
    defaults = parameter_defaults(cells[params[0]].source)
    unknown = sorted(set(overrides) - set(defaults))
    if unknown:
        raise ValueError(f"{notebook}: unknown parameter(s) {', '.join(unknown)}; known: {', '.join(defaults)}")
    values = {k: _cast(k, v, defaults[k]) for k, v in overrides.items()}
    injected = "\n".join(f"{k} = {v!r}" for k, v in values.items())
    parts = []
    for i, cell in enumerate(cells):
        lines = [ln for ln in cell.source.splitlines() if not ln.lstrip().startswith(("!", "%"))]
        parts.append(f"# --- cell {i} ---\n" + "\n".join(lines))
        if i == params[0] and injected:
            parts.append("# --- injected parameters ---\n" + injected)
    return "\n\n".join(parts) + "\n", values


def parse_overrides(argv: list[str]) -> dict:
    """`--name value` pairs (and `--config FILE`) into a dict; command line wins over the file."""
    overrides, i = {}, 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("--") or i + 1 >= len(argv):
            raise ValueError(f"expected '--name value' pairs, got {arg!r}")
        name, value = arg[2:].replace("-", "_"), argv[i + 1]
        if name == "config":
            overrides = {**load_config(value), **overrides}
        else:
            overrides[name] = value
        i += 2
    return overrides


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nbutils.train.launch", description=__doc__.splitlines()[0])
    parser.add_argument("notebook", help="the notebook's jupytext .py (or .ipynb)")
    args, rest = parser.parse_known_args(argv)
    try:
        script, values = build_script(args.notebook, parse_overrides(rest))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    import os

    if int(os.environ.get("RANK", "0")) > 0:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 -- one copy of the log; errors still reach stderr
    code = compile(script, f"{args.notebook} (as script)", "exec")
    exec(code, {"__name__": "__main__", "__file__": str(Path(args.notebook).resolve())})  # noqa: S102
    return 0


if __name__ == "__main__":
    sys.exit(main())
