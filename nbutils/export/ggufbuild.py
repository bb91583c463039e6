"""04's GGUF step: convert the merged model (and the adapter), verify each file, write the Modelfile and the card,
and put them where the disk plan says. Each part is in its own module; this one runs them in order.

The GGUF is written in the temp folder (as a `.partial`, renamed when complete), verified there, then moved into
the output when the plan keeps it: its folder (the GGUF, the Modelfile, the card) is built whole and swapped in
(`atomic.folder`). A refused conversion or a failed check leaves nothing under a final name; a full disk during
the conversion is the suite's disk-full error, not a skip.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from types import SimpleNamespace

from nbutils import embedded
from nbutils.data import chatformat
from nbutils.export import card, diskplan, gguf, ggufcheck, ggufruntime, modelfile, quantize
from nbutils.runtime import modelsource
from nbutils.train import atomic, diskspace, faultpoints

EMBEDDED_REASON = ("the embedded default's tokenizer is a small BPE of its own, which llama.cpp's converter does not "
                   "recognise ('BPE pre-tokenizer was not recognized'): no GGUF for it. A real model gets one.")


def written_fields(tokenizer, merged_dir: str | Path) -> tuple[list[int], dict]:
    """The suite's stop ids, and what the converter's writer hook puts into the GGUF: the eos/eot/eom fields,
    add_bos (as the chat template has it) and add_space_prefix (gguf.space_prefix)."""
    stops = stop_ids(tokenizer, merged_dir)
    eot = tokenizer.convert_tokens_to_ids(chatformat.end_of_turn(tokenizer))
    return stops, {**gguf.stop_fields(tokenizer.eos_token_id, eot, stops), "add_bos": modelfile.starts_with_bos(tokenizer),
                   "add_space_prefix": gguf.space_prefix(tokenizer)}


def stop_ids(tokenizer, merged_dir: str | Path) -> list[int]:
    """The suite's stop ids for the merged model: end of turn, EOS and its generation_config.eos_token_id."""
    from transformers import GenerationConfig

    return chatformat.stop_ids(tokenizer, SimpleNamespace(generation_config=GenerationConfig.from_pretrained(merged_dir)))


SENTENCEPIECE = "tokenizer.model"


def sentencepiece_beside(merged_dir: Path, base_model: str) -> str | None:
    """The converter reads SentencePiece vocabularies (Gemma, Phi-3, Llama 2) from tokenizer.model, which a fast
    tokenizer's save_pretrained does not write: copied from the base model (the suite adds no tokens) when missing."""
    if (merged_dir / SENTENCEPIECE).exists():
        return None
    base = Path(embedded.resolve_model(base_model))
    found = base / SENTENCEPIECE if base.is_dir() else None
    if found is None:
        found = _hub_file(base_model, SENTENCEPIECE)
    if found is None or not found.exists():
        return None
    shutil.copyfile(found, merged_dir / SENTENCEPIECE)
    return str(found)


def _hub_file(repo: str, name: str) -> Path | None:
    """A file of a Hub model: from the cache, else downloaded where the Hub answers (a fresh Kaggle or Colab session
    has only what loading the model fetched: weights, config and tokenizer.json, never tokenizer.model); None where
    the repo has no such file or the Hub cannot be reached."""
    from huggingface_hub import hf_hub_download, try_to_load_from_cache

    cached = try_to_load_from_cache(repo, name)
    if isinstance(cached, str):
        return Path(cached)
    try:  # with the HF_TOKEN secret as the model's load had it (a gated Gemma; Kaggle keeps it out of the environment)
        return Path(hf_hub_download(repo, name, token=modelsource.token()))
    except Exception:  # noqa: BLE001 -- no such file, a gated repo without a token, no internet: the converter says
        return None


def refused(why: str) -> str:
    """The converter's last line, with what to do where the suite knows the cause."""
    if SENTENCEPIECE in why and ("not found" in why.lower() or "missing" in why.lower()):  # Gemma's, Phi-3's words
        return (f"the converter reads this family's SentencePiece vocabulary from {SENTENCEPIECE}, which neither the "
                f"merged model nor its base model has (its folder, the Hub cache or the Hub): with base_model a folder, "
                f"put the original model's {SENTENCEPIECE} beside its config.json; with a Hub id, run 04 with the "
                f"internet on (and an HF_TOKEN for a gated model); then run 04 again (the converter said: {why})")
    if "pre-tokenizer was not recognized" in why:
        return (f"the converter refused this model: {why} (llama.cpp knows a tokenizer's pre-tokenizer by a hash "
                "of how it splits a test text; a newer llama.cpp may know this one: set llama_cpp_dir to it)")
    return f"the converter refused this model: {why}"


def _run(converter: gguf.Converter, model: gguf.Job, extras: list) -> tuple[str | None, list]:
    """The model's job and the extra ones (a LoRA, the base model; None: absent) in one converter process: (the
    model's refusal, the extras' refusals, None where absent)."""
    whys = gguf.run_converters(converter, [model, *(j for j in extras if j is not None)])
    rest = iter(whys[1:])
    return whys[0], [next(rest) if j is not None else None for j in extras]


def _convert(merged_dir: Path, work: Path, quant_type: str, converter: gguf.Converter, fields: dict,
             extras: list) -> tuple[Path | None, str, list]:
    """The GGUF in `work`: straight from the converter, or f16 then llama-quantize; (file, note, the extra jobs'
    refusals) or (None, why, []). The extra jobs (a LoRA, the base model) run in the same converter process, and
    their files go when there is no model GGUF (refused, a failed llama-quantize, a full disk): a LoRA GGUF comes
    with a verified model GGUF or not at all, and the base GGUF (up to fp16 size) would only fill the temp folder."""
    try:
        made, note, whys = _converted(merged_dir, work, quant_type, converter, fields, extras)
    except BaseException:
        for job in extras:
            _discard(job)
        raise
    if made is None:
        for job in extras:
            _discard(job)
    return made, note, whys


def _converted(merged_dir: Path, work: Path, quant_type: str, converter: gguf.Converter, fields: dict,
               extras: list) -> tuple[Path | None, str, list]:
    """`_convert`'s conversion itself, leaving the extra jobs' files to it."""
    final = work / f"model-{quant_type}.gguf"
    if quant_type in gguf.CONVERTER_TYPES:
        why, extra_whys = _run(converter, gguf.model_job(merged_dir, final, quant_type, fields), extras)
        return (None, refused(why), [None] * len(extras)) if why else (final, "", extra_whys)
    binary, note = quantize.find_quantize(converter.root), "llama-quantize found"
    if binary is None:
        print(f"[gguf] {quant_type} needs llama-quantize: building it from the pinned llama.cpp sources (minutes)", flush=True)
        binary, note = quantize.ensure(lambda: _sources(converter))
        if binary is None:
            return None, note, [None] * len(extras)
    f16 = work / "model-f16.gguf"
    try:
        why, extra_whys = _run(converter, gguf.model_job(merged_dir, f16, "f16", fields), extras)
        if why:
            return None, refused(why), [None] * len(extras)
        why = quantize.quantize(binary, f16, final, quant_type)
        return (None, f"llama-quantize failed: {why}", [None] * len(extras)) if why else (final, note, extra_whys)
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


def rslora(adapter_dir: Path) -> str | None:
    """Why the adapter cannot be a GGUF LoRA, or None: llama.cpp scales a LoRA by alpha / r, and the converter writes
    lora_alpha as it is, so an rsLoRA adapter (alpha / sqrt(r)) would run sqrt(r) times too weak."""
    config = json.loads((adapter_dir / "adapter_config.json").read_text()) if (adapter_dir / "adapter_config.json").exists() else {}
    if config.get("use_rslora"):
        return ("trained with use_rslora=True: llama.cpp would apply it at alpha / r instead of alpha / sqrt(r), "
                f"{config.get('r', 16) ** 0.5:.0f}x too weak; use the merged GGUF, which carries the adapter exactly")
    return None


def _discard(job: gguf.Job | None) -> None:
    """A job's file (an adapter GGUF, the base GGUF) removed: it comes with a verified model GGUF, or not at all."""
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
           quant_type: str, runtime: dict) -> dict:
    """Move the checked GGUF where the plan says, with its Modelfile (stops and BOS as llama.cpp confirmed them)
    and model card (verified in llama.cpp, or why not) beside it: one folder, built whole and swapped in (an
    earlier export's stays whole until then)."""
    folder = disk.path("gguf")
    with atomic.folder(folder, f"the GGUF ({folder.name}/)", disk.items["gguf"].size) as tmp:
        diskplan.move_into(made, tmp)
        info = modelfile.write(tmp, made.name, tokenizer, stops, num_ctx, runtime, shown=folder)
        (tmp / "README.md").write_text(card.model_card(facts, "gguf", run={**info, "type": quant_type, "runtime": runtime}))
        faultpoints.point("gguf")
    dest = folder / made.name
    return {"file": str(dest), "size_mb": round(dest.stat().st_size / 2**20, 2), "kept": disk.kept("gguf"), **info}


def _skip(why: str, **more) -> dict:
    return {"file": None, "reason": why, **more}  # `report` prints it


def _base_job(base_model: str, disk: diskplan.DiskPlan, work: Path, quant_type: str) -> gguf.Job | str:
    """The base model as a GGUF (the model's type; q8_0 for a k-quant), for the LoRA GGUF's check in llama.cpp, or
    why there is none. It is written in the temp folder beside the model's GGUF (and a k-quant's f16) and deleted
    after the check: it needs room for an fp16-sized file more than the disk plan's peak."""
    folder = Path(embedded.resolve_model(base_model))
    if not folder.is_dir():
        try:
            from huggingface_hub import snapshot_download

            folder = Path(snapshot_download(base_model, local_files_only=True))
        except Exception:  # noqa: BLE001 -- not in the local cache: the LoRA check says so
            return "the base model is in no local folder and not in the Hub cache"
    sizes = {n: i.size for n, i in disk.items.items()}
    need = 2 * sizes.get("merged", 0) + sizes.get("gguf", 0)  # the base GGUF (at most fp16) + the peak beside it
    free = shutil.disk_usage(work).free
    if free < need:
        return f"no room for a GGUF of the base model in the temp folder ({free / 2**30:.1f} GiB free, {need / 2**30:.1f} GiB needed)"
    kind = quant_type if quant_type in gguf.CONVERTER_TYPES else "q8_0"
    return gguf.model_job(folder, work / f"base-{kind}.gguf", kind, {})


def _verify(session, made: Path, args: tuple, work: Path, jobs: dict) -> tuple[dict, dict]:
    """ggufcheck.verify (args: its arguments after the file), with the runtime check around it: (check, runtime).
    jobs: "lora" and "base" -> (job or None, the converter's refusal or None)."""
    (lora_job, lora_why), (base_job, base_why) = jobs["lora"], jobs["base"]
    live = isinstance(session, ggufruntime.Session)
    try:
        if live:
            with_lora = lora_job is not None and base_job is not None and not (lora_why or base_why)
            session.base_type = base_job.args[2] if base_job is not None else None
            ggufruntime.run(session, made, work, base_job.out if with_lora else None, lora_job.out if with_lora else None)
        check = ggufcheck.verify(made, *args, also=ggufruntime.reference(session) if live else None)
    except Exception:
        made.unlink(missing_ok=True)  # a GGUF that failed its check is not kept anywhere
        _discard(lora_job)
        raise
    finally:
        if base_job is not None:
            base_job.out.unlink(missing_ok=True)
    runtime = ggufruntime.verdict(session, check.pop("also"), args[5], work) if live else session
    if live and lora_job is not None and "tokens" in runtime and "lora" not in runtime:
        why = base_why or lora_why or "the base model is in no local folder and not in the Hub cache"
        runtime["lora"] = {"checked": False, "reason": f"no GGUF of the base model to apply the LoRA GGUF to: {why}"}
    return check, runtime


def export(disk: diskplan.DiskPlan, quant_type: str, tokenizer, prompts: list[str], texts: list[str],
           base_model: str, adapter_dir: str | Path, facts: dict, llama_cpp_dir: str = "auto", lora: bool = True,
           device: str = "cpu", num_ctx: int = 4096, chats: list[list[dict]] | None = None,
           answers: list[str] | None = None, verify_runtime="auto") -> dict:
    """The whole GGUF step; a dict for export_summary.json (file, verification, Modelfile, commands, or why not).
    chats/answers: the eval prompts' messages and reference answers, for the runtime check in llama.cpp."""
    from nbutils.runtime.install import ensure_extra

    quant_type = quant_type.lower()
    if base_model == embedded.EMBEDDED:
        return _skip(EMBEDDED_REASON)
    merged_dir, work = disk.path("merged"), disk.temp / diskplan.SCRATCH
    if merged_dir is None or disk.path("gguf") is None:
        return _skip(disk.items["gguf"].reason if "gguf" in disk.items else "no merged model to convert from")
    ensure_extra(("gguf", "sentencepiece"))
    converter = gguf.find_converter(llama_cpp_dir, disk.temp)
    if isinstance(converter, str):
        return _skip(converter)
    print(f"[gguf] converter: {converter.origin}", flush=True)
    stops, written = written_fields(tokenizer, merged_dir)
    fields, add_bos = {k: v for k, v in written.items() if k in gguf.STOP_FIELDS}, written["add_bos"]
    if sentencepiece_beside(merged_dir, base_model):
        print(f"[gguf] {SENTENCEPIECE} copied from {base_model} into the merged model (the converter reads it)", flush=True)
    session = ggufruntime.start(verify_runtime, lambda: _sources(converter), tokenizer, chats, answers or [], texts,
                                stops, add_bos)
    work.mkdir(parents=True, exist_ok=True)
    no_lora = rslora(Path(adapter_dir)) if lora else None
    if no_lora:
        print(f"[gguf] adapter as GGUF skipped: {no_lora}", flush=True)
    lora_job = _lora_job(disk, Path(adapter_dir)) if lora and not no_lora else None
    base_job = _base_job(base_model, disk, work, quant_type) if lora_job and isinstance(session, ggufruntime.Session) else None
    base_job, base_why = (None, base_job) if isinstance(base_job, str) else (base_job, None)
    t0 = time.monotonic()
    made, note, (lora_why, refused_base) = _convert(merged_dir, work, quant_type, converter, written, [lora_job, base_job])
    base_why = base_why or refused_base
    if made is None:  # _convert removed the LoRA and base GGUFs with it
        if diskspace.says_no_space(note):
            raise diskspace.DiskFullError(diskspace.message(
                work, disk.items["gguf"].size / diskspace.MB, what=f"the {quant_type} GGUF",
                advice="free space and run 04 again", detail=f"; nothing was left under a final name ({note})"))
        return _skip(note, converter=converter.origin)
    t1 = time.monotonic()
    check, runtime = _verify(session, made, (merged_dir, tokenizer, stops, prompts, texts, quant_type, device, add_bos),
                             work, {"lora": (lora_job, lora_why), "base": (base_job, base_why)})
    result = {**_place(disk, made, tokenizer, stops, num_ctx, facts, quant_type, runtime), "type": quant_type,
              "converter": converter.origin, "build": note, "stop_fields": fields, "add_bos": add_bos,
              "add_space_prefix": written["add_space_prefix"],
              "verification": check, "runtime": runtime, "verified": runtime.get("ok") is True,
              "unverified": None if runtime.get("ok") is True else runtime["reason"],
              "seconds": {"convert": round(t1 - t0, 1), "checks": round(time.monotonic() - t1, 1)}}
    result["lora"] = {"file": None, "reason": no_lora} if no_lora else _lora(lora_job, lora_why, Path(adapter_dir))
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
            f"  {ggufruntime.text(result['runtime'])}\n"
            f"  llama.cpp: {result['llama_cpp']}\n  Ollama:    {result['ollama']}")
