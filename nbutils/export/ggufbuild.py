"""04's GGUF step: convert the merged model (and the adapter), verify each file, write the Modelfile and the card,
and put them where the disk plan says. Each part is in its own module; this one runs them in order.

The GGUF is written in the temp folder (as a `.partial`, renamed when complete), verified there, then moved into
the output when the plan keeps it: its folder (the GGUF, the Modelfile, the card) is built whole and swapped in
(`atomic.folder`). A refused conversion or a failed check leaves nothing under a final name; a full disk during
the conversion is the suite's disk-full error, not a skip.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from nbutils import embedded
from nbutils.data import chatformat
from nbutils.export import card, diskplan, gguf, ggufcheck, modelfile, quantize
from nbutils.train import atomic, diskspace, faultpoints

EMBEDDED_REASON = ("the embedded default's tokenizer is a small BPE of its own, which llama.cpp's converter does not "
                   "recognise ('BPE pre-tokenizer was not recognized'): no GGUF for it. A real model gets one.")


def stop_ids(tokenizer, merged_dir: str | Path) -> list[int]:
    """The suite's stop ids for the merged model: end of turn, EOS and its generation_config.eos_token_id."""
    from transformers import GenerationConfig

    return chatformat.stop_ids(tokenizer, SimpleNamespace(generation_config=GenerationConfig.from_pretrained(merged_dir)))


SENTENCEPIECE = "tokenizer.model"


def sentencepiece_beside(merged_dir: Path, base_model: str) -> str | None:
    """The converter reads SentencePiece vocabularies (Gemma, Phi-3, Llama 2) from tokenizer.model, which a fast
    tokenizer's save_pretrained does not write: copied from the base model (the suite adds no tokens) when missing."""
    import shutil

    if (merged_dir / SENTENCEPIECE).exists():
        return None
    base = Path(embedded.resolve_model(base_model))
    found = base / SENTENCEPIECE if base.is_dir() else None
    if found is None:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(base_model, SENTENCEPIECE)
        found = Path(cached) if isinstance(cached, str) else None
    if found is None or not found.exists():
        return None
    shutil.copyfile(found, merged_dir / SENTENCEPIECE)
    return str(found)


def refused(why: str) -> str:
    """The converter's last line, with what to do where the suite knows the cause."""
    if SENTENCEPIECE in why and "not found" in why.lower():
        return (f"the converter reads this family's SentencePiece vocabulary from {SENTENCEPIECE}, which neither the "
                f"merged model nor its base model's folder has: put the original model's {SENTENCEPIECE} beside "
                f"base_model's config.json and run 04 again (the converter said: {why})")
    if "pre-tokenizer was not recognized" in why:
        return (f"the converter refused this model: {why} (llama.cpp knows a tokenizer's pre-tokenizer by a hash "
                "of how it splits a test text; a newer llama.cpp may know this one: set llama_cpp_dir to it)")
    return f"the converter refused this model: {why}"


def _run(converter: gguf.Converter, model: gguf.Job, lora: gguf.Job | None) -> tuple[str | None, str | None]:
    """The model's job and the LoRA's (if any) in one converter process: (the model's refusal, the LoRA's)."""
    whys = gguf.run_converters(converter, [model, lora] if lora else [model])
    return whys[0], whys[1] if lora else None


def _convert(merged_dir: Path, work: Path, quant_type: str, converter: gguf.Converter, fields: dict,
             lora: gguf.Job | None) -> tuple[Path | None, str, str | None]:
    """The GGUF in `work`: straight from the converter, or f16 then llama-quantize; (file, note, the LoRA job's
    refusal) or (None, why, None). The LoRA job, if any, runs in the same converter process as the model's."""
    final = work / f"model-{quant_type}.gguf"
    if quant_type in gguf.CONVERTER_TYPES:
        why, lora_why = _run(converter, gguf.model_job(merged_dir, final, quant_type, fields), lora)
        return (None, refused(why), None) if why else (final, "", lora_why)
    binary, note = quantize.find_quantize(converter.root), "llama-quantize found"
    if binary is None:
        print(f"[gguf] {quant_type} needs llama-quantize: building it from the pinned llama.cpp sources (minutes)", flush=True)
        binary, note = quantize.build(_sources(converter))
        if binary is None:
            return None, note, None
    f16 = work / "model-f16.gguf"
    try:
        why, lora_why = _run(converter, gguf.model_job(merged_dir, f16, "f16", fields), lora)
        if why:
            return None, refused(why), None
        why = quantize.quantize(binary, f16, final, quant_type)
        return (None, f"llama-quantize failed: {why}", None) if why else (final, note, lora_why)
    finally:
        f16.unlink(missing_ok=True)


def _sources(converter: gguf.Converter) -> Path:
    """llama.cpp's C++ sources: beside the converter when it came with them, else from the pinned sdist."""
    from nbutils.runtime import llamacpp

    return converter.root if (converter.root / "CMakeLists.txt").exists() else llamacpp.converter_dir(sources=True)


def _lora_job(disk: diskplan.DiskPlan, adapter_dir: Path) -> gguf.Job | None:
    """The adapter as a GGUF LoRA (f16) for llama.cpp's --lora, where the disk plan keeps one."""
    folder = disk.path("adapter_gguf")
    if folder is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    return gguf.lora_job(adapter_dir, disk.path("merged"), folder / "adapter-f16.gguf")


def _discard(job: gguf.Job | None) -> None:
    """An adapter GGUF comes with a verified model GGUF, or not at all (both are converted in one process)."""
    if job is not None:
        job.out.unlink(missing_ok=True)


def _lora(job: gguf.Job | None, why: str | None, adapter_dir: Path) -> dict | None:
    """The converted adapter checked against the adapter's own matrices, or the converter's refusal."""
    if job is None:
        return None
    if why:
        print(f"[gguf] adapter as GGUF skipped: the LoRA converter refused it: {why}", flush=True)
        return {"file": None, "reason": why}
    check = ggufcheck.lora_check(job.out, adapter_dir)
    if not check["ok"]:
        job.out.unlink()
        raise ggufcheck.GGUFCheckFailed(f"{job.out.name} does not hold the adapter's matrices: {check}")
    print(f"[gguf] adapter as GGUF: {job.out} ({check['tensors']} LoRA matrices, alpha {check['alpha']})", flush=True)
    return {"file": str(job.out), **check}


def _place(disk: diskplan.DiskPlan, made: Path, tokenizer, stops: list[int], num_ctx: int, facts: dict,
           quant_type: str) -> dict:
    """Move the verified GGUF where the plan says, with its Modelfile and model card beside it: one folder, built
    whole and swapped in (an earlier export's stays whole until then)."""
    folder = disk.path("gguf")
    with atomic.folder(folder, f"the GGUF ({folder.name}/)", disk.items["gguf"].size) as tmp:
        diskplan.move_into(made, tmp)
        info = modelfile.write(tmp, made.name, tokenizer, stops, num_ctx, shown=folder)
        (tmp / "README.md").write_text(card.model_card(facts, "gguf", run={**info, "type": quant_type}))
        faultpoints.point("gguf")
    dest = folder / made.name
    return {"file": str(dest), "size_mb": round(dest.stat().st_size / 2**20, 2), "kept": disk.kept("gguf"), **info}


def _skip(why: str, **more) -> dict:
    return {"file": None, "reason": why, **more}  # `report` prints it


def export(disk: diskplan.DiskPlan, quant_type: str, tokenizer, prompts: list[str], texts: list[str],
           base_model: str, adapter_dir: str | Path, facts: dict, llama_cpp_dir: str = "auto", lora: bool = True,
           device: str = "cpu", num_ctx: int = 4096) -> dict:
    """The whole GGUF step; a dict for export_summary.json (file, verification, Modelfile, commands, or why not)."""
    from nbutils.runtime.install import ensure_extra

    quant_type = quant_type.lower()
    if base_model == embedded.EMBEDDED:
        return _skip(EMBEDDED_REASON)
    merged_dir, work = disk.path("merged"), disk.temp / "gguf-work"
    if merged_dir is None or disk.path("gguf") is None:
        return _skip(disk.items["gguf"].reason if "gguf" in disk.items else "no merged model to convert from")
    ensure_extra(("gguf", "sentencepiece"))
    converter = gguf.find_converter(llama_cpp_dir, disk.temp)
    if isinstance(converter, str):
        return _skip(converter)
    print(f"[gguf] converter: {converter.origin}", flush=True)
    stops = stop_ids(tokenizer, merged_dir)
    eot = tokenizer.convert_tokens_to_ids(chatformat.end_of_turn(tokenizer))
    fields, add_bos = gguf.stop_fields(tokenizer.eos_token_id, eot, stops), modelfile.starts_with_bos(tokenizer)
    if sentencepiece_beside(merged_dir, base_model):
        print(f"[gguf] {SENTENCEPIECE} copied from {base_model} into the merged model (the converter reads it)", flush=True)
    work.mkdir(parents=True, exist_ok=True)
    lora_job = _lora_job(disk, Path(adapter_dir)) if lora else None
    made, note, lora_why = _convert(merged_dir, work, quant_type, converter, {**fields, "add_bos": add_bos}, lora_job)
    if made is None:
        _discard(lora_job)
        if diskspace.says_no_space(note):
            raise diskspace.DiskFullError(diskspace.message(
                work, disk.items["gguf"].size / diskspace.MB, what=f"the {quant_type} GGUF",
                advice="free space and run 04 again", detail=f"; nothing was left under a final name ({note})"))
        return _skip(note, converter=converter.origin)
    try:
        check = ggufcheck.verify(made, merged_dir, tokenizer, stops, prompts, texts, quant_type, device, add_bos)
    except Exception:
        made.unlink(missing_ok=True)  # a GGUF that failed its check is not kept anywhere
        _discard(lora_job)
        raise
    result = {**_place(disk, made, tokenizer, stops, num_ctx, facts, quant_type), "type": quant_type,
              "converter": converter.origin, "build": note, "stop_fields": fields, "add_bos": add_bos,
              "verification": check}
    result["lora"] = _lora(lora_job, lora_why, Path(adapter_dir))
    return result


def report(result: dict) -> str:
    """One paragraph for the notebook: the file, its checks, and the two commands to run it."""
    if not result.get("file"):
        return f"[gguf] skipped: {result.get('reason')}"
    v = result["verification"]
    greedy = ("greedy tokens equal" if v["same_greedy"] else f"greedy tokens equal up to {len(v['greedy_ties'])} "
              "near-tie(s) within the tolerance") if v["greedy_checked"] else "greedy not required"
    where = "output" if result["kept"] else "temp folder only (see the disk plan)"
    return (f"[gguf] {result['file']} ({result['size_mb']} MB, {where}), reloaded with {v['reloaded_with']}: "
            f"logits' NMSE {v['nmse']:.3g} (bound {v['nmse_bound']:g}; max |logit diff| {v['max_abs_diff']:.4g}), "
            f"{greedy}, perplexity "
            f"{v['perplexity']:.4g} vs {v['merged_perplexity']:.4g}; stops {', '.join(result['stops'])}\n"
            f"  llama.cpp: {result['llama_cpp']}\n  Ollama:    {result['ollama']}")
