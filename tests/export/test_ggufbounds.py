"""The one table of GGUF bounds (nbutils.export.ggufbounds): both checks read it, coarser types never get tighter
bounds than finer ones, and every k-quant gets the k-quant row."""

import dataclasses

import torch

from nbutils.export import ggufbounds, ggufcheck, runtimecheck

ORDER = ("f32", "f16", "bf16", "q8_0", "q4_k_m")  # finest to coarsest


def test_coarser_types_are_never_held_to_tighter_bounds():
    rows = [ggufbounds.for_type(t) for t in ORDER]
    for finer, coarser in zip(rows, rows[1:]):
        for name in ("nmse", "runtime_nmse", "kl_mean", "ppl_margin"):
            assert getattr(finer, name) <= getattr(coarser, name), (finer, coarser, name)
        assert finer.top1 >= coarser.top1 and finer.greedy >= coarser.greedy
    assert all(ggufbounds.for_type(t) is ggufbounds.KQUANT for t in ("q4_k_m", "Q5_K_M", "q6_k", "q3_k_s"))


def test_the_transformers_check_and_the_llama_cpp_check_read_the_same_row(monkeypatch):
    monkeypatch.setitem(ggufbounds.TABLE, "q8_0", dataclasses.replace(ggufbounds.TABLE["q8_0"], nmse=1e-9,
                                                                     runtime_nmse=2e-9, kl_mean=3e-9, top1=0.5))
    ref = {"logits": [torch.tensor([[10.0, 0.0]])], "greedy": [[1]], "margins": [[5.0]], "nll": 2.0, "tokens": 1}
    got = {**ref, "logits": [torch.tensor([[10.1, 0.0]])]}
    verdict = ggufcheck.compare(ref, got, "q8_0")
    assert verdict["nmse_bound"] == 1e-9 and not verdict["ok"] and "NMSE" in verdict["problems"][0]
    assert runtimecheck.bounds("Q8_0") == (2e-9, 3e-9, 0.5)
    problems = runtimecheck.logit_problems({"nmse": 1e-8, "kl_mean": 1e-8, "top1_confident": 0.4, "positions": 4,
                                            "confident_positions": 4}, "q8_0", "held-out texts")
    assert len(problems) == 3 and "above 2e-09 for q8_0" in problems[0], problems


def test_the_table_in_docs_export_md_is_this_table():
    import re
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[2] / "docs" / "export.md").read_text()
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:8]] for line in docs.splitlines()
            if line.startswith("| ") and line.count("|") == 8 and "NMSE" not in line}

    def number(cell: str) -> float:
        value = float(re.search(r"[0-9.]+(e-?[0-9]+)?", cell).group())
        return value / 100 if cell.endswith("%") else value

    for name, b in [*ggufbounds.TABLE.items(), ("k-quants (q4_k_m ...)", ggufbounds.KQUANT)]:
        cells = rows[name]
        assert [number(c) for c in cells[:5]] == [b.nmse, b.runtime_nmse, b.kl_mean, b.top1, b.ppl_margin], (name, cells)
        assert cells[5] == ("yes" if b.greedy else "not required"), (name, cells)
