"""GGUF for llama.cpp and Ollama: llama.cpp's own converter run on the merged model, every stop token written.

Where the converter comes from, first found wins: `llama_cpp_dir` (a checkout you name), the attached Kaggle
dataset (it carries llama.cpp's converter, gguf-py and sources from the pinned llama-cpp-python sdist, so this
works with the internet off), $LLAMA_CPP_DIR or a checkout in the usual places, and last the pinned sdist itself
(nbutils.runtime.llamacpp: downloaded once from PyPI, no git). The converter writes f32, f16, bf16 and q8_0;
k-quants (q4_k_m, q5_k_m ...) go through llama-quantize (nbutils.export.quantize).

The converter writes only the EOS the tokenizer names; a chat model also stops on its end-of-turn token and on
every id of generation_config.eos_token_id. They go into the GGUF's eos/eot/eom fields (llama.cpp stops on all
three), set by a hook around the converter's writer (`python -m nbutils.export.gguf`), so a model that ended
its answers with <|im_end|> in training does not talk on forever in Ollama. The hook also writes add_bos_token
as the chat template has it (the suite tokenizes chats without adding BOS): one BOS in llama.cpp, as in training.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from nbutils.runtime import llamacpp
from nbutils.runtime.environment import detect_platform
from nbutils.runtime.install import find_dataset

CONVERTER, LORA_CONVERTER = "convert_hf_to_gguf.py", "convert_lora_to_gguf.py"
CONVERTER_TYPES = ("f32", "f16", "bf16", "q8_0")
SEARCH = ("/kaggle/working/llama.cpp", "/content/llama.cpp", "~/llama.cpp", "llama.cpp")
STOP_FIELDS = ("eos", "eot", "eom")  # tokenizer.ggml.<field>_token_id: llama.cpp ends generation on each


@dataclass
class Converter:
    root: Path  # the folder holding convert_hf_to_gguf.py and gguf-py/
    origin: str  # where it was found, for the printout and the summary


def _dataset_converter(temp_root: Path) -> Path | None:
    """The Kaggle dataset's llama.cpp archive, unpacked into the temp folder (inputs are read-only)."""
    platform = detect_platform()
    dataset = find_dataset(platform.input_root) if platform.name == "kaggle" else None
    archive = dataset / llamacpp.ARCHIVE if dataset else None
    return llamacpp.from_archive(archive, temp_root) if archive and archive.exists() else None


def find_converter(llama_cpp_dir: str = "", temp_root: str | Path | None = None) -> Converter | str:
    """The converter to use, or the reason there is none (a sentence saying what to do)."""
    if llama_cpp_dir:  # a folder the user named is not second-guessed
        root = Path(llama_cpp_dir).expanduser()
        return Converter(root, "llama_cpp_dir") if (root / CONVERTER).exists() else \
            f"llama_cpp_dir={llama_cpp_dir!r} has no {CONVERTER}: point it at a llama.cpp checkout, or leave it empty"
    temp_root = Path(temp_root) if temp_root else detect_platform().temp_root
    found = _dataset_converter(temp_root)
    if found:
        return Converter(found, f"the attached dataset ({llamacpp.ARCHIVE})")
    for c in (os.environ.get("LLAMA_CPP_DIR", ""), *SEARCH):
        if c and (Path(c).expanduser() / CONVERTER).exists():
            return Converter(Path(c).expanduser(), f"the checkout {c}")
    try:
        return Converter(llamacpp.converter_dir(), f"llama-cpp-python {llamacpp.VERSION} from PyPI (cached)")
    except RuntimeError as e:
        return (f"llama.cpp's converter is not at hand: attach the nbutils Kaggle dataset, turn the internet on, "
                f"or set llama_cpp_dir to a llama.cpp checkout ({str(e).splitlines()[0]})")


def stop_fields(eos_id: int | None, end_of_turn_id: int | None, stop_ids: list[int]) -> dict[str, int]:
    """eos/eot/eom -> token id so that together they hold every stop id: eos stays the tokenizer's EOS, eot the
    end-of-turn token when it differs, and the rest fill the free fields in order. Raises when they do not fit."""
    fields = {}
    if eos_id is not None:
        fields["eos"] = eos_id
    if end_of_turn_id is not None and end_of_turn_id != eos_id:
        fields["eot"] = end_of_turn_id
    rest = [i for i in dict.fromkeys(stop_ids) if i not in fields.values()]
    for name in STOP_FIELDS:
        if name not in fields and rest:
            fields[name] = rest.pop(0)
    if rest:
        raise ValueError(f"{len(stop_ids)} stop ids {stop_ids} do not fit GGUF's eos/eot/eom token fields")
    return fields


def _tail(text: str, lines: int = 1) -> str:
    kept = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(kept[-lines:]) if kept else "(no output)"


def run_converter(converter: Converter, script: str, args: list[str], fields: dict | None = None) -> str | None:
    """Run one of llama.cpp's converters through the stop-token hook; None when it succeeded, else its last line."""
    cmd = [sys.executable, "-m", "nbutils.export.gguf", json.dumps(fields or {}), str(converter.root / script), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if proc.returncode == 0:
        return None
    return _tail(proc.stderr or proc.stdout)


def convert(merged_dir: str | Path, out_file: str | Path, outtype: str, converter: Converter, fields: dict) -> str | None:
    """merged folder -> out_file (written as .partial, renamed when complete); None, or why the converter refused."""
    out_file = Path(out_file)
    partial = out_file.with_name(out_file.name + ".partial")
    try:
        why = run_converter(converter, CONVERTER, [str(merged_dir), "--outfile", str(partial), "--outtype", outtype],
                            fields)
        if why is None:
            os.replace(partial, out_file)
        return why
    finally:
        partial.unlink(missing_ok=True)


def convert_lora(adapter_dir: str | Path, base_dir: str | Path, out_file: str | Path, converter: Converter,
                 outtype: str = "f16") -> str | None:
    """The adapter alone as a GGUF LoRA for llama.cpp's `--lora` (on a GGUF of the base model); None or why not."""
    out_file = Path(out_file)
    partial = out_file.with_name(out_file.name + ".partial")
    try:
        why = run_converter(converter, LORA_CONVERTER, [str(adapter_dir), "--base", str(base_dir),
                                                        "--outfile", str(partial), "--outtype", outtype])
        if why is None:
            os.replace(partial, out_file)
        return why
    finally:
        partial.unlink(missing_ok=True)


def _hooked(fields: dict) -> None:
    """Make the converter's writer carry `fields` over whatever it found: eos/eot/eom as tokenizer.ggml.<name>_token_id
    (a stop field left out is removed), add_bos as tokenizer.ggml.add_bos_token."""
    from gguf import GGUFValueType, GGUFWriter
    from gguf.gguf_writer import GGUFValue

    original = GGUFWriter.write_header_to_file

    def write_header_to_file(self, *args, **kwargs):
        kv = self.kv_data[0]
        for name in STOP_FIELDS:
            kv.pop(f"tokenizer.ggml.{name}_token_id", None)
            if name in fields:
                kv[f"tokenizer.ggml.{name}_token_id"] = GGUFValue(int(fields[name]), GGUFValueType.UINT32)
        if "add_bos" in fields:
            kv["tokenizer.ggml.add_bos_token"] = GGUFValue(bool(fields["add_bos"]), GGUFValueType.BOOL)
        return original(self, *args, **kwargs)

    GGUFWriter.write_header_to_file = write_header_to_file


# The pinned converter reads a few config keys under their transformers-4 names; transformers 5 writes them nested.
LEGACY_HPARAMS = {"rotary_pct": ("rope_parameters", "partial_rotary_factor")}  # GPT-NeoX


def _legacy_hparams() -> None:
    """Give the converter the transformers-4 names it reads, from where transformers 5 keeps them."""
    from conversion.base import ModelBase

    original = ModelBase.load_hparams

    def load_hparams(dir_model, is_mistral_format):
        hparams = original(dir_model, is_mistral_format)
        for old, (group, new) in LEGACY_HPARAMS.items():
            if old not in hparams and new in (hparams.get(group) or {}):
                hparams[old] = hparams[group][new]
        return hparams

    ModelBase.load_hparams = staticmethod(load_hparams)


def main(argv: list[str]) -> None:
    """`python -m nbutils.export.gguf FIELDS_JSON SCRIPT ARGS...`: run SCRIPT as __main__ with the vendored gguf-py."""
    import runpy

    fields, script, args = json.loads(argv[0]), Path(argv[1]), argv[2:]
    # The script's folder and its gguf-py first, as `python convert_hf_to_gguf.py` would have them: the hook
    # must patch the very gguf module the converter imports, not a pip-installed one.
    sys.path[:0] = [str(script.parent), str(script.parent / "gguf-py")]
    if fields:
        _hooked(fields)
    if (script.parent / "conversion").is_dir():
        _legacy_hparams()
    sys.argv = [str(script), *args]
    runpy.run_path(str(script), run_name="__main__")
    # The writer has closed its file (and the GGUF is read back before it is kept): skip the interpreter's teardown,
    # seconds of garbage collection once torch is loaded.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
