"""export_summary.json: what 04 decided and wrote (gate, memory plan, verification, folders, pushes), redacted."""

from __future__ import annotations

import json
from pathlib import Path

from nbutils.chain import MARKERS
from nbutils.runtime.secrets import redact


def write_summary(out_dir: str | Path, summary: dict) -> Path:
    """Write the summary (secret values and secret-named keys scrubbed) and return its path."""
    path = Path(out_dir) / MARKERS["export"]
    path.write_text(json.dumps(redact(summary), indent=2, default=str))
    return path
