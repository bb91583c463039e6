"""Reading a GGUF back: the header reader agrees with gguf-py's, hyper-parameters are compared with the merged
config by name, and the converter's GPT-NeoX qkv reordering is undone exactly."""

import pytest
import torch

from nbutils.export import ggufload


def _write(path, nested=False):
    from gguf import GGUFWriter

    w = GGUFWriter(str(path), "qwen3")
    w.add_token_list(["a", "b", "<|end|>"])
    w.add_token_types([1, 1, 3])
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)
    w.add_key_length(16)
    w.add_rope_freq_base(1e6)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_array("test.floats", [0.5, 1.5])
    w.add_token_scores([0.0, -1.0, 0.0])
    w.add_token_merges(["a b", "ab <|end|>"])
    w.add_array("test.empty", [])
    if nested:  # gguf-py flattens an array of arrays (read_kv keeps it nested); the plain reader does as gguf-py
        w.add_array("test.nested", [[1, 2], [3]])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    return path


def test_read_kv_agrees_with_gguf_py(tmp_path):
    from gguf import GGUFReader

    path = _write(tmp_path / "m.gguf")
    ours = ggufload.read_kv(path)
    fields = {k: f for k, f in GGUFReader(str(path)).fields.items() if not k.startswith("GGUF.")}  # header, not kv
    assert set(ours) == set(fields)
    for key, field in fields.items():
        theirs = field.contents()
        assert ours[key] == (list(theirs) if isinstance(theirs, list) else theirs), key
    (tmp_path / "text.gguf").write_text("hello, not a GGUF file at all")
    with pytest.raises(ValueError, match="not a GGUF"):
        ggufload.read_kv(tmp_path / "text.gguf")
    (tmp_path / "empty.gguf").write_bytes(b"")
    with pytest.raises(ValueError, match="not a GGUF"):
        ggufload.read_kv(tmp_path / "empty.gguf")
    (tmp_path / "cut.gguf").write_bytes(path.read_bytes()[:100])  # a copy cut inside its header
    with pytest.raises(ValueError, match="truncated"):
        ggufload.read_kv(tmp_path / "cut.gguf")


def test_the_plain_view_reader_parses_as_gguf_py_does_and_transformers_gets_it_only_for_its_call(tmp_path):
    import gguf
    import numpy as np

    path = _write(tmp_path / "m.gguf", nested=True)
    plain, theirs = ggufload.reader(path), gguf.GGUFReader(str(path))
    assert type(plain.data) is np.ndarray and isinstance(theirs.data, np.memmap)  # a view: the file is not copied
    assert not plain.data.flags.writeable and isinstance(plain.data.base, np.memmap)  # the file's map, not a copy
    assert {k: f.contents() for k, f in plain.fields.items()} == {k: f.contents() for k, f in theirs.fields.items()}
    for key, field in theirs.fields.items():  # the same parts, as transformers reads them (parts[data[i]])
        ours = plain.fields[key]
        assert (ours.offset, ours.data, ours.types) == (field.offset, field.data, field.types), key
        assert [(p.dtype, p.tolist()) for p in ours.parts] == [(p.dtype, p.tolist()) for p in field.parts], key
    original = gguf.GGUFReader
    with pytest.raises(RuntimeError), ggufload.plain_reader_for_transformers():
        from gguf import GGUFReader  # what transformers does at its call

        assert GGUFReader is type(plain)
        raise RuntimeError("the load failed")
    assert gguf.GGUFReader is original


def test_hyperparameters_are_compared_by_name(tmp_path):
    from types import SimpleNamespace

    kv = ggufload.read_kv(_write(tmp_path / "m.gguf"))
    same = SimpleNamespace(head_dim=16, rope_parameters={"rope_theta": 1e6}, rms_norm_eps=1e-6, hidden_size=None)
    assert ggufload.hparam_problems(kv, same) == []
    other = SimpleNamespace(head_dim=128, rope_parameters={"rope_theta": 1e4}, rms_norm_eps=1e-6)
    problems = ggufload.hparam_problems(kv, other)
    assert len(problems) == 2 and "qwen3.attention.key_length is 16, the merged config's head_dim is 128" in problems


def test_gptneox_qkv_reordering_is_undone():
    from types import SimpleNamespace

    heads, embed = 4, 16
    w = torch.randn(3 * embed, embed)
    # what the converter does (conversion/gptneox.py): per-head [q, k, v] blocks -> all q, all k, all v
    qkv = w.reshape(heads, 3, embed // heads, embed)
    converted = torch.cat([qkv[:, i].reshape(-1, embed) for i in range(3)], dim=0)
    config = SimpleNamespace(num_attention_heads=heads, hidden_size=embed)
    assert torch.equal(ggufload._gptneox_qkv("gpt_neox.layers.0.attention.query_key_value.weight", converted, config), w)
    bias = torch.randn(3 * embed)
    converted_bias = torch.cat([bias.reshape(heads, 3, embed // heads)[:, i].reshape(-1) for i in range(3)])
    assert torch.equal(ggufload._gptneox_qkv("x.attention.query_key_value.bias", converted_bias, config), bias)


def test_load_names_a_hyperparameter_that_differs_before_reading_any_weight(tmp_path):
    from transformers import Qwen3Config

    merged = tmp_path / "merged"
    Qwen3Config(head_dim=16, rope_theta=1e4, rms_norm_eps=1e-6, hidden_size=64, num_attention_heads=4,
                num_key_value_heads=4, num_hidden_layers=1, intermediate_size=128, vocab_size=3).save_pretrained(merged)
    with pytest.raises(ggufload.GGUFLoadError, match="rope.freq_base is 1000000.0, the merged config's rope_theta"):
        ggufload.load(_write(tmp_path / "m.gguf"), merged)  # a header only: weights would fail otherwise
