"""Checkpoints that are complete or invisible: atomic writes, a COMPLETE marker, verification, resume.

A checkpoint folder counts only when it holds the COMPLETE marker, written last (after fsync).
A run killed mid-save leaves a folder without it, which resume and 03 ignore; the previous
complete checkpoint stays the one to use.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

MARKER = "COMPLETE"
ADAPTER_FILES = ["adapter_config.json", "adapter_model.safetensors"]
TOKENIZER_FILES = ["tokenizer_config.json", "tokenizer.json"]
RUN_FILES = ["run_config.json", "trainer_state.json"]
RESUME_FILES = ["optimizer.pt", "scheduler.pt", "rng_state.pth"]  # Trainer checkpoints only: what resume restores


def _fsync_dir(path: Path) -> None:
    """Make a folder's entries (new files, renames) durable, not only the files' bytes."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(path: Path) -> None:
    for p in path.rglob("*"):
        if p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())
        elif p.is_dir():
            _fsync_dir(p)
    _fsync_dir(path)


def mark_complete(path: Path) -> None:
    """The commit point: everything is on disk, then the marker (itself fsynced)."""
    path = Path(path)
    _fsync_tree(path)
    with open(path / MARKER, "w") as f:
        f.write("ok\n")
        f.flush()
        os.fsync(f.fileno())
    _fsync_dir(path)


def is_complete(path: Path) -> bool:
    return (path / MARKER).exists()


def unwrap(model):
    """Strip accelerate/DDP/compile wrappers so save_pretrained reaches the PEFT model."""
    try:
        from accelerate.utils import extract_model_from_parallel

        model = extract_model_from_parallel(model)
    except ImportError:
        pass
    while hasattr(model, "module"):
        model = model.module
    return model


def save_final(model, tokenizer, dest: Path, run_config: dict, trainer_state: dict | None = None) -> Path:
    """Adapter + tokenizer + run config + trainer state written to a temp folder, then renamed into place."""
    dest = Path(dest)
    tmp = dest.with_name(dest.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    unwrap(model).save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / "run_config.json").write_text(json.dumps(run_config, indent=2, default=str))
    if trainer_state is not None:
        (tmp / "trainer_state.json").write_text(json.dumps(trainer_state, indent=2, default=str))
    mark_complete(tmp)
    if dest.exists():
        old = dest.with_name(dest.name + ".old")
        if old.exists():
            shutil.rmtree(old)
        dest.rename(old)
        tmp.rename(dest)
        shutil.rmtree(old)
    else:
        tmp.rename(dest)
    _fsync_dir(dest.parent)
    return dest


def copy_complete(src: Path, dest: Path) -> Path:
    """Use an earlier complete checkpoint as the final one (after a NaN stop, say)."""
    tmp = dest.with_name(dest.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    shutil.copytree(src, tmp)
    mark_complete(tmp)
    if dest.exists():
        shutil.rmtree(dest)
    tmp.rename(dest)
    _fsync_dir(dest.parent)
    return dest


def missing_files(path: Path, resumable: bool = False) -> list[str]:
    """Files a usable checkpoint needs that are not there, by name (resumable: also what resume restores)."""
    need = ADAPTER_FILES + TOKENIZER_FILES + RUN_FILES + [MARKER] + (RESUME_FILES if resumable else [])
    return [name for name in need if not (Path(path) / name).exists()]


def verify(path: Path, base_model: str, load_in_4bit: bool = True, precision: str = "fp32") -> dict:
    """List missing files by name; if none, reload base + adapter and generate a few tokens."""
    missing = missing_files(path)
    if missing:
        return {"ok": False, "missing": missing, "generated": None}
    from peft import PeftModel
    from transformers import AutoTokenizer

    from nbutils.modeling import load_base

    tok = AutoTokenizer.from_pretrained(path)
    model = PeftModel.from_pretrained(load_base(base_model, precision, load_in_4bit), path).eval()
    prompt = tok.apply_chat_template([{"role": "user", "content": "hello"}], tokenize=False, add_generation_prompt=True) \
        if tok.chat_template else "hello"
    ids = tok(prompt, return_tensors="pt", add_special_tokens=False).to(model.device)
    out = model.generate(**ids, max_new_tokens=4, do_sample=False, pad_token_id=tok.pad_token_id)
    return {"ok": True, "missing": [], "generated": tok.decode(out[0, ids["input_ids"].shape[1]:])}


def trainer_checkpoints(folder: Path) -> list[Path]:
    """Complete Trainer checkpoints (checkpoint-N) in step order."""
    found = [p for p in Path(folder).glob("checkpoint-*") if re.fullmatch(r"checkpoint-\d+", p.name) and is_complete(p)]
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


# What must match for a checkpoint to be resumable: another base, rank or dataset is another run.
RESUME_KEYS = ("base_model", "lora_r", "use_rslora", "data_manifest_hash")


def resume_mismatch(checkpoint: Path, run_config: dict) -> list[str]:
    """Settings that differ between a checkpoint's run_config.json and this run, one line each."""
    path = Path(checkpoint) / "run_config.json"
    if not path.exists():
        return []
    old = json.loads(path.read_text())

    def flat(cfg: dict) -> dict:
        return {**cfg.get("parameters", {}), **{k: v for k, v in cfg.items() if k != "parameters"}}

    old, new = flat(old), flat(run_config)
    return [f"{k}: checkpoint has {old[k]!r}, this run {new[k]!r}" for k in RESUME_KEYS
            if k in old and k in new and old[k] != new[k]]


def find_resumable(output_dir: Path, platform=None) -> Path | None:
    """Latest complete Trainer checkpoint in output_dir/trainer, else in an attached earlier output."""
    from nbutils.environment import detect_platform

    candidates = trainer_checkpoints(Path(output_dir) / "trainer")
    if candidates:
        return candidates[-1]
    platform = platform or detect_platform()
    if platform.input_root.is_dir():  # a Kaggle run attached the output of its previous version
        for depth in ("*", "*/*"):
            for folder in sorted(platform.input_root.glob(f"{depth}/train_qlora/trainer")):
                found = trainer_checkpoints(folder)
                if found:
                    return found[-1]
    return None
