"""The GGUF checks: the fast metadata reader agrees with gguf-py's, metadata mismatches are named by field, and the
model comparison's tolerances, greedy ties and perplexity margins decide as documented."""

import pytest
import torch

from nbutils.export import ggufcheck


def _write(path, **kv):
    from gguf import GGUFWriter

    w = GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("gpt2")
    w.add_token_list(kv.get("tokens", ["a", "b", "<|end|>"]))
    w.add_token_types([1, 1, 3])
    w.add_eos_token_id(kv.get("eos", 2))
    if "eot" in kv:
        w.add_eot_token_id(kv["eot"])
    w.add_pad_token_id(kv.get("pad", 0))
    w.add_add_bos_token(kv.get("add_bos", False))
    w.add_chat_template(kv.get("template", "{{ x }}"))
    w.add_array("test.floats", [0.5, 1.5])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    return path


def test_read_metadata_takes_the_fields_the_check_needs(tmp_path):
    meta = ggufcheck.read_metadata(_write(tmp_path / "m.gguf", eot=1))
    assert meta["stops"] == {"eos": 2, "eot": 1, "eom": None} and meta["tokens"] == ["a", "b", "<|end|>"]
    assert meta["pad"] == 0 and meta["add_bos"] is False and meta["chat_template"] == "{{ x }}"


def test_metadata_problems_name_each_field(tok):
    meta = {"stops": {"eos": tok.eos_token_id, "eot": None, "eom": None}, "pad": tok.pad_token_id,
            "chat_template": tok.chat_template, "add_bos": False,
            "tokens": tok.convert_ids_to_tokens(list(range(len(tok))))}
    assert ggufcheck.metadata_problems(meta, tok, [tok.eos_token_id], add_bos=False) == []
    wrong = {**meta, "stops": {"eos": tok.eos_token_id, "eot": 5, "eom": None}, "pad": 3, "chat_template": "other",
             "add_bos": True, "tokens": ["x", *meta["tokens"][1:]]}
    problems = " | ".join(ggufcheck.metadata_problems(wrong, tok, [tok.eos_token_id], add_bos=False))
    for field in ("eos/eot/eom_token_id", "padding_token_id", "chat_template", "tokens differs", "add_bos_token"):
        assert field in problems, field
    assert "at id 0" in problems


def _measured(logits, greedy, margins, nll=2.0):
    return {"logits": [torch.tensor(x) for x in logits], "greedy": greedy, "margins": margins, "nll": nll, "tokens": 1}


def test_compare_nmse_ties_and_perplexity():
    ref = _measured([[[10.0, 0.0]]], [[1, 2, 3]], [[5.0, 0.01, 5.0]])
    same = ggufcheck.compare(ref, _measured([[[10.1, 0.0]]], [[1, 2, 3]], [[5.0, 0.01, 5.0]]), "q8_0")
    assert same["ok"] and same["nmse"] == pytest.approx(0.005 / 25, rel=1e-4) and same["same_greedy"]
    tie = ggufcheck.compare(ref, _measured([[[10.0, 0.0]]], [[1, 7, 3]], [[0, 0, 0]]), "q8_0")
    assert tie["ok"] and tie["greedy_ties"] == [(0, 1, 0.01)] and not tie["same_greedy"]
    parted = ggufcheck.compare(ref, _measured([[[10.0, 0.0]]], [[9, 2, 3]], [[0, 0, 0]]), "q8_0")
    assert not parted["ok"] and "greedy" in parted["problems"][0]
    assert ggufcheck.compare(ref, _measured([[[10.0, 0.0]]], [[9, 2, 3]], [[0, 0, 0]]), "q4_k_m")["ok"]  # no greedy rule
    off = ggufcheck.compare(ref, _measured([[[11.0, 0.0]]], [[1, 2, 3]], [[0, 0, 0]], nll=2.5), "f16")
    assert len(off["problems"]) == 2 and "NMSE 0.02 > 1e-05" in off["problems"][0] and "perplexity" in off["problems"][1]


def test_nmse_is_free_of_the_logits_scale():
    ref, got = [torch.tensor([[3.0, -1.0, 0.5]])], [torch.tensor([[3.1, -1.0, 0.4]])]
    assert ggufcheck.nmse(got, ref) == pytest.approx(ggufcheck.nmse([g * 40 for g in got], [r * 40 for r in ref]))


@pytest.mark.parametrize("quant_type", ["q4_k_m", "q8_0"])
def test_nan_logits_and_perplexity_of_the_gguf_fail_naming_the_gguf(quant_type):
    """The review's repro: NaN everywhere passed q4_k_m (NaN > bound is False); q8_0 failed only on its greedy rule."""
    torch.manual_seed(0)
    ref = {"logits": [torch.randn(5, 50) * 5 for _ in range(3)], "greedy": [[1, 2, 3]] * 3,
           "margins": [[3.0, 3.0, 3.0]] * 3, "nll": 6.0, "tokens": 6}
    got = {"logits": [torch.full((5, 50), float("nan"))] * 3, "greedy": [[1, 2, 3]] * 3, "margins": [[0.0] * 3] * 3,
           "nll": float("nan"), "tokens": 6}
    result = ggufcheck.compare(ref, got, quant_type)
    assert not result["ok"] and len(result["problems"]) == 1
    assert result["problems"][0].startswith(f"the {quant_type} GGUF gives non-finite logits (NaN/inf) on check "
                                            "prompt(s) [1, 2, 3] and a loss of nan on the eval texts")


def test_a_nan_perplexity_alone_or_an_overflowing_merged_model_fails():
    ref = _measured([[[10.0, 0.0]]], [[1, 2, 3]], [[5.0, 5.0, 5.0]])
    nan_loss = ggufcheck.compare(ref, _measured([[[10.0, 0.0]]], [[1, 2, 3]], [[0, 0, 0]], nll=float("nan")), "q4_k_m")
    assert not nan_loss["ok"] and "a loss of nan on the eval texts" in nan_loss["problems"][0]
    merged_inf = _measured([[[float("inf"), 0.0]]], [[1, 2, 3]], [[5.0, float("nan"), 5.0]])
    result = ggufcheck.compare(merged_inf, _measured([[[10.0, 0.0]]], [[1, 2, 3]], [[0, 0, 0]]), "q4_k_m")
    assert not result["ok"] and result["problems"][0].startswith("the merged model gives non-finite logits")
    assert "export_merged=False" in result["problems"][0]
    huge = ggufcheck.compare(ref, _measured([[[10.0, 0.0]]], [[1, 2, 3]], [[0, 0, 0]], nll=1e4), "q4_k_m")
    assert not huge["ok"] and huge["perplexity"] == float("inf")  # math.exp raised past 709


def test_a_nan_gap_where_greedy_parts_is_no_tie():
    ref = _measured([[[10.0, 0.0]]], [[1, 2, 3]], [[5.0, float("nan"), 5.0]])
    agree, ties = ggufcheck.greedy_agrees(ref, _measured([[[10.0, 0.0]]], [[1, 7, 3]], [[0, 0, 0]]), 0.02)
    assert not agree and ties == []
