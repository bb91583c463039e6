"""04's GGUF step (nbutils.export.ggufbuild): the embedded default's reason, the SentencePiece file the converter
needs, and (integration) the converter's refusal of the embedded tokenizer. `_export_type` (04's GGUF step on a
family twin) serves tests/export/test_quantize.py.

Every family twin's GGUF, as 04 writes it in the family's chain, is checked in tests/test_families.py (converted,
verified, stop fields, Modelfile).
"""

import shutil
from types import SimpleNamespace

import pytest

CHATS = [[{"role": "user", "content": "name : bob ; city : paris. What is the city?"}],
         [{"role": "user", "content": "Write one line about a cat."}]]
ANSWERS = ["paris", "A cat sat on the warm mat."]


def _merged(folder, dest):
    """The twin as 04 would have merged it: the suite's tokenizer (pad, template) and the stop ids in generation_config."""
    from transformers import AutoTokenizer, GenerationConfig

    from nbutils.data import chatformat

    shutil.copytree(folder, dest, ignore=shutil.ignore_patterns("DONE", "tokenizer*"))
    tok = chatformat.prepare_tokenizer(AutoTokenizer.from_pretrained(folder))
    gen = GenerationConfig.from_pretrained(folder)
    gen.eos_token_id, gen.pad_token_id = chatformat.stop_ids(tok, SimpleNamespace(generation_config=gen)), tok.pad_token_id
    gen.save_pretrained(dest)
    tok.save_pretrained(dest)
    return AutoTokenizer.from_pretrained(dest)


def _export_type(name, folder, root, quant_type="q8_0", verify_runtime=False):
    """04's GGUF step on a family twin standing in for the merged model (no adapter, so no LoRA GGUF): ggufbuild's
    result, or the error it raised."""
    from nbutils.export import card, diskplan, ggufbuild

    disk = diskplan.make_plan(root / "out", root / "temp", {"gguf": 2**20, "merged": 2**20})
    tok = _merged(folder, disk.path("merged"))
    prompts = [tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in CHATS]
    facts = card.collect_facts(root, root, root, name)
    try:
        return ggufbuild.export(disk, quant_type, tok, prompts, [p + a for p, a in zip(prompts, ANSWERS)], str(folder),
                                root, facts, lora=False, chats=CHATS, answers=ANSWERS, verify_runtime=verify_runtime)
    except Exception as e:  # noqa: BLE001 -- reported by the test, with the family's name
        return {"error": f"{type(e).__name__}: {e}"}


def test_the_embedded_default_gets_its_reason_not_a_conversion(tmp_path):
    from nbutils.export import diskplan, ggufbuild

    disk = diskplan.make_plan(tmp_path / "out", tmp_path / "temp", {"gguf": 1, "merged": 1})
    result = ggufbuild.export(disk, "q8_0", None, [], [], "embedded", tmp_path, {})
    assert result == {"file": None, "reason": ggufbuild.EMBEDDED_REASON} and not (tmp_path / "out" / "gguf").exists()


@pytest.mark.integration
def test_the_converter_refuses_the_embedded_defaults_tokenizer_as_its_reason_says(embedded_dir, tmp_path):
    from nbutils.export import gguf

    why = gguf.convert(embedded_dir / "model", tmp_path / "m.gguf", "q8_0", gguf.find_converter(), {})
    assert "BPE pre-tokenizer was not recognized" in why and not list(tmp_path.iterdir())


def test_the_sentencepiece_file_comes_from_the_base_model_when_missing(tmp_path):
    from nbutils.export import ggufbuild

    base, merged = tmp_path / "base", tmp_path / "merged"
    base.mkdir()
    merged.mkdir()
    assert ggufbuild.sentencepiece_beside(merged, str(base)) is None  # the base has none either
    (base / "tokenizer.model").write_bytes(b"spm")
    assert ggufbuild.sentencepiece_beside(merged, str(base)) == str(base / "tokenizer.model")
    assert (merged / "tokenizer.model").read_bytes() == b"spm"
    assert ggufbuild.sentencepiece_beside(merged, str(base)) is None  # already there: left alone


def test_a_hub_base_models_sentencepiece_file_is_downloaded_when_the_cache_lacks_it(tmp_path, monkeypatch):
    """A fresh Kaggle session's cache holds what loading fetched (tokenizer.json), never tokenizer.model."""
    import huggingface_hub

    from nbutils.export import ggufbuild

    got = tmp_path / "hub" / "tokenizer.model"
    got.parent.mkdir()
    got.write_bytes(b"spm")
    asked = []
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda repo, name: None)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda repo, name, token=None: asked.append((repo, name)) or str(got))
    (tmp_path / "merged").mkdir()
    assert ggufbuild.sentencepiece_beside(tmp_path / "merged", "google/gemma-2-2b-it") == str(got)
    assert asked == [("google/gemma-2-2b-it", "tokenizer.model")] and (tmp_path / "merged" / "tokenizer.model").exists()

    def offline(repo, name, token=None):
        raise OSError("no internet")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    (tmp_path / "merged" / "tokenizer.model").unlink()
    assert ggufbuild.sentencepiece_beside(tmp_path / "merged", "google/gemma-2-2b-it") is None  # the converter says


def test_the_download_carries_the_hf_token_secret_the_model_load_had(tmp_path, monkeypatch, hf_token):
    """A gated Gemma on Kaggle: HF_TOKEN is a Kaggle secret, not in the environment, so huggingface_hub's own lookup
    finds none; the download gets it from the secret store, as modelsource.load does."""
    import huggingface_hub

    from nbutils.export import ggufbuild
    from nbutils.runtime import secrets

    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(secrets, "get_secret", lambda name, required=True: hf_token if name == "HF_TOKEN" else None)
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda repo, name: None)
    seen = {}
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda repo, name, **kw: seen.update(kw) or str(tmp_path))
    assert ggufbuild._hub_file("google/gemma-2-2b-it", "tokenizer.model") == tmp_path
    assert seen == {"token": hf_token}


def test_a_refusal_says_what_to_do_where_the_cause_is_known():
    from nbutils.export import ggufbuild

    for said in ("FileNotFoundError: File not found: /x/merged/tokenizer.model",
                 "Error: Missing /x/merged/tokenizer.model"):  # Gemma's converter, Phi-3's
        spm = ggufbuild.refused(said)
        assert "put the original model's tokenizer.model beside its config.json" in spm and "\n" not in spm
        assert "with a Hub id, run 04 with the internet on" in spm
    bpe = ggufbuild.refused("NotImplementedError: BPE pre-tokenizer was not recognized - update get_vocab_base_pre()")
    assert "BPE pre-tokenizer was not recognized" in bpe and "llama_cpp_dir" in bpe
    assert ggufbuild.refused("disk full") == "the converter refused this model: disk full"


@pytest.mark.integration
def test_an_adapter_gguf_is_kept_only_beside_a_model_gguf(twin, tmp_path):
    """The model's and the adapter's conversions run in one converter process: when the model's is refused, the
    adapter's file, written, is not left alone in the output; the refusal is the result's reason."""
    from nbutils.export import card, diskplan, gguf, ggufbuild

    fake = tmp_path / "llama.cpp"
    fake.mkdir()
    (fake / gguf.CONVERTER).write_text("raise NotImplementedError('BPE pre-tokenizer was not recognized')")
    (fake / gguf.LORA_CONVERTER).write_text("import sys; open(sys.argv[sys.argv.index('--outfile') + 1], 'w').write('x')")
    disk = diskplan.make_plan(tmp_path / "out", tmp_path / "temp", {"gguf": 2**20, "merged": 2**20, "adapter_gguf": 2**20})
    tok = _merged(twin("mistral-v0.3"), disk.path("merged"))
    result = ggufbuild.export(disk, "q8_0", tok, ["hi"], ["hi there"], "mistral", tmp_path, card.collect_facts(
        tmp_path, tmp_path, tmp_path, "mistral"), llama_cpp_dir=str(fake))
    assert result["file"] is None and "pre-tokenizer was not recognized" in result["reason"]
    assert disk.path("adapter_gguf").is_dir() and not list(disk.path("adapter_gguf").iterdir())


def _fake_llama_cpp(tmp_path, quantize_body: str):
    """A llama.cpp checkout whose converters write their input's name to --outfile and whose llama-quantize runs
    `quantize_body` (a shell line: $1 the f16 input, $2 the output)."""
    from nbutils.export import gguf, quantize

    root = tmp_path / "llama.cpp"
    (root / "build" / "bin").mkdir(parents=True)
    writes = "import sys; open(sys.argv[sys.argv.index('--outfile') + 1], 'w').write(sys.argv[1])"  # its input's name
    (root / gguf.CONVERTER).write_text(writes)
    (root / gguf.LORA_CONVERTER).write_text(writes)
    binary = root / "build" / "bin" / quantize.BINARY
    binary.write_text(f"#!/bin/sh\n{quantize_body}\n")
    binary.chmod(0o755)
    return root


def test_a_k_quant_converts_the_adapter_in_the_f16_run_and_keeps_no_f16(tmp_path):
    """q4_k_m: the converter writes f16 (and the adapter, in the same run), llama-quantize the k-quant from it."""
    from nbutils.export import gguf, ggufbuild

    root = _fake_llama_cpp(tmp_path, 'cp "$1" "$2"')
    (work := tmp_path / "work").mkdir()
    lora = gguf.lora_job(tmp_path / "adapter", tmp_path / "merged", tmp_path / "adapter-f16.gguf")
    made, note, whys = ggufbuild._convert(tmp_path / "merged", work, "q4_k_m", gguf.Converter(root, "test"), {}, [lora, None])
    assert made == work / "model-q4_k_m.gguf" and made.read_text() == str(tmp_path / "merged") and whys == [None, None]
    assert lora.out.read_text() == str(tmp_path / "adapter") and note == "llama-quantize found"
    assert sorted(p.name for p in work.iterdir()) == ["model-q4_k_m.gguf"]  # no f16, no partial


def test_a_failed_k_quant_leaves_neither_the_lora_gguf_nor_the_base_gguf_in_the_temp_folder(tmp_path):
    """llama-quantize fails (an error, a full disk) after the converter wrote the f16, the LoRA and the base GGUF in
    one run: no model GGUF, so the LoRA GGUF and the base GGUF (up to fp16 size) go with it, and the f16 too."""
    from nbutils.export import gguf, ggufbuild

    root = _fake_llama_cpp(tmp_path, 'echo "llama_model_quantize: failed to quantize: No space left on device"; exit 1')
    (work := tmp_path / "work").mkdir()
    lora = gguf.lora_job(tmp_path / "adapter", tmp_path / "merged", work / "adapter-f16.gguf")
    base = gguf.model_job(tmp_path / "base", work / "base-q8_0.gguf", "q8_0", {})
    made, note, whys = ggufbuild._convert(tmp_path / "merged", work, "q4_k_m", gguf.Converter(root, "test"), {},
                                          [lora, base])
    assert made is None and note.startswith("llama-quantize failed") and "No space left" in note
    assert list(work.iterdir()) == []  # no f16, no LoRA GGUF, no base-q8_0.gguf


def test_an_rslora_adapter_is_not_written_as_a_gguf_lora_that_llama_cpp_would_scale_wrongly(tmp_path):
    import json

    from nbutils.export import ggufbuild

    (tmp_path / "adapter_config.json").write_text(json.dumps({"r": 16, "lora_alpha": 16, "use_rslora": True}))
    assert "use_rslora=True" in ggufbuild.rslora(tmp_path) and "4x too weak" in ggufbuild.rslora(tmp_path)
    (tmp_path / "adapter_config.json").write_text(json.dumps({"r": 16, "lora_alpha": 16, "use_rslora": False}))
    assert ggufbuild.rslora(tmp_path) is None
