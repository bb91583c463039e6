"""Measurements in fresh processes for make gpu-proof: each its own CUDA context, memory cap and peak."""

from __future__ import annotations

import multiprocessing
import os
from dataclasses import dataclass


def one(fn, *args):
    """fn(*args) in a fresh process (its own CUDA context, the memory cap, a clean peak); its failure raised here."""
    result = tasks([(fn, args)])[0]
    if isinstance(result, Failed):
        raise RuntimeError(result.error)
    return result


def tasks(jobs: list[tuple]) -> list:
    """fn(*args) for each (fn, args), each in a fresh process, as many at once as the GPU holds under the cap (plus
    1 GB for each CUDA context): a process's cap and its peak (max_memory_allocated) are its own, so the batches of
    the sweeps need not wait for each other (15 GB caps: 8 at once on a 141 GB GPU, 4 on an 80 GB one). Results in
    the order of jobs; a task that raised gives a Failed in its place, so the others' results are kept."""
    import torch

    gb = float(os.environ.get("BENCH_GPU_MEMORY_GB") or 0)
    at_once = len(jobs)
    if gb and torch.cuda.is_available():
        at_once = max(1, min(at_once, int(torch.cuda.get_device_properties(0).total_memory / 2**30 // (gb + 1))))
    # maxtasksperchild=1: a process each, never one that held an earlier task's model (its peak would count it)
    with _context(torch.cuda.is_available()).Pool(at_once, maxtasksperchild=1) as pool:
        return pool.starmap(_call, jobs, chunksize=1)


@dataclass(frozen=True)
class Failed:
    error: str  # the exception's type and first line


def _call(fn, args):
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 - one measurement's failure becomes its row; the others go on
        import traceback

        traceback.print_exception(e)
        return Failed(describe(e))


def describe(error: Exception) -> str:
    """The exception's type and the first line of its message: what a results row can hold."""
    return f"{type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}"


def _context(cuda: bool):
    """spawn on a GPU (each process's own CUDA context, memory cap and peak). On the CPU nothing is capped or
    measured per process, so the processes fork from a server that imported torch, transformers and peft once
    (seconds each) and has run nothing: no CUDA context, no thread pool to inherit."""
    if cuda:
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "transformers", "peft"])
    return ctx
