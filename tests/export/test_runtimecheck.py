"""04's runtime check in llama.cpp itself (the probe built from the pinned sources, built here once when no build is
cached: minutes) on the Phi-3.5 twin with its real SentencePiece tokenizer, standing in for the merged model: its
f16 GGUF as 04 writes it passes every part, and copies made wrong on purpose fail naming the cause: a stop token
removed from the metadata (`<|assistant|>`, which llama.cpp knows by no name), the BOS flag flipped, another
family's chat template. The merged model's side is computed once and compared with each copy. Last, 04's GGUF step
end to end with a bound no conversion meets: the GGUF is kept, marked unverified with the reason.

One test: the suite's only one that builds or runs llama.cpp's probe (the chains and 04's notebook tests pass
verify_runtime=False), so CI pays for the runtime check once."""

import pytest

from tests.export.test_ggufbuild import ANSWERS, CHATS, _merged

pytestmark = pytest.mark.integration
FAMILY = "phi-3.5-mini"


@pytest.fixture(scope="module")
def probe():
    from nbutils.export import llamaruntime
    from nbutils.runtime import llamacpp

    path, note = llamaruntime.probe(lambda: llamacpp.converter_dir(sources=True))
    if path is None:
        pytest.skip(f"llama.cpp's runtime cannot be built here: {note}")
    return path


@pytest.fixture(scope="module")
def made(twin, tmp_path_factory, probe):
    """(the merged side, its f16 GGUF as 04 writes it, the runtime plan, the GGUF's stop fields)."""
    from nbutils.export import gguf, ggufbuild, ggufload, runtimecheck

    root = tmp_path_factory.mktemp("runtime")
    tok = _merged(twin(FAMILY), root / "merged")
    ggufbuild.sentencepiece_beside(root / "merged", str(twin(FAMILY)))  # as 04 does: the converter reads it
    stops, written = ggufbuild.written_fields(tok, root / "merged")
    out = root / "model-f16.gguf"
    assert gguf.convert(root / "merged", out, "f16", gguf.find_converter(), written) is None
    fields = {k: v for k, v in written.items() if k in gguf.STOP_FIELDS}
    texts = [tok.apply_chat_template([*c, {"role": "assistant", "content": a}], tokenize=False)
             for c, a in zip(CHATS, ANSWERS)]
    plan = runtimecheck.plan(tok, CHATS, ANSWERS, texts, stops, written["add_bos"])
    return runtimecheck.merged_side(ggufload.load_merged(root / "merged"), plan, keep_logits=True), out, plan, fields


def _check(probe, made, gguf_file, tmp_path):
    from nbutils.export import ggufruntime

    merged, _, plan, _ = made
    return ggufruntime.check_file(probe, gguf_file, merged, plan, "f16", tmp_path / "work")


def _broken(made, tmp_path, **changes):
    """A copy of the GGUF with metadata set (key=value) or removed (key=None), by gguf-py's own metadata copier."""
    from gguf import GGUFReader, GGUFValueType, GGUFWriter
    from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata

    reader = GGUFReader(made[1])
    tmp_path.mkdir(parents=True, exist_ok=True)
    out = tmp_path / "broken.gguf"
    arch = reader.get_field("general.architecture").contents()
    keys = {k.replace("__", "."): v for k, v in changes.items()}
    kinds = {bool: GGUFValueType.BOOL, str: GGUFValueType.STRING}
    new = {k: MetadataDetails(kinds[type(v)], v) for k, v in keys.items() if v is not None}
    copy_with_new_metadata(reader, GGUFWriter(out, arch, endianess=reader.endianess), new,
                           [k for k, v in keys.items() if v is None])
    return out


def _passes(probe, made, tmp_path):
    """The GGUF as 04 writes it passes every part."""
    _, gguf_file, plan, _ = made
    runtime = _check(probe, made, gguf_file, tmp_path)
    assert runtime["ok"], runtime["problems"]
    assert runtime["tokens"]["same_ids"] == len(CHATS) and runtime["template"]["equal"] == len(plan.conversations) == 2
    assert runtime["stops"]["confirmed"] == plan.stop_ids and runtime["greedy"]["same"] + len(runtime["greedy"]["ties"]) == 2
    assert runtime["logits"]["nmse"] <= runtime["logits"]["bounds"]["nmse"] and not (tmp_path / "work" / "runtime-gguf").exists()


def _stop_removed(probe, made, tmp_path):
    _, _, plan, fields = made
    name, removed = list(fields.items())[-1]  # eom: <|assistant|>, in Phi-3.5's generation_config.eos_token_id
    runtime = _check(probe, made, _broken(made, tmp_path, **{f"tokenizer__ggml__{name}_token_id": None}), tmp_path)
    named = [p for p in runtime["problems"] if f"{removed} {plan.piece(removed)!r}" in p]
    assert not runtime["ok"] and named and "llama.cpp does not end generation on" in named[0], runtime["problems"]


def _bos_flipped(probe, made, tmp_path):
    _, _, plan, _ = made
    runtime = _check(probe, made, _broken(made, tmp_path, tokenizer__ggml__add_bos_token=not plan.template_bos), tmp_path)
    assert not runtime["ok"] and any("BOS token(s)" in p and "add_bos_token is" in p for p in runtime["problems"]), \
        runtime["problems"]


def _template_swapped(probe, made, twin, tmp_path):
    from transformers import AutoTokenizer

    llama = AutoTokenizer.from_pretrained(twin("llama-3.2-instruct")).chat_template
    runtime = _check(probe, made, _broken(made, tmp_path, tokenizer__chat_template=llama), tmp_path)
    template = [p for p in runtime["problems"] if "the chat template renders differently: line 1 is" in p]
    assert not runtime["ok"] and template and "<|start_header_id|>" in template[0] and "<|user|>" in template[0], \
        runtime["problems"]


def _kept_unverified(twin, tmp_path, monkeypatch):
    """04's GGUF step end to end, with an NMSE bound no conversion meets in llama.cpp: the file stays, the summary's
    gguf says verified false and why, the card and the Modelfile say so too; every other part passed."""
    import dataclasses
    from pathlib import Path

    from nbutils.export import ggufbounds
    from tests.export.test_ggufbuild import _export_type

    tmp_path.mkdir(parents=True)
    monkeypatch.setitem(ggufbounds.TABLE, "f16", dataclasses.replace(ggufbounds.TABLE["f16"], runtime_nmse=0.0))
    result = _export_type(FAMILY, twin(FAMILY), tmp_path, "f16", verify_runtime=True)
    assert result["file"] and Path(result["file"]).exists() and result["verification"]["ok"], result
    assert result["verified"] is False and result["unverified"].startswith("held-out texts: NMSE"), result["unverified"]
    assert len(result["runtime"]["problems"]) == 1, result["runtime"]["problems"]  # tokens, template, greedy, stops passed
    folder = Path(result["file"]).parent
    assert f"**Unverified in llama.cpp**: {result['unverified']}" in (folder / "README.md").read_text()
    assert (folder / "Modelfile").read_text().splitlines()[2] == f"# FAILED in llama.cpp: {result['unverified']}"


def test_04s_gguf_passes_in_llama_cpp_and_copies_made_wrong_fail_naming_the_cause(probe, made, twin, tmp_path,
                                                                                  monkeypatch):
    """The suite's one test that runs llama.cpp (CI runs the runtime check on this twin alone; the probe's build,
    minutes when no build is cached, happens here): one merged side, one probe, every case in turn."""
    _passes(probe, made, tmp_path / "as-written")
    _stop_removed(probe, made, tmp_path / "stop-removed")
    _bos_flipped(probe, made, tmp_path / "bos-flipped")
    _template_swapped(probe, made, twin, tmp_path / "template-swapped")
    _kept_unverified(twin, tmp_path / "export", monkeypatch)
