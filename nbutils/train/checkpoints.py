"""Checkpoints you can trust: atomic writes, checksums checked on every use, rotation by step, resume.

A checkpoint folder counts only when it holds the COMPLETE marker, written last (after fsync), and
its checksums.json (every file's size and SHA-256, the global step, the run's settings) matches what
is on disk. A run killed mid-save leaves a folder without the marker; a file truncated or altered
later fails its checksums. Resume and 03 take the newest checkpoint that verifies and say which
ones they skipped and why. Rotation keeps the newest verified checkpoints by step (never by
modification time) and never deletes the last verified one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import uuid
from pathlib import Path

from nbutils.chain import MARKERS
from nbutils.data import chatformat
from nbutils.train import atomic, checksums, diskspace, faultpoints, reports, runsettings
from nbutils.train.modeling import load_base, unwrap

MARKER = checksums.MARKER
ADAPTER_FILES = ["adapter_config.json", "adapter_model.safetensors"]
TOKENIZER_FILES = ["tokenizer_config.json", "tokenizer.json"]
RUN_FILES = ["run_config.json", "trainer_state.json"]
RESUME_FILES = ["optimizer.pt", "scheduler.pt", "rng_state.pth"]  # Trainer checkpoints only: what resume restores
# What a Trainer checkpoint holds for the Trainer alone (what resume restores, its arguments): never part of the final
# checkpoint, which 03, 04 and 05 load as an adapter.
TRAINER_ONLY = (*RESUME_FILES, "rng_state_*.pth", "scaler.pt", "training_args.bin")
# Settings a resume may change on purpose: training longer. The schedule is recomputed for the new length.
EXTENDABLE = ("training.max_steps", "training.num_train_epochs")


class CheckpointError(RuntimeError):
    """No checkpoint that verifies, or a file about it that cannot be read; the message says what to re-run."""


class ResumeMismatchError(ValueError):
    """The checkpoint to resume was trained with other settings: resuming would mix two runs."""


def mark_complete(path: Path, step: int | None = None, settings: dict | None = None) -> None:
    """The commit point: everything on disk, then checksums.json, then the marker (each fsynced)."""
    path = Path(path)
    atomic.fsync_tree(path)
    faultpoints.point("checksums")
    checksums.write(path, step, settings)
    faultpoints.point("marker")
    with open(path / MARKER, "w") as f:
        f.write("ok\n")
        f.flush()
        os.fsync(f.fileno())
    atomic.fsync_dir(path)


def is_complete(path: Path) -> bool:
    return (path / MARKER).exists()


def save_final(model, tokenizer, dest: Path, run_config: dict, trainer_state: dict | None = None,
               settings: dict | None = None) -> Path:
    """Adapter + tokenizer + run config + trainer state + checksums written to a temp folder, then renamed into place."""
    dest = Path(dest)
    tmp = atomic.tmp_name(dest)
    try:
        save_adapter(model, tmp)
        faultpoints.point("final_save")
        chatformat.save_tokenizer(tokenizer, tmp)
        (tmp / "run_config.json").write_text(json.dumps(run_config, indent=2, default=str))
        if trainer_state is not None:
            (tmp / "trainer_state.json").write_text(json.dumps(trainer_state, indent=2, default=str))
        mark_complete(tmp, (trainer_state or {}).get("global_step"), settings)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if diskspace.is_no_space(e):
            need = diskspace.final_mb(sum(p.numel() for p in model.parameters() if p.requires_grad))
            raise diskspace.DiskFullError(diskspace.message(
                dest.parent, need, None, f". The final checkpoint was not saved; the Trainer checkpoints are intact: "
                f"rerun after freeing space (it resumes and saves again). (The writer said: {e})")) from None
        raise
    atomic.swap_in(tmp, dest)
    return dest


def save_adapter(model, dest: Path) -> None:
    """The active (trained) adapter alone. A PEFT model saves every adapter it holds by default, and 05's DPO and KTO
    hold a frozen copy of 02's adapter ("ref", which trl builds again from 02's adapter on every run): a second
    adapter in the checkpoint, doubling what is written and uploaded for nothing."""
    model = unwrap(model)
    active = list(getattr(model, "active_adapters", None) or []) if hasattr(model, "peft_config") else []
    model.save_pretrained(dest, **({"selected_adapters": active} if active else {}))


def copy_complete(src: Path, dest: Path) -> Path:
    """Use an earlier verified checkpoint as the final one (after a NaN stop, say), holding what save_final writes:
    the trained adapter alone. A Trainer checkpoint also holds every other adapter of the model in a subfolder of its
    name (05's "ref", as peft saves it) and the TRAINER_ONLY files; both stay behind."""
    src, dest = Path(src), Path(dest)
    tmp = atomic.tmp_name(dest)
    skip = shutil.ignore_patterns(MARKER, checksums.NAME, *TRAINER_ONLY)

    def ignore(folder, names):
        other_adapters = {n for n in names if (Path(folder) / n / ADAPTER_FILES[0]).is_file()}
        return set(skip(folder, names)) | (other_adapters if Path(folder) == src else set())

    shutil.copytree(src, tmp, ignore=ignore)
    old = checksums.read(src) or {}
    mark_complete(tmp, old.get("global_step"), old.get("settings"))
    atomic.swap_in(tmp, dest)
    return dest


def discard(path: Path) -> None:
    """Delete a folder so that a kill half-way never leaves a damaged checkpoint under its name: rename, then delete."""
    path = Path(path)
    trash = path.with_name(f".trash-{path.name}-{uuid.uuid4().hex[:8]}")
    path.rename(trash)
    atomic.fsync_dir(path.parent)
    faultpoints.point("rotate")
    shutil.rmtree(trash, ignore_errors=True)


def move_aside(trainer_dir: Path, why: str) -> Path:
    """Rename the Trainer checkpoints' folder to trainer.before-<time>, kept for the user and never resumed."""
    aside = Path(trainer_dir).with_name(f"trainer.before-{time.strftime('%Y%m%d-%H%M%S')}")
    Path(trainer_dir).rename(aside)
    print(f"[train] {why}: the earlier checkpoints moved to {aside}; delete it if not needed", flush=True)
    return aside


def is_smoke(checkpoint: Path) -> bool:
    """Whether a smoke=True run wrote this checkpoint (its settings say so)."""
    return bool((checksums.read(checkpoint) or {}).get("settings", {}).get(runsettings.SMOKE_KEY))


def drop_smoke(found: Path | None, trainer_dir: Path, settings: dict, main: bool) -> Path | None:
    """The checkpoint to resume, less a smoke run's when this run is a real one: smoke=True checks the chain in a few
    steps that spend its learning-rate schedule, never a start worth continuing. The smoke run's folder is moved
    aside (by the main process) and this run starts over; one in an attached earlier output is left where it is."""
    if found is None or not is_smoke(found) or settings.get(runsettings.SMOKE_KEY):
        return found
    why = f"{found} is a smoke run's (smoke=True checks the chain; no start to continue): this run starts over"
    if Path(found).parent != Path(trainer_dir):
        print(f"[train] {why} and leaves it where it is", flush=True)
    elif main:
        move_aside(trainer_dir, why)
    return None


def missing_files(path: Path, resumable: bool = False) -> list[str]:
    """Files a usable checkpoint needs that are not there, by name (resumable: also what resume restores)."""
    need = ADAPTER_FILES + TOKENIZER_FILES + RUN_FILES + [MARKER] + (RESUME_FILES if resumable else [])
    # Under several processes each rank saves its own rng_state_<rank>.pth instead of rng_state.pth.
    return [name for name in need if not (Path(path) / name).exists()
            and not (name == "rng_state.pth" and any(Path(path).glob("rng_state_*.pth")))]


def problems(path: Path, resumable: bool = False) -> list[str]:
    """Why a checkpoint cannot be used, one reason each: missing files, then the checksums check (empty: it verifies)."""
    missing = missing_files(path, resumable)
    return [f"{name} missing" for name in missing] or checksums.problems(path)


def verify(path: Path, precision: str = "") -> dict:
    """Check files by name and against checksums.json; if they pass, reload the base model as the checkpoint's
    run_config.json records it (4-bit recipe, precision), put the adapter on it and generate a few tokens."""
    missing = missing_files(path)
    found = [f"{name} missing" for name in missing] or checksums.problems(path)
    if found:
        return {"ok": False, "missing": missing, "problems": found, "generated": None}
    faultpoints.point("verify")
    from peft import PeftModel
    from transformers import AutoTokenizer

    from nbutils.train.recipe import from_checkpoint

    run = from_checkpoint(path, precision=precision)
    tok = AutoTokenizer.from_pretrained(path)
    model = PeftModel.from_pretrained(load_base(run.base_model, run.precision, run.quantization), path).eval()
    prompt = tok.apply_chat_template([{"role": "user", "content": "hello"}], tokenize=False, add_generation_prompt=True) \
        if tok.chat_template else "hello"
    ids = tok(prompt, return_tensors="pt", add_special_tokens=False).to(model.device)
    out = model.generate(**ids, max_new_tokens=4, do_sample=False, pad_token_id=tok.pad_token_id)
    return {"ok": True, "missing": [], "problems": [], "generated": tok.decode(out[0, ids["input_ids"].shape[1]:])}


def _step(p: Path) -> int:
    return int(p.name.split("-")[1])


def checkpoint_dirs(folder: Path) -> list[Path]:
    """Every checkpoint-N folder (complete or not) in step order."""
    found = [p for p in Path(folder).glob("checkpoint-*") if re.fullmatch(r"checkpoint-\d+", p.name) and p.is_dir()]
    return sorted(found, key=_step)


def newest_verified(folder: Path, resumable: bool = True) -> tuple[Path | None, list[tuple[Path, list[str]]]]:
    """The newest checkpoint-N that verifies, and the newer ones skipped with their reasons."""
    skipped = []
    for path in reversed(checkpoint_dirs(folder)):
        found = problems(path, resumable)
        if not found:
            return path, skipped
        skipped.append((path, found))
    return None, skipped


def report_skipped(skipped: list[tuple[Path, list[str]]]) -> None:
    for path, reasons in skipped:
        print(f"[checkpoint] skipped {path}: {'; '.join(reasons)}", flush=True)


def rotate(folder: Path, keep: int | None, protect: str | Path | None = None, verified: set | None = None) -> list[Path]:
    """Keep the newest `keep` verified checkpoints by step (and `protect`, the best one); delete the older rest.

    Never deletes when nothing verifies, nor anything newer than the newest verified checkpoint.
    `verified` caches paths already hashed in this process, so each checkpoint is hashed once.
    """
    if not keep or keep <= 0:
        return []
    verified = set() if verified is None else verified
    kept: list[Path] = []
    dirs = checkpoint_dirs(folder)
    for path in reversed(dirs):
        if len(kept) < keep and (str(path) in verified or not problems(path, resumable=True)):
            verified.add(str(path))
            kept.append(path)
    if not kept:
        return []
    safe = {str(p) for p in kept} | ({str(Path(protect))} if protect else set())
    removed = [p for p in dirs if str(p) not in safe and _step(p) < _step(kept[0])]
    for path in removed:
        discard(path)
        verified.discard(str(path))
    for trash in Path(folder).glob(".trash-checkpoint-*"):  # left by a kill during an earlier rotation
        shutil.rmtree(trash, ignore_errors=True)
    return removed


def clean_unverified(folder: Path, above_step: int | None) -> None:
    """Before training resumes at `above_step`: remove the checkpoints above it that did not verify (the
    Trainer writes into the same names), and leftovers of killed rotations and saves."""
    for path in checkpoint_dirs(folder):
        if (above_step is None or _step(path) > above_step) and problems(path, resumable=True):
            print(f"[checkpoint] removing {path.name}: it did not verify and training will write it again", flush=True)
            discard(path)
    for trash in [*Path(folder).glob(".trash-*"), *Path(folder).parent.glob("checkpoint.tmp-*")]:
        shutil.rmtree(trash, ignore_errors=True)


def resume_mismatch(checkpoint: Path, settings: dict) -> list[str]:
    """Settings that differ between the checkpoint's recorded settings and this run, one line each."""
    return runsettings.differences((checksums.read(checkpoint) or {}).get("settings", {}), settings)


def extended(checkpoint: Path, settings: dict) -> list[str]:
    """The lines of resume_mismatch that train longer: an EXTENDABLE setting raised (max_steps from a set number to a
    larger one, or more epochs). A shorter run, or max_steps newly set over epochs, stays a mismatch."""
    old = (checksums.read(checkpoint) or {}).get("settings", {})
    longer = {k: settings[k] for k in EXTENDABLE if isinstance(old.get(k), (int, float))
              and isinstance(settings.get(k), (int, float)) and settings[k] > old[k] > 0
              and not (k == "training.num_train_epochs" and runsettings.epochs_ignored(old, settings))}
    return runsettings.differences({k: old[k] for k in longer}, longer)


def checkpoint_step(checkpoint: Path) -> int:
    """The global step of a checkpoint, from checksums.json (trainer_state.json must agree: `problems` checks)."""
    return checksums.step(checkpoint)


def find_resumable(output_dir: Path, platform=None) -> Path | None:
    """Newest verified Trainer checkpoint in output_dir/trainer, else in an attached earlier output of the same stage
    (05's folder is "preference": 02's checkpoints attached as its input are never its own); skipped ones are printed."""
    from nbutils.runtime.environment import detect_platform

    stage = Path(output_dir).name if Path(output_dir).name in MARKERS else "train_qlora"
    found, skipped = newest_verified(Path(output_dir) / "trainer")
    report_skipped(skipped)
    if found:
        return found
    platform = platform or detect_platform()
    if platform.input_root.is_dir():  # a Kaggle run attached the output of its previous version
        for depth in ("*", "*/*"):
            for folder in sorted(platform.input_root.glob(f"{depth}/{stage}/trainer")):
                found, skipped = newest_verified(folder)
                report_skipped(skipped)
                if found:
                    return found
    return None


def writer(train_dir: Path) -> str:
    """The notebook that writes this folder's checkpoint: 05 records its method in run_config.json, 02 does not."""
    try:
        run_config = json.loads((Path(train_dir) / "checkpoint" / "run_config.json").read_text())
    except (OSError, ValueError):
        return "02_train_qlora"
    return "05_preference" if "method" in run_config else "02_train_qlora"


def read_summary(train_dir: Path) -> dict:
    """training_summary.json of 02 (or 05), or a CheckpointError naming the file and what to re-run."""
    path = Path(train_dir) / MARKERS["train_qlora"]
    nb = writer(train_dir)
    try:
        summary = json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{path} not found: run {nb} (again: a run that stopped before its summary resumes and "
                              "writes it), or point adapter_dir at the folder it wrote.") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path} is damaged ({e}): re-run {nb} (it resumes from its last verified "
                              "checkpoint and rewrites the summary).") from None
    if not isinstance(summary, dict) or "checkpoint_dir" not in summary:
        raise CheckpointError(f"{path} has no checkpoint_dir: it is not a summary written by {nb}; re-run it.")
    return summary


def for_eval(train_dir: Path) -> tuple[Path, dict]:
    """The checkpoint 03 should load: the final one if it verifies (and the summary describes it), else the newest
    Trainer checkpoint that does."""
    train_dir = Path(train_dir)
    summary = read_summary(train_dir)
    candidates = [train_dir / summary["checkpoint_dir"], *reversed(checkpoint_dirs(train_dir / "trainer"))]
    for path in candidates:
        found = problems(path) if path.exists() else ["not found"]
        if not found:
            if path != candidates[0]:
                print(f"[checkpoint] using {path} (step {checkpoint_step(path)}) instead of the final checkpoint "
                      f"(summary: step {summary.get('global_step')}); re-run 02_train_qlora to rebuild it", flush=True)
            elif summary.get("checkpoint"):  # summaries before the suite named their checkpoint have no identity
                reports.check_describes(summary, train_dir / MARKERS["train_qlora"], path,
                                        summary.get("written_by") or writer(train_dir))
            return path, summary
        print(f"[checkpoint] skipped {path}: {'; '.join(found)}", flush=True)
    raise CheckpointError(f"no checkpoint in {train_dir} verifies (see the lines above): re-run 02_train_qlora; it "
                          "resumes from its last verified checkpoint, or starts over when there is none.")
