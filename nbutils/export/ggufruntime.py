"""04's GGUF step, in llama.cpp: the runtime check (nbutils.export.runtimecheck) run around the step's other checks.

`start` decides whether it runs (`verify_runtime`: "auto" runs it where llama.cpp can be built or is cached, True
requires it, False skips it and says so) and renders the HF side once. `run` gives the GGUF (and the base GGUF with
the LoRA GGUF) to llama.cpp before the merged model is loaded, so the two never share the machine's memory;
`reference` runs inside ggufcheck.verify while the merged model is loaded; `verdict` is the summary's "runtime".
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from nbutils.defaults import is_auto
from nbutils.export import llamaruntime, runtimecheck, runtimeverdict
from nbutils.runtime import llamacpp


@dataclass
class Session:
    """One GGUF step's runtime check: the probe, the HF side's plan, and the probe's runs."""
    probe: str
    plan: runtimecheck.Plan
    note: str
    runs: dict = field(default_factory=dict)
    failed: str | None = None  # llama.cpp could not run a GGUF: the reason
    base_type: str | None = None
    seconds: dict = field(default_factory=lambda: {"llama_cpp": 0.0, "merged_model": 0.0})  # each side's time


def skipped(reason: str) -> dict:
    """The summary's "runtime" when the check did not run."""
    return {"checked": False, "ok": None, "reason": reason}


def start(verify_runtime, sources, tokenizer, chats: list[list[dict]] | None, answers: list[str], texts: list[str],
          stop_ids: list[int], template_bos: bool) -> Session | dict:
    """A Session, or the summary's "runtime" saying why the check does not run. verify_runtime=True and no way to
    build llama.cpp raises, with what to do."""
    if verify_runtime is False or str(verify_runtime).lower() == "false":
        return skipped("verify_runtime=False: the GGUF was not run in llama.cpp (its weights were checked in transformers)")
    if not chats:
        return skipped("no eval prompts to check the GGUF on in llama.cpp")
    probe, note = llamaruntime.probe(sources)
    if probe is None:
        if not is_auto(verify_runtime):
            raise RuntimeError(f"verify_runtime=True but llama.cpp's runtime cannot be built here: {note}")
        return skipped(f"llama.cpp's runtime is not at hand ({note}): the GGUF was not run in llama.cpp")
    plan = runtimecheck.plan(tokenizer, chats, answers, texts, stop_ids, template_bos)
    return Session(probe, plan, note)


def run(session: Session, gguf_file: Path, work: Path, base: Path | None = None, lora: Path | None = None) -> None:
    """The probe on the GGUF, and on the base GGUF with the LoRA GGUF applied; a failure is kept as the reason."""
    t0 = time.monotonic()
    try:
        session.runs["gguf"] = llamaruntime.run(session.probe, gguf_file, runtimecheck.request(session.plan),
                                                work / "runtime-gguf")
        if base is not None and lora is not None:
            session.runs["lora"] = llamaruntime.run(session.probe, base, runtimecheck.request(session.plan, True),
                                                    work / "runtime-lora", lora)
    except llamaruntime.ProbeFailed as e:
        session.failed, session.runs = str(e), {}
    session.seconds["llama_cpp"] += time.monotonic() - t0


def reference(session: Session):
    """What ggufcheck.verify runs with the merged model loaded (None when llama.cpp ran nothing)."""
    if not session.runs:
        return None

    def timed(model):
        import contextlib

        import torch

        from nbutils.export import merge

        t0 = time.monotonic()
        # An fp16 model (on a GPU, or where fp32 does not fit in RAM) runs in fp32 one module at a time: fp16's own
        # rounding over 30 layers would otherwise count as llama.cpp's error against f16's 1e-4 NMSE.
        exact = merge.computing_in_fp32(model) if model.dtype != torch.float32 else contextlib.nullcontext()
        try:
            with exact:
                return runtimecheck.reference(model, session.plan, session.runs)
        finally:
            session.seconds["merged_model"] += time.monotonic() - t0
    return timed


def _lora(session: Session, ref: dict) -> dict:
    stats = ref["logits"]["lora"]
    problems = runtimecheck.logit_problems(stats, session.base_type, f"base GGUF ({session.base_type}) + LoRA GGUF")
    return {**stats, "base_type": session.base_type, "problems": problems,
            "bounds": dict(zip(("nmse", "kl_mean", "top1"), runtimecheck.bounds(session.base_type))),
            "top1_vs_merged_gguf": runtimecheck.agreement(session.runs["gguf"], session.runs["lora"])}


def verdict(session: Session, ref: dict | None, quant_type: str, work: Path) -> dict:
    """The summary's "runtime": every part's figures and problems; the runtime's files in `work` are removed."""
    try:
        if session.failed:
            return {"checked": True, "ok": False, "problems": [session.failed], "reason": session.failed}
        lora = _lora(session, ref) if "lora" in session.runs else None
        result = runtimeverdict.verdict(session.plan, session.runs["gguf"], ref, quant_type, lora)
        seconds = {k: round(v, 1) for k, v in session.seconds.items()}
        return {"checked": True, "llama_cpp": f"llama-cpp-python {llamacpp.VERSION}'s llama.cpp ({session.note})",
                **result, "reason": "; ".join(result["problems"]) or None, "seconds": seconds}
    finally:
        for name in ("runtime-gguf", "runtime-lora"):
            shutil.rmtree(work / name, ignore_errors=True)


def text(runtime: dict) -> str:
    """One line for the notebook."""
    if not runtime.get("checked"):
        return f"not run in llama.cpp: {runtime['reason']}"
    if "tokens" not in runtime:
        return f"FAILED in llama.cpp: {runtime['reason']}"
    t, g, lg = runtime["tokens"], runtime["greedy"], runtime["logits"]
    head = "checked in llama.cpp" if runtime["ok"] else f"FAILED in llama.cpp ({runtime['reason']})"
    lora = runtime.get("lora")
    return (f"{head}: prompt tokens {t['same_ids']}/{t['eval_prompts']} equal, template "
            f"{runtime['template']['equal']}/{runtime['template']['conversations']} conversations equal, greedy "
            f"{g['same']}/{g['prompts']} equal ({len(g['ties'])} near-tie(s)), stopped on "
            f"{', '.join(dict.fromkeys(g['stopped_on'])) or 'no stop within ' + str(g['max_new_tokens']) + ' tokens'}; "
            f"NMSE {lg['nmse']:.2e}, KL {lg['kl_mean']:.2e}, top-1 {lg['top1']:.1%}"
            + (f"; base + LoRA: NMSE {lora['nmse']:.2e}, KL {lora['kl_mean']:.2e}, top-1 {lora['top1']:.1%}" if lora else ""))


def check_file(probe: str, gguf_file: Path, merged, plan: runtimecheck.Plan, quant_type: str, work: Path,
               device: str = "cpu") -> dict:
    """The runtime check of one GGUF on its own (benchmarks, tests): the probe, then the merged side (`merged`: the
    merged model's folder, loaded here, or runtimecheck.merged_side's answer kept to check several GGUFs); the
    summary's "runtime"."""
    from nbutils.export import ggufload

    session = Session(probe, plan, "given")
    run(session, Path(gguf_file), Path(work))
    ref = None
    if session.runs and isinstance(merged, dict):
        ref = runtimecheck.compare(merged, session.runs)
    elif session.runs:
        model = ggufload.load_merged(merged, device)
        ref = runtimecheck.reference(model, plan, session.runs)
        del model
    return verdict(session, ref, quant_type, Path(work))
