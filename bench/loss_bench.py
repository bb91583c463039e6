"""Peak memory of the loss step alone (forward + backward from the final hidden states): plain vs chunked.

Plain: full fp32 logits (hidden @ lm_head.T) and transformers' ForCausalLMLoss, as every causal LM does.
Chunked: `nbutils.train.loss.chunked_cross_entropy`. Each runs in a fresh process; the peak is the
growth of the process' peak RSS (VmHWM, reset through /proc/self/clear_refs once the inputs exist)
during one forward + backward, so it counts every buffer the step allocates. All positions have a
target (the chunked loss's skipping of prompt and padding positions is not counted here). lm_head is
frozen, as under LoRA. The plan's logits part (nbutils.train.memory, fp32 compute) is printed beside it.
"""

from __future__ import annotations

import multiprocessing
import os

GB = 2**30


def _status(key: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def _measure(mode: str, batch: int, seq: int, vocab: int, hidden: int) -> dict:
    import torch
    from transformers.loss.loss_utils import ForCausalLMLoss

    from nbutils.train import loss

    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
    g = torch.Generator().manual_seed(0)
    h = torch.randn(batch, seq, hidden, generator=g).requires_grad_()
    w = torch.randn(vocab, hidden, generator=g) * hidden**-0.5
    labels = torch.randint(0, vocab, (batch, seq), generator=g)
    n = int((labels[:, 1:] != -100).sum())
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS: the peak from here on
    before = _status("VmRSS")
    if mode == "plain":
        value = ForCausalLMLoss(h @ w.T, labels, vocab, num_items_in_batch=n)
    else:
        value = loss.chunked_cross_entropy(h, w, labels, n)
    value.backward()
    return {"peak_bytes": _status("VmHWM") - before, "loss": value.item(), "grad_sum": h.grad.double().abs().sum().item()}


def measure(mode: str, batch: int = 2, seq: int = 2048, vocab: int = 128_256, hidden: int = 512) -> dict:
    """Loss step peak bytes, loss value and a gradient checksum, in a fresh process."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_measure, (mode, batch, seq, vocab, hidden))


def run(batch: int = 2, seq: int = 2048, vocab: int = 128_256, hidden: int = 512) -> list[dict]:
    from nbutils.train import memory

    shape = f"vocab {vocab}, seq {seq}, batch {batch}, hidden {hidden}"
    plain, chunked = measure("plain", batch, seq, vocab, hidden), measure("chunked", batch, seq, vocab, hidden)
    rows = []
    for name, m in (("plain", plain), ("chunked", chunked)):
        planned = memory.logits_bytes(batch, seq, vocab, hidden, name, compute_bytes=4)
        rows += [{"bench": "loss", "metric": f"loss step peak, {name} ({shape}), GB", "value": round(m["peak_bytes"] / GB, 3)},
                 {"bench": "loss", "metric": f"plan's logits part / measured, {name}", "value":
                  round(planned / m["peak_bytes"], 3), "target": "0.9 - 1.1"}]
    rel = abs(plain["loss"] - chunked["loss"]) / abs(plain["loss"])
    grel = abs(plain["grad_sum"] - chunked["grad_sum"]) / plain["grad_sum"]
    rows += [{"bench": "loss", "metric": "peak ratio plain / chunked", "value": round(plain["peak_bytes"] / chunked["peak_bytes"], 1),
              "target": ">= 4"},
             {"bench": "loss", "metric": "loss plain vs chunked, relative difference", "value": f"{rel:.1e}",
              "target": "<= 1e-5", "note": f"loss {plain['loss']:.6f}; grad checksum rel. diff {grel:.1e}"}]

    return rows


if __name__ == "__main__":
    from bench.__main__ import print_table

    print_table(run())
