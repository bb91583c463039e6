"""Which allocations are live at the peak of 02's training step, per batch, each in a fresh process (CUDA only).

    python bench/gpu_memtrace.py MODEL_DIR OUT_DIR [BATCH ...]     (default batches: 1 2)

Records the CUDA allocator's history while make gpu-proof's memory stage trains 3 steps at the batch (fp16, the
15 GB cap), replays the history to the peak and writes OUT_DIR/memtrace-b<batch>.txt: the live bytes grouped by
the first frames outside torch that allocated them. nbutils.train.memory's terms were checked against a GPU
this way (docs/planning.md).
"""

from __future__ import annotations

import collections
import multiprocessing
import os
import sys
from pathlib import Path


def live_at_peak(trace: list[dict]) -> tuple[int, dict]:
    """The peak of allocated bytes in the allocator's trace and the allocations live then (address -> event)."""
    current = peak = 0
    at, sizes = -1, {}
    for i, event in enumerate(trace):
        if event["action"] == "alloc":
            sizes[event["addr"]] = event["size"]
            current += event["size"]
            if current > peak:
                peak, at = current, i
        elif event["action"] == "free_requested" and event["addr"] in sizes:
            current -= sizes.pop(event["addr"])
    live = {}
    for event in trace[:at + 1]:
        if event["action"] == "alloc":
            live[event["addr"]] = event
        elif event["action"] == "free_requested":
            live.pop(event["addr"], None)
    return peak, live


def grouped(live: dict, top: int = 25) -> list[str]:
    """Lines of live bytes per allocating site (the first four frames outside torch itself)."""
    size, count = collections.Counter(), collections.Counter()
    for event in live.values():
        frames = [f for f in event.get("frames", []) if "/torch/" not in f["filename"] or "autograd" in f["filename"]]
        key = " <- ".join(f"{Path(f['filename']).name}:{f['line']}:{f['name']}" for f in frames[:4])
        size[key] += event["size"]
        count[key] += 1
    return [f"  {v / 2**30:7.3f} GB  x{count[k]:<5} {k[:400]}" for k, v in size.most_common(top)]


def one(model: str, batch: int, out: str) -> None:
    """One batch of the memory stage with the allocator's history recorded; its report written to `out`."""
    import torch

    from bench import gpu_proof

    torch.cuda.memory._record_memory_history(max_entries=3_000_000, stacks="python")
    row = gpu_proof._one_batch(model, batch, gpu_proof.GPU_SETUP)
    trace = torch.cuda.memory._snapshot()["device_traces"][0]
    torch.cuda.memory._record_memory_history(enabled=None)
    peak, live = live_at_peak(trace)
    text = "\n".join([f"batch {batch}: {row}; replayed peak {peak / 2**30:.3f} GB", *grouped(live)])
    print(text, flush=True)
    Path(out, f"memtrace-b{batch}.txt").write_text(text + "\n")


def main(argv: list[str]) -> int:
    model, out = argv[0], argv[1]
    os.environ["BENCH_GPU_MEMORY_GB"] = "15"  # the T4 cap of make gpu-proof
    for batch in [int(x) for x in argv[2:]] or (1, 2):
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            pool.apply(one, (model, batch, out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
