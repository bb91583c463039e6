"""Where a bench ran, and its rows kept in bench/results/<machine>.json so the README can cite them."""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import sys
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def describe() -> dict:
    """CPU model, cores, GPU (if any), torch/transformers versions, date and the load at that moment."""
    import torch
    import transformers

    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor() or "unknown cpu")
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"cpu": cpu, "cores": os.cpu_count(), "gpu": gpu, "torch": torch.__version__,
            "transformers": transformers.__version__, "python": sys.version.split()[0],
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()]}


def name(machine: dict) -> str:
    """A file name for the machine: its GPU when there is one, else its CPU and core count."""
    label = machine["gpu"] or f"cpu-{machine['cpu']}-{machine['cores']}c"
    return re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")


def save(bench: str, rows: list[dict], command: str) -> Path:
    """Add (or replace) this bench's rows, with the machine and the command, in bench/results/<machine>.json."""
    machine = describe()
    path = RESULTS / f"{name(machine)}.json"
    kept = json.loads(path.read_text()) if path.exists() else {}
    kept[bench] = {"machine": machine, "command": command, "rows": rows}
    RESULTS.mkdir(exist_ok=True)
    path.write_text(json.dumps(kept, indent=2) + "\n")
    return path


def cap_gpu_memory(env: dict | None = None) -> float | None:
    """Cap this process's CUDA memory at $BENCH_GPU_MEMORY_GB (a T4's 15 GB on a bigger GPU); the cap in GB, or None
    without CUDA or the variable. Set before the model loads; processes a bench spawns inherit the variable."""
    import torch

    gb = float((os.environ if env is None else env).get("BENCH_GPU_MEMORY_GB") or 0)
    if not gb or not torch.cuda.is_available():
        return None
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, gb * 2**30 / total))
    return gb
