"""Adapter-only export, the light option: the LoRA weights, the tokenizer (chat template included), the
run's configuration, and a model card. Megabytes instead of gigabytes; needs the base model to load.

The folder is built whole under a temporary name and swapped in (`atomic.folder`): a kill or a full disk never
leaves a half-copied adapter, and an earlier export's adapter stays whole until the new one is complete."""

from __future__ import annotations

import fnmatch
import json
import shutil
from pathlib import Path

from nbutils.runtime.secrets import redact
from nbutils.train import atomic, checkpoints, checksums, faultpoints

# Trainer state and resume files are for continuing a run, not for using the model; the checkpoint's checksums
# describe the checkpoint (its run_config.json is redacted here), not this folder. 02's final checkpoint holds none
# of the Trainer's own files; a Trainer checkpoint (exported when the final one fails verification) holds them all:
# training_args.bin (a pickle, run on load), the optimizer, scheduler, scaler and each rank's random state.
LEFT_OUT = {checkpoints.MARKER, checksums.NAME, "trainer_state.json", *checkpoints.RESUME_FILES, "training_args.bin",
            "optimizer.bin", "scaler.pt"}
LEFT_OUT_PATTERNS = ("rng_state*.pth", "pytorch_model_fsdp*")


def left_out(name: str) -> bool:
    """A checkpoint file that is not published with the adapter (nor counted in its size)."""
    return name in LEFT_OUT or any(fnmatch.fnmatch(name, p) for p in LEFT_OUT_PATTERNS)


def export_adapter(checkpoint: str | Path, out_dir: str | Path, card: str, need_bytes: int = 0) -> dict:
    """Copy the complete checkpoint's adapter + tokenizer into out_dir, run config redacted, README.md = card."""
    checkpoint, out_dir = Path(checkpoint), Path(out_dir)
    missing = checkpoints.missing_files(checkpoint)
    if missing:
        raise FileNotFoundError(f"{checkpoint} is not a complete checkpoint (missing {', '.join(missing)}): "
                                "re-run 02 (it resumes), or point adapter_dir at the folder 02 wrote")
    with atomic.folder(out_dir, f"the adapter ({out_dir.name}/)", need_bytes) as tmp:
        for src in sorted(checkpoint.iterdir()):
            if left_out(src.name) or src.is_dir():
                continue
            if src.name == "run_config.json":
                (tmp / src.name).write_text(json.dumps(redact(json.loads(src.read_text())), indent=2))
            else:
                shutil.copyfile(src, tmp / src.name)  # not copy2: inputs are read-only, exports are not
            faultpoints.point("adapter")
        (tmp / "README.md").write_text(card)
        _verify_copies(checkpoint, tmp)
    files = sorted(p.name for p in out_dir.iterdir())
    return {"dir": str(out_dir), "files": files, "size_mb": round(sum(p.stat().st_size for p in out_dir.iterdir()) / 2**20, 2)}


def _verify_copies(checkpoint: Path, folder: Path) -> None:
    """Every file copied as it is equals the checkpoint's, by the SHA-256 its checksums.json records."""
    known = (checksums.read(checkpoint) or {}).get("files", {})
    copied = {n: m for n, m in known.items() if n not in ("run_config.json", "README.md") and (folder / n).is_file()}
    for name, meta in copied.items():
        if checksums.sha256(folder / name) != meta["sha256"]:
            raise OSError(f"the copy of {checkpoint / name} in the adapter export differs from it: the export is not "
                          "written; check the disk and run 04 again")
