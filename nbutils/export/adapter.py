"""Adapter-only export, the light option: the LoRA weights, the tokenizer (chat template included), the
run's configuration, and a model card. Megabytes instead of gigabytes; needs the base model to load."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from nbutils.runtime.secrets import redact
from nbutils.train import checkpoints

# Trainer state and resume files are for continuing a run, not for using the model.
LEFT_OUT = {checkpoints.MARKER, "trainer_state.json", *checkpoints.RESUME_FILES}


def export_adapter(checkpoint: str | Path, out_dir: str | Path, card: str) -> dict:
    """Copy the complete checkpoint's adapter + tokenizer into out_dir, run config redacted, README.md = card."""
    checkpoint, out_dir = Path(checkpoint), Path(out_dir)
    missing = checkpoints.missing_files(checkpoint)
    if missing:
        raise FileNotFoundError(f"{checkpoint} is not a complete checkpoint (missing {', '.join(missing)}): "
                                "re-run 02 (it resumes), or point adapter_dir at the folder 02 wrote")
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    for src in sorted(checkpoint.iterdir()):
        if src.name in LEFT_OUT or src.is_dir():
            continue
        if src.name == "run_config.json":
            (out_dir / src.name).write_text(json.dumps(redact(json.loads(src.read_text())), indent=2))
        else:
            shutil.copyfile(src, out_dir / src.name)  # not copy2: inputs are read-only, exports are not
    (out_dir / "README.md").write_text(card)
    files = sorted(p.name for p in out_dir.iterdir())
    return {"dir": str(out_dir), "files": files, "size_mb": round(sum(p.stat().st_size for p in out_dir.iterdir()) / 2**20, 2)}
