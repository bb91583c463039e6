"""GGUF export, measured: llama.cpp's converter and 04's checks on the family twins, and the llama-quantize build.

For each family twin with a real tokenizer (tests/twins/realvocab.py) and each type the converter writes (f16,
q8_0): 04's GGUF step (nbutils.export.ggufbuild) on the twin as the merged model; the rows are its max |logit diff|
against the merged model, the tolerance, greedy agreement and the perplexity ratio, and the step's seconds. Then
llama-quantize built from the pinned sources into a fresh folder (the time a first k-quant costs), and q4_k_m on
the Qwen2.5 twin. Random-weight twins: the figures check the export path, not a trained model's quality.

    python -m bench gguf        # rows saved in bench/results/<machine>.json under "gguf"
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

TYPES = ("f16", "q8_0")


def _row(metric: str, value, **extra) -> dict:
    return {"bench": "gguf", "metric": metric, "value": value, **extra}


def _family_rows(name: str, quant_type: str, root: Path) -> list[dict]:
    from tests.export.test_ggufbuild import _export_type
    from tests.twins import families

    t0 = time.monotonic()
    result = _export_type(name, families.ensure(name), root, quant_type)
    seconds = round(time.monotonic() - t0, 1)
    if not result.get("file"):
        return [_row(f"{name} {quant_type}", "no GGUF", note=result.get("reason") or result.get("error"))]
    v = result["verification"]
    return [_row(f"{name} {quant_type}: logits' NMSE (bound)", f"{v['nmse']:.3g} ({v['nmse_bound']:g})",
                 note=f"max |logit diff| {v['max_abs_diff']:.3g} of logits up to {v['max_abs_logit']:.3g}; greedy same: "
                      f"{v['same_greedy']}, ties {v['greedy_ties']}"),
            _row(f"{name} {quant_type}: perplexity GGUF / merged", round(v["perplexity"] / v["merged_perplexity"], 5),
                 target=f"<= {1 + v['ppl_margin']:g}"),
            _row(f"{name} {quant_type}: convert + verify, s", seconds, note=f"{result['size_mb']} MB")]


def _build_rows(root: Path) -> list[dict]:
    import os

    from nbutils.export import quantize
    from nbutils.runtime import llamacpp

    binary, note = quantize.build(llamacpp.converter_dir(sources=True), root / "build")
    rows = [_row(f"llama-quantize build ({os.cpu_count()} cores, load {os.getloadavg()[0]:.1f})", note if binary else
                 "failed", note=None if binary else note)]
    if binary and quantize.find_quantize() is None:  # keep it as the cached build the notebook finds
        Path(quantize.build_dir()).parent.mkdir(parents=True, exist_ok=True)
        os.replace(root / "build", quantize.build_dir())
    return rows


def run() -> list[dict]:
    from tests.twins import realvocab

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name in sorted(realvocab.VOCAB):
            for quant_type in TYPES:
                rows += _family_rows(name, quant_type, root / f"{name}-{quant_type}")
        rows += _build_rows(root)
        rows += _family_rows("qwen2.5-instruct", "q4_k_m", root / "qwen2.5-instruct-q4_k_m")
    return rows


if __name__ == "__main__":
    from bench.__main__ import print_table

    print_table(run())
