"""04's GGUF step (nbutils.export.ggufbuild): the embedded default's reason, the SentencePiece file the converter
needs, and (integration) every family twin through llama.cpp's real converter.

Twins with a real tokenizer (tests/twins/realvocab.py) must convert to q8_0 and pass verification (reloaded, logits,
greedy tokens, perplexity); the GGUF's eos/eot/eom fields must hold exactly the suite's stop ids and the Modelfile
one `PARAMETER stop` per stop token. The others either pass the same way or give a one-line reason.
"""

import multiprocessing
import os
import re
import shutil
from concurrent.futures import ProcessPoolExecutor
from types import SimpleNamespace

import pytest

from tests.twins import realvocab
from tests.twins.families import FAMILIES

CHATS = [[{"role": "user", "content": "name : bob ; city : paris. What is the city?"}],
         [{"role": "user", "content": "Write one line about a cat."}]]


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


def _export_type(name, folder, root, quant_type="q8_0"):
    """04's GGUF step on a family twin standing in for the merged model: ggufbuild's result, or the error it raised."""
    from nbutils.export import card, diskplan, ggufbuild

    disk = diskplan.make_plan(root / "out", root / "temp", {"gguf": 2**20, "merged": 2**20})
    tok = _merged(folder, disk.path("merged"))
    prompts = [tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in CHATS]
    facts = card.collect_facts(root, root, root, name)
    try:
        return ggufbuild.export(disk, quant_type, tok, prompts, [p + "paris" for p in prompts], str(folder), root,
                                facts, lora=False)
    except Exception as e:  # noqa: BLE001 -- reported by the test, with the family's name
        return {"error": f"{type(e).__name__}: {e}"}


def _export(name, folder, root):
    return _export_type(name, folder, root), str(root / "out" / "merged")


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


@pytest.fixture(scope="module")
def exported(twin, tmp_path_factory):
    """name -> (ggufbuild's result, the merged model's folder), two families at a time (processes: reading a GGUF's
    150k-token vocabulary is Python-bound, threads would take turns)."""
    root = tmp_path_factory.mktemp("gguf-families")
    folders = {name: twin(name) for name in FAMILIES}
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn")) as pool:
        runs = {n: pool.submit(_export, n, folders[n], root / n) for n in FAMILIES}
        return {n: f.result() for n, f in runs.items()}


@pytest.mark.integration
@pytest.mark.families
@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_family_converts_and_verifies_or_says_why_in_one_line(exported, name):
    from pathlib import Path

    from transformers import AutoTokenizer

    from nbutils.export import ggufbuild, ggufcheck

    result, merged = exported[name]
    tok = AutoTokenizer.from_pretrained(merged)
    assert "error" not in result, result.get("error")
    if name not in realvocab.VOCAB and not result.get("file"):
        assert result["reason"] and "\n" not in result["reason"] and "Traceback" not in result["reason"]
        return
    assert result.get("file"), f"{name} has a real tokenizer but no GGUF: {result.get('reason')}"
    check = result["verification"]
    assert check["ok"] and check["max_abs_diff"] <= check["tolerance"], check
    stop_ids = ggufbuild.stop_ids(tok, merged)  # the suite's, from the merged model's generation_config
    meta = ggufcheck.read_metadata(result["file"])
    assert sorted(v for v in meta["stops"].values() if v is not None) == sorted(set(stop_ids))
    text = Path(result["path"]).read_text()
    assert re.findall(r'^PARAMETER stop "(.*)"$', text, re.M) == [tok.convert_ids_to_tokens(i) for i in stop_ids]
    assert f"FROM ./{Path(result['file']).name}" in text
