"""GGUF conversion plumbing: which converter is used, how the stop ids fill eos/eot/eom, the writer hook, and
conversions that fail leaving one line and no file. The real converter runs in test_gguf_families.py."""

import tarfile
import textwrap

import pytest

from nbutils.export import gguf
from nbutils.runtime import llamacpp

FAKE = textwrap.dedent('''
    import sys
    from gguf import GGUFWriter
    out = sys.argv[sys.argv.index("--outfile") + 1]
    if "refuse" in sys.argv:
        raise NotImplementedError("BPE pre-tokenizer was not recognized - update get_vocab_base_pre()")
    w = GGUFWriter(out, "llama")
    w.add_eos_token_id(5)
    w.add_pad_token_id(0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    sys.stderr.write("Writing: 100%|##########| 1/1")  # a progress bar that ends without a newline, as tqdm's can
''')


def test_stop_ids_fill_eos_eot_eom_with_eos_kept():
    # Llama 3.2 instruct: EOS is <|eot_id|>; generation_config adds <|end_of_text|> and <|eom_id|>
    assert gguf.stop_fields(128009, 128009, [128009, 128001, 128008]) == {"eos": 128009, "eot": 128001, "eom": 128008}
    # Qwen2.5: <|im_end|> ends a turn and is EOS; <|endoftext|> too
    assert gguf.stop_fields(151645, 151645, [151645, 151643]) == {"eos": 151645, "eot": 151643}
    # Gemma: <eos> and <end_of_turn>
    assert gguf.stop_fields(1, 107, [107, 1]) == {"eos": 1, "eot": 107}
    with pytest.raises(ValueError, match="do not fit"):
        gguf.stop_fields(1, 2, [1, 2, 3, 4])


@pytest.fixture
def fake_converter(tmp_path):
    root = tmp_path / "llama.cpp"
    root.mkdir()
    (root / gguf.CONVERTER).write_text(FAKE)
    return gguf.Converter(root, "test")


def test_the_hook_writes_the_stop_fields_over_the_converters(fake_converter, tmp_path):
    from gguf import GGUFReader

    out = tmp_path / "m.gguf"
    assert gguf.convert(tmp_path, out, "q8_0", fake_converter, {"eos": 7, "eot": 9}) is None
    fields = GGUFReader(str(out)).fields
    assert fields["tokenizer.ggml.eos_token_id"].contents() == 7
    assert fields["tokenizer.ggml.eot_token_id"].contents() == 9
    assert "tokenizer.ggml.eom_token_id" not in fields and fields["tokenizer.ggml.padding_token_id"].contents() == 0


def test_a_refusal_is_one_line_and_leaves_no_file(fake_converter, tmp_path):
    out = tmp_path / "m.gguf"
    [why] = gguf.run_converters(fake_converter, [gguf.Job(gguf.CONVERTER, ["refuse"], out)])
    assert why == "NotImplementedError: BPE pre-tokenizer was not recognized - update get_vocab_base_pre()"
    (fake_converter.root / gguf.CONVERTER).write_text(
        "import sys; open(sys.argv[sys.argv.index('--outfile') + 1], 'w').write('half'); sys.exit('disk full')")
    assert gguf.convert(tmp_path, out, "q8_0", fake_converter, {}) == "disk full"
    assert list(tmp_path.glob("m.gguf*")) == []


def test_jobs_share_one_process_each_with_its_own_fields_and_outcome(fake_converter, tmp_path):
    """A model's and a LoRA's conversion run in one process (the converters' imports paid once): each job gets its
    own stop fields (none: the converter's own), its own file and its own refusal; a process that dies says so."""
    from gguf import GGUFReader

    first, refused, second = tmp_path / "a.gguf", tmp_path / "b.gguf", tmp_path / "c.gguf"
    jobs = [gguf.Job(gguf.CONVERTER, [], first, {"eos": 7}), gguf.Job(gguf.CONVERTER, ["refuse"], refused),
            gguf.Job(gguf.CONVERTER, [], second)]
    assert gguf.run_converters(fake_converter, jobs) == [None, "NotImplementedError: BPE pre-tokenizer was not "
                                                         "recognized - update get_vocab_base_pre()", None]
    assert GGUFReader(str(first)).fields["tokenizer.ggml.eos_token_id"].contents() == 7
    assert GGUFReader(str(second)).fields["tokenizer.ggml.eos_token_id"].contents() == 5  # the converter's own
    assert sorted(p.name for p in tmp_path.glob("*.gguf*")) == ["a.gguf", "c.gguf"]
    (fake_converter.root / gguf.CONVERTER).write_text("import os; print('loading', flush=True); os._exit(9)")
    whys = gguf.run_converters(fake_converter, [gguf.Job(gguf.CONVERTER, [], tmp_path / "d.gguf"),
                                                gguf.Job(gguf.CONVERTER, [], tmp_path / "e.gguf")])
    assert whys == ["loading (the converter process ended with exit code 9)"] * 2
    assert not list(tmp_path.glob("[de].gguf*"))


def test_converter_order_parameter_dataset_checkout_then_pinned_sdist(tmp_path, monkeypatch, fake_converter):
    monkeypatch.delenv("LLAMA_CPP_DIR", raising=False)
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")  # no ./llama.cpp here
    for var in ("KAGGLE_KERNEL_RUN_TYPE", "KAGGLE_URL_BASE", "KAGGLE_DATA_PROXY_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    assert "has no convert_hf_to_gguf.py" in gguf.find_converter(str(tmp_path / "nowhere"))
    assert gguf.find_converter(str(fake_converter.root)).origin == "llama_cpp_dir"
    monkeypatch.setattr(llamacpp, "converter_dir", lambda sources=False: (_ for _ in ()).throw(RuntimeError("offline")))
    assert "attach the nbutils Kaggle dataset" in gguf.find_converter(temp_root=tmp_path / "t")
    monkeypatch.setenv("LLAMA_CPP_DIR", str(fake_converter.root))
    assert gguf.find_converter(temp_root=tmp_path / "t").origin.startswith("the checkout")
    dataset = tmp_path / "input" / "qlora-nbutils"  # an attached dataset on Kaggle: the wheel and the archive
    dataset.mkdir(parents=True)
    (dataset / "nbutils-0.1-py3-none-any.whl").write_text("")
    with tarfile.open(dataset / llamacpp.ARCHIVE, "w:gz") as tar:
        tar.add(fake_converter.root / gguf.CONVERTER, arcname=f"llama.cpp/{gguf.CONVERTER}")
    monkeypatch.setenv("KAGGLE_KERNEL_RUN_TYPE", "Batch")
    monkeypatch.setenv("NBUTILS_INPUT_ROOT", str(tmp_path / "input"))
    found = gguf.find_converter(temp_root=tmp_path / "t")
    assert found.origin.startswith("the attached dataset") and (found.root / gguf.CONVERTER).read_text() == FAKE
    assert found.root.is_relative_to(tmp_path / "t")  # unpacked into the temp folder: inputs are read-only
