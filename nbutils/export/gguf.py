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
as the chat template has it (the suite tokenizes chats without adding BOS): one BOS in llama.cpp, as in training;
and, for a SentencePiece vocabulary, add_space_prefix as the tokenizer has it after a special token (`space_prefix`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from nbutils.defaults import is_auto
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


def find_converter(llama_cpp_dir: str = "auto", temp_root: str | Path | None = None) -> Converter | str:
    """The converter to use, or the reason there is none (a sentence saying what to do)."""
    if llama_cpp_dir and not is_auto(llama_cpp_dir):  # a folder the user named is not second-guessed
        root = Path(llama_cpp_dir).expanduser()
        return Converter(root, "llama_cpp_dir") if (root / CONVERTER).exists() else \
            f"llama_cpp_dir={llama_cpp_dir!r} has no {CONVERTER}: point it at a llama.cpp checkout, or leave it \"auto\""
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


def space_prefix(tokenizer) -> bool | None:
    """For a SentencePiece-style vocabulary ("▁" stands for a space): whether the tokenizer puts "▁" before the text
    after a special token. llama.cpp's add_space_prefix (on unless the GGUF says otherwise) puts it after every
    special token; Phi-3.5's and Llama 2's tokenizers (prepend_scheme "first") put it only at the very start, so a
    chat, which starts with a special token, tokenized in llama.cpp got a "▁" after every <|user|> and <|end|> the
    model never saw in training. None for other vocabularies (byte-level BPE: llama.cpp does not read the flag)."""
    words = tokenizer.convert_ids_to_tokens(tokenizer("a b", add_special_tokens=False).input_ids)
    special = next((t for t in tokenizer.all_special_tokens if t), None)
    if special is None or not any(w.startswith("\u2581") for w in words):
        return None
    after = tokenizer.convert_ids_to_tokens(tokenizer(f"{special}a", add_special_tokens=False).input_ids)
    return len(after) > 1 and after[1].startswith("\u2581")


def _tail(text: str, lines: int = 1) -> str:
    kept = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(kept[-lines:]) if kept else "(no output)"


@dataclass
class Job:
    """One run of a llama.cpp converter: its script (CONVERTER or LORA_CONVERTER), the arguments before
    `--outfile`, the file it writes and the stop fields the writer hook sets (none for a LoRA)."""
    script: str
    args: list[str]
    out: Path
    fields: dict = field(default_factory=dict)


def model_job(merged_dir: str | Path, out_file: str | Path, outtype: str, fields: dict) -> Job:
    """The merged model as a GGUF of `outtype`, carrying `fields` (stop_fields, add_bos)."""
    return Job(CONVERTER, [str(merged_dir), "--outtype", outtype], Path(out_file), fields)


def lora_job(adapter_dir: str | Path, base_dir: str | Path, out_file: str | Path, outtype: str = "f16") -> Job:
    """The adapter alone as a GGUF LoRA for llama.cpp's `--lora` (on a GGUF of the base model)."""
    return Job(LORA_CONVERTER, [str(adapter_dir), "--base", str(base_dir), "--outtype", outtype], Path(out_file))


def _partial(out: Path) -> Path:
    return out.with_name(out.name + ".partial")


def run_converters(converter: Converter, jobs: list[Job]) -> list[str | None]:
    """Run the jobs one after another in one process (the converters import torch and transformers: seconds, paid
    once); per job None when it wrote its file (written as `.partial`, renamed when complete), else the last line it
    printed. No partial file stays."""
    spec = [{"script": str(converter.root / j.script), "args": [*j.args, "--outfile", str(_partial(j.out))],
             "fields": j.fields} for j in jobs]
    try:
        proc = subprocess.run([sys.executable, "-m", "nbutils.export.gguf", json.dumps(spec)], capture_output=True,
                              text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        # stderr: each job's output, then JOB_END and its outcome; a process that died ends without them
        pieces = re.split(rf"^{re.escape(JOB_END)} (ok|failed)\n", proc.stderr, flags=re.M)
        outcomes = dict(enumerate(zip(pieces[1::2], pieces[0::2])))
        died = f"{_tail(pieces[-1] or proc.stdout)} (the converter process ended with exit code {proc.returncode})"
        whys = []
        for i, job in enumerate(jobs):
            status, said = outcomes.get(i, ("died", ""))
            if status == "ok":
                os.replace(_partial(job.out), job.out)
                whys.append(None)
            else:  # a converter that printed its error (not logged it) said it on stdout
                whys.append(died if status == "died" else _tail(said if said.strip() else proc.stdout))
        return whys
    finally:
        for job in jobs:
            _partial(job.out).unlink(missing_ok=True)


def convert(merged_dir: str | Path, out_file: str | Path, outtype: str, converter: Converter, fields: dict) -> str | None:
    """merged folder -> out_file; None, or why the converter refused."""
    return run_converters(converter, [model_job(merged_dir, out_file, outtype, fields)])[0]


# The stop fields the writer hook sets, for the job running now (one process runs a model's and a LoRA's jobs).
_FIELDS: dict = {}


def _hooked() -> None:
    """Make the converter's writer carry the running job's fields over whatever it found: eos/eot/eom as
    tokenizer.ggml.<name>_token_id (a stop field left out is removed), add_bos as tokenizer.ggml.add_bos_token,
    add_space_prefix (unless None) as tokenizer.ggml.add_space_prefix.
    A job without fields (a LoRA) is written as the converter has it."""
    from gguf import GGUFValueType, GGUFWriter
    from gguf.gguf_writer import GGUFValue

    original = GGUFWriter.write_header_to_file

    def write_header_to_file(self, *args, **kwargs):
        kv = self.kv_data[0]
        for name in STOP_FIELDS if _FIELDS else ():
            kv.pop(f"tokenizer.ggml.{name}_token_id", None)
            if name in _FIELDS:
                kv[f"tokenizer.ggml.{name}_token_id"] = GGUFValue(int(_FIELDS[name]), GGUFValueType.UINT32)
        if "add_bos" in _FIELDS:
            kv["tokenizer.ggml.add_bos_token"] = GGUFValue(bool(_FIELDS["add_bos"]), GGUFValueType.BOOL)
        if _FIELDS.get("add_space_prefix") is not None:
            kv["tokenizer.ggml.add_space_prefix"] = GGUFValue(bool(_FIELDS["add_space_prefix"]), GGUFValueType.BOOL)
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


JOB_END = "[nbutils.export.gguf] job"  # on stderr after each job's output, with "ok" or "failed"


def _run_script(script: str) -> bool:
    """Run SCRIPT as __main__; False (its error printed, as the interpreter would) when it failed."""
    import runpy
    import traceback

    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        if e.code in (None, 0):
            return True
        if not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
        return False
    except Exception:  # whatever the converter raises is its refusal, reported by its last line
        traceback.print_exc()
        return False
    return True


def main(argv: list[str]) -> None:
    """`python -m nbutils.export.gguf JOBS_JSON`: run each job's script as __main__, in order, with the vendored
    gguf-py; each job's output on stderr ends with a JOB_END line."""
    jobs = json.loads(argv[0])
    root = Path(jobs[0]["script"]).parent
    # The scripts' folder and its gguf-py first, as `python convert_hf_to_gguf.py` would have them: the hook
    # must patch the very gguf module the converter imports, not a pip-installed one.
    sys.path[:0] = [str(root), str(root / "gguf-py")]
    _hooked()
    if (root / "conversion").is_dir():
        _legacy_hparams()
    for job in jobs:
        _FIELDS.clear()
        _FIELDS.update(job["fields"])
        sys.argv = [job["script"], *job["args"]]
        ok = _run_script(job["script"])
        sys.stdout.flush()
        # on a line of its own, even after a progress bar that ended without a newline
        print(f"\n{JOB_END} {'ok' if ok else 'failed'}", file=sys.stderr, flush=True)
    # The writers have closed their files (and each GGUF is read back before it is kept): skip the interpreter's
    # teardown, seconds of garbage collection once torch is loaded.
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
