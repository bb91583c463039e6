"""export_summary.json: what 04 decided and wrote (gate, plans, verification, folders, pushes), redacted, written last.

04 starts by removing an earlier summary (`reports.begin`): from then until this one is written, the folder
claims nothing. The summary names the checkpoint exported, lists every file of the artifact folders this run put
in the output (each with its size and SHA-256), and is written only once they are all in place and verified;
artifact folders an earlier export left and this one did not write go first, so the folder holds what the summary
says and nothing it does not. A step that was skipped (the GGUF of the embedded default, say) is listed as not
written, with its reason, in the disk plan too.
"""

from __future__ import annotations

from pathlib import Path

from nbutils.chain import MARKERS
from nbutils.export import diskplan
from nbutils.runtime.secrets import redact
from nbutils.train import atomic, reports, runlock

ARTIFACTS = diskplan.ORDER  # the folders 04 may write: adapter, adapter_gguf, gguf, merged


def written(disk: diskplan.DiskPlan, merged: dict | None, adapter: dict | None, gguf: dict | None) -> list[str]:
    """The artifact folders this run wrote into the output."""
    done = {"merged": merged is not None, "adapter": adapter is not None, "gguf": bool((gguf or {}).get("file")),
            "adapter_gguf": bool(((gguf or {}).get("lora") or {}).get("file"))}
    return [name for name in ARTIFACTS if done[name] and disk.kept(name)]


def disk_plan(disk: diskplan.DiskPlan, gguf: dict | None) -> dict:
    """The disk plan for the summary, with the GGUF files not written when the GGUF step skipped (and why)."""
    plan = diskplan.summary(disk)
    lora = (gguf or {}).get("lora") or {}
    reasons = {"gguf": None if (gguf or {}).get("file") else (gguf or {}).get("reason") or "gguf_type is empty",
               "adapter_gguf": None if lora.get("file") else lora.get("reason") or (gguf or {}).get("reason")
               or "gguf_type is empty"}
    for name, why in reasons.items():
        item = plan["artifacts"].get(name)
        if item and why and item["where"] != "none":
            plan["artifacts"][name] = {**item, "where": "none", "path": None, "why": f"not written: {why}"}
    return plan


def write_summary(out_dir: str | Path, summary: dict, kept=()) -> Path:
    """Earlier exports' artifact folders that this run did not write removed, then the summary (secrets scrubbed)
    listing every file of `kept` with its size and SHA-256, written atomically; the output_dir lock released."""
    out = Path(out_dir)
    for name in ARTIFACTS:
        if name not in kept and (out / name).exists():
            print(f"[export] removing {out / name}: an earlier export's, which this summary does not describe", flush=True)
            atomic.discard(out / name)
    try:
        reports.write_summary(out, MARKERS["export"], redact(summary), kept, "the export summary")
    finally:
        runlock.release(out)
    return out / MARKERS["export"]
