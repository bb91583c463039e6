"""The embedded default: a tiny Llama model, its tokenizer and a raw task dataset, built offline.

With no GPU and no model hub the whole chain must still run and show real learning. We build:
- a byte-level BPE tokenizer with a chat template and distinct pad / EOS tokens;
- a 2-layer Llama (hidden sizes multiples of 64: bitsandbytes' CPU 4-bit kernels need it),
  pre-trained for a few seconds on synthetic "record" documents so it can read and copy fields;
- `task.jsonl`, an instruction dataset (alpaca style) asking for one field of a record. The base
  model has never seen the question form, the chat markers or an EOS after an answer, so it
  cannot do the task before fine-tuning; LoRA teaches it in about a minute on a CPU.
Everything is deterministic for a seed and cached under `cache_dir()`.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import time
from pathlib import Path

EMBEDDED = "embedded"  # the sentinel every notebook parameter uses for "the embedded default"
# The cache key is a hash of this file: any change to what gets built builds afresh.
VERSION = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:10]

FIELDS = {
    "name": "anna bob carl dora emil fay gus hana ivan june kurt lena milo nora otto pia".split(),
    "city": "paris rome oslo lima cairo delhi tokyo quito dakar hanoi perth sofia".split(),
    "color": "red blue green black white pink brown grey gold teal".split(),
    "food": "rice bread soup fish cake plums beans corn pasta salad".split(),
    "job": "baker pilot nurse judge miner cook tailor farmer singer clerk".split(),
    "pet": "cat dog fox owl hen goat frog duck mule crab".split(),
}
QUESTIONS = [
    "what kind of word is {w} ?", "{w} is which kind of word ?", "classify the word {w} .", "is {w} a name , a city or what ?",
    "tell me what {w} is .", "which field does {w} belong to ?", "what sort of word is {w} ?", "say the kind of {w} .",
]
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for m in messages %}"
    "{{ '<|' + m['role'] + '|> ' + m['content'] + '\n' }}"
    "{% if m['role'] == 'assistant' %}{{ eos_token }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)
SPECIAL = {"bos_token": "<|bos|>", "eos_token": "<|end|>", "pad_token": "<|pad|>", "unk_token": "<|unk|>"}
ROLE_TOKENS = ["<|system|>", "<|user|>", "<|assistant|>"]
MODEL_SHAPE = dict(
    vocab_size=1024, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
)


def cache_root() -> Path:
    """$NBUTILS_CACHE, else ~/.cache/nbutils: the suite's cache (the embedded default, llama.cpp, twins, wheelhouse)."""
    return Path(os.environ.get("NBUTILS_CACHE") or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "nbutils")


def cache_dir() -> Path:
    """Where the embedded default lives (built once, reused)."""
    return cache_root() / f"embedded-v{VERSION}"


def _record(rng: random.Random) -> dict[str, str]:
    keys = rng.sample(sorted(FIELDS), k=rng.randint(3, 5))
    return {k: rng.choice(FIELDS[k]) for k in keys}


def _record_text(rec: dict[str, str]) -> str:
    return " ; ".join(f"{k} : {v}" for k, v in rec.items())


def pretraining_texts(n: int = 6000, seed: int = 0) -> list[str]:
    """Records, facts restating fields, "word is a kind" sentences and a few chat turns.

    The chat turns (user gives a record, assistant restates a field) train the embeddings of the
    role and EOS tokens; untrained special tokens are a known trap with real base models too.
    """
    rng = random.Random(seed)
    docs = []
    for i in range(n):
        rec = _record(rng)
        facts = rng.sample(list(rec), k=rng.randint(1, len(rec)))
        if i % 4 == 3:
            k = facts[0]
            body = f"<|user|> {_record_text(rec)}\n<|assistant|> the {k} is {rec[k]} .\n<|end|>"
        else:
            said = [f"the {k} is {rec[k]} ." if rng.random() < 0.5 else f"{rec[k]} is a {k} ." for k in facts]
            body = _record_text(rec) + " . " + " ".join(said) + "<|end|>"
        docs.append("<|bos|>" + body)
    return docs


def task_records(n: int = 480, seed: int = 1) -> list[dict[str, str]]:
    """Alpaca-style records, all distinct: say which kind of word (which record field) a word is."""
    combos = [(q, w, f) for f in sorted(FIELDS) for w in FIELDS[f] for q in QUESTIONS]
    rng = random.Random(seed)
    picked = rng.sample(combos, k=min(n, len(combos)))
    return [{"instruction": q.format(w=w), "input": "", "output": f} for q, w, f in picked]


def build_tokenizer(texts: list[str]):
    """Byte-level BPE trained on the pre-training texts, wrapped as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = list(SPECIAL.values()) + ROLE_TOKENS
    trainer = trainers.BpeTrainer(
        vocab_size=MODEL_SHAPE["vocab_size"], special_tokens=specials, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    questions = [q.format(w=w) for q in QUESTIONS for ws in FIELDS.values() for w in ws]
    tok.train_from_iterator(texts + questions * 20, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, **SPECIAL, additional_special_tokens=ROLE_TOKENS)
    fast.chat_template = CHAT_TEMPLATE
    fast.padding_side = "right"
    return fast


def _pretrain(model, tokenizer, texts: list[str], steps: int, seed: int) -> list[float]:
    import torch

    torch.manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=steps, pct_start=0.1)
    rng = random.Random(seed)
    losses = []
    model.train()
    for _ in range(steps):
        batch = tokenizer(rng.sample(texts, 32), return_tensors="pt", padding=True, add_special_tokens=False)
        labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
        loss = model(**batch, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    model.eval()
    return losses


def build(out: Path | str, seed: int = 0, pretrain_steps: int = 400) -> dict:
    """Build tokenizer, pre-trained model and task data into `out`; returns the build info."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out = Path(out)
    t0 = time.time()
    torch.manual_seed(seed)
    texts = pretraining_texts(seed=seed)
    tokenizer = build_tokenizer(texts)
    config = LlamaConfig(
        **MODEL_SHAPE, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    losses = _pretrain(model, tokenizer, texts, pretrain_steps, seed)
    model_dir = out / "model"
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    data_file = out / "task.jsonl"
    with open(data_file, "w") as f:
        for rec in task_records(seed=seed + 1):
            f.write(json.dumps(rec) + "\n")
    info = {
        "version": VERSION, "seed": seed, "pretrain_steps": pretrain_steps,
        "pretrain_loss_first": losses[0], "pretrain_loss_last": sum(losses[-20:]) / 20,
        "build_seconds": round(time.time() - t0, 1),
    }
    (out / "info.json").write_text(json.dumps(info, indent=2))
    return info


def ensure(seed: int = 0) -> Path:
    """Return the cached embedded default, building it first if needed (safe across processes)."""
    import fcntl

    out = cache_dir()
    if (out / "info.json").exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second process waits, then finds it built
        if not (out / "info.json").exists():
            tmp = out.parent / f".{out.name}.building"
            if tmp.exists():
                import shutil

                shutil.rmtree(tmp)
            tmp.mkdir()
            _build_in_a_child(tmp, seed)
            tmp.rename(out)  # atomic: a crash mid-build never leaves a half-built default
    return out


def _build_in_a_child(out: Path, seed: int, pretrain_steps: int = 400) -> None:
    """build() in a fresh Python process. Pre-training runs a backward pass, and autograd's first backward
    queries the CUDA devices, after which a forked process can no longer use CUDA: built in the notebook
    kernel itself, it would break accelerate's notebook launcher (2xT4) in 02 (seen on a GPU machine)."""
    import subprocess
    import sys

    root = str(Path(__file__).resolve().parent.parent)
    code = f"import sys; sys.path.insert(0, {root!r}); from nbutils.embedded import build; build(sys.argv[1], {seed}, {pretrain_steps})"
    proc = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"building the embedded default into {out} failed:\n{proc.stderr[-3000:]}")


def resolve_model(base_model: str) -> str:
    """`embedded` -> the cached tiny model's folder; anything else (hub id or path) unchanged."""
    return str(ensure() / "model") if base_model == EMBEDDED else base_model


def resolve_raw_data(raw_data: str) -> str:
    """`embedded` -> the cached task.jsonl; anything else unchanged."""
    return str(ensure() / "task.jsonl") if raw_data == EMBEDDED else raw_data
