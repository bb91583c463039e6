"""The work of each notebook, re-run on a twin to measure its peak memory on this CPU (the dry run's memory check).

All probes run in one fresh process, one after the other, after one small pass of each kind (what the first pass
of a process pays once: libraries, thread pools, kernels). Before each, a garbage collection and malloc_trim hand
what the last one freed back to the system; the resident memory then is its baseline. Once its model is loaded, the
same again, and /proc/self/clear_refs resets the peak (VmHWM) to what is resident: so each peak is its model's
weights and adapters as they stay resident, plus every buffer of its work, and not what loading passed through on
the way (on a GPU that stays in host memory). 04's merge loads inside its work: there the loading counts.
- train: 02's recipe (its 4-bit and LoRA configs, the k-bit preparation with checkpointing), one forward and
  backward of batch x seq tokens with the loss the plan chose, one AdamW step;
- infer: the base as 03 loads it with `adapters` LoRA adapters, greedy generation of rows x (prompt + new tokens),
  then the scoring pass of 03 and 05 (nbutils.train.loss.sequence_logprobs) on tokens // longest rows of `longest`;
- merge: 04's merge of a LoRA adapter into the fp16 base and its check against exact fp32 base + adapter on one
  prompt of `prompt` tokens (nbutils.export.merge), then the reload and comparison.
"""

from __future__ import annotations

import ctypes
import gc
import multiprocessing
from pathlib import Path

from nbutils.defaults import text_config


def _status(key: str) -> int:
    return next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith(key + ":"))


def _reset() -> int:
    """Free what can be freed, reset the peak (VmHWM) to what is resident now; returns it."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:  # not glibc: the peak still resets, to a little more
        pass
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _status("VmRSS")


def _ids(vocab: int, rows: int, length: int, seed: int = 0):
    import torch

    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (rows, length), generator=g)


def train(twin: str, batch: int, seq: int, loss: str) -> None:
    """One training step of 02's recipe on the twin."""
    import torch

    from nbutils.harness import notebook_recipe
    from nbutils.train import loss as lm_loss
    from nbutils.train import modeling

    bnb, lora = notebook_recipe.configs("fp32")
    model = modeling.attach_lora(modeling.load_base(twin, "fp32", bnb), lora)
    model.train()
    _reset()  # loaded: the peak from here on
    ids = _ids(text_config(model.config).vocab_size, batch, seq)
    labels = ids.clone()
    labels[:, : seq // 2] = -100  # the prompt half carries no target
    mask = torch.ones_like(ids)
    if loss == "plain":
        value = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    else:
        with lm_loss.lm_head_input(model) as (kept, head):
            model(input_ids=ids, attention_mask=mask)
            value = lm_loss.chunked_cross_entropy(kept["hidden"], head.weight, labels)
    value.backward()
    torch.optim.AdamW([p for p in model.parameters() if p.requires_grad]).step()


def infer(twin: str, rows: int, prompt: int, new_tokens: int, tokens: int, longest: int, loss: str,
          adapters: int = 1) -> None:
    """03's generation and scoring (05's judge: three adapters) on the twin."""
    import torch
    from peft import LoraConfig, get_peft_model

    from nbutils.harness import notebook_recipe
    from nbutils.train import loss as lm_loss
    from nbutils.train import modeling

    bnb, _ = notebook_recipe.configs("fp32")
    model = get_peft_model(modeling.load_base(twin, "fp32", bnb), LoraConfig(r=16, target_modules="all-linear"))
    for k in range(1, adapters):
        model.add_adapter(f"extra{k}", LoraConfig(r=16, target_modules="all-linear"))
    model.eval()
    _reset()  # loaded: the peak from here on
    vocab = text_config(model.config).vocab_size
    with torch.no_grad():
        ids = _ids(vocab, rows, prompt)
        model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                       min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
    ids = _ids(vocab, max(1, tokens // longest), longest, seed=1)
    lm_loss.sequence_logprobs(model, {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids})
    assert loss in ("chunked", "plain")  # sequence_logprobs takes the path the plan planned (loss.unsupported)


def merge(twin: str, prompt: int, work: str) -> None:
    """04's merge and check on the twin, with an adapter saved beforehand (`prepare_merge`)."""
    from nbutils.export import merge as export_merge

    adapter, out = Path(work) / "adapter", Path(work) / "merged"
    text = [" hello" * max(1, prompt - 1)]
    reference = export_merge.merge_and_save(twin, adapter, out, text, "cpu")
    export_merge.verify(out, reference, text, "cpu")


def prepare_merge(twin: str, work: str) -> None:
    """A LoRA adapter for the twin, saved with its tokenizer, as 02's checkpoint holds one (not measured)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = AutoModelForCausalLM.from_pretrained(twin, dtype=torch.float16)
    model = get_peft_model(base, LoraConfig(r=16, target_modules="all-linear", init_lora_weights=False))
    model.save_pretrained(Path(work) / "adapter")
    AutoTokenizer.from_pretrained(twin).save_pretrained(Path(work) / "adapter")


PROBES = {"train": train, "infer": infer, "merge": merge}


WARM_UP = {"train": {"batch": 1, "seq": 8, "loss": "chunked"},  # the merge loads through the same libraries
           "infer": {"rows": 1, "prompt": 4, "new_tokens": 1, "tokens": 8, "longest": 8, "loss": "chunked"}}


def _one(probe: str, twin: str, settings: dict, work: str) -> int:
    """One probe's peak: VmHWM at its end less what was resident before it loaded anything."""
    extra = {}
    if probe == "merge":
        extra["work"] = work
        prepare_merge(twin, work)
    before = _reset()
    PROBES[probe](twin, **settings, **extra)
    return _status("VmHWM") - before


def _run_all(jobs: list[tuple[str, str, dict]], work: str) -> list[int]:
    import torch

    torch.manual_seed(0)
    for probe in WARM_UP:  # what a process's first pass pays once, paid here
        _one(probe, jobs[0][1], WARM_UP[probe], str(Path(work) / f"warm-{probe}"))
    return [_one(probe, twin, settings, str(Path(work) / f"{probe}-{i}")) for i, (probe, twin, settings) in enumerate(jobs)]


def measure_all(jobs: list[tuple[str, str, dict]], work: Path) -> list[int]:
    """Peak bytes of each (probe, twin folder, settings), measured in order in one fresh process."""
    if not jobs:
        return []
    from concurrent.futures import ProcessPoolExecutor

    work.mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:  # a crash raises, not hangs
        return pool.submit(_run_all, jobs, str(work)).result()
