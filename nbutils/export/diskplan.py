"""The disk plan, made before 04 writes anything: what each artifact will weigh, where it can go, what is kept.

Sizes come from the parameter count and the dtypes (the merged model is fp16; each GGUF type has its bits per
weight), the adapter from the checkpoint's own files. The output folder keeps what fits under both its free
space and the platform's limit (Kaggle keeps 20 GiB of /kaggle/working), in the order of value: the adapter,
then the GGUF, then the merged model. Big intermediates (the merged model a GGUF is converted from, the f16
GGUF a k-quant is made from) go to the temp folder. What does not fit the output stays in the temp folder until
the session ends, or is not written at all, and the plan says which and why. Sizes under 0.01 GiB read in MB.
The temp folder is this output folder's own (`work_area`): two notebooks sharing /tmp with two output folders never
write, or remove, each other's files. Before the plan measures it, what earlier runs left there (a killed run's
temporary names and GGUF scratch files, an earlier export's temp-only artifacts) is removed (`clean_work_area`).
Every artifact is written the suite's one way (`nbutils.train.atomic`): under a temporary name, fsynced, renamed
when complete (a folder swapped in whole), so a failure never leaves a half-written file under the final name.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from nbutils.train import atomic, diskspace, runlock

GIB = 2**30
KAGGLE_OUTPUT_LIMIT = 20 * GIB  # what Kaggle keeps of /kaggle/working after a run
MARGIN = 64 * 2**20  # left free on every disk (at most a 20th of it): logs, the summary, the cards
ORDER = ("adapter", "adapter_gguf", "gguf", "merged")  # the order of value: kept first when space is short
WORK_ROOT = "export"  # under the platform's temp root (/kaggle/temp, /tmp): one work area per output folder in it
SCRATCH = "gguf-work"  # the GGUF step's scratch folder in a work area: emptied by every run that completes
# GiB per type for Llama-3-8B (8.03e9 parameters), from llama.cpp's quantize table (tools/quantize/quantize.cpp,
# F16/BF16 there are given for Mistral-7B: 2 bytes a weight). Bits per weight = GiB * 2**33 / 8.03e9.
LLAMA3_8B_GIB = {"q8_0": 7.96, "q6_k": 6.14, "q5_k_m": 5.33, "q5_k_s": 5.21, "q5_0": 5.21, "q4_k_m": 4.58,
                 "q4_k_s": 4.37, "q4_0": 4.34, "q3_k_l": 4.03, "q3_k_m": 3.74, "q3_k_s": 3.41, "q2_k": 2.96}
BITS = {"f32": 32.0, "f16": 16.0, "bf16": 16.0, **{t: g * 2**33 / 8.03e9 for t, g in LLAMA3_8B_GIB.items()}}


def gguf_bytes(params: int, quant_type: str, vocab_bytes: int = 0) -> int:
    """A GGUF's size: the weights at the type's bits per weight, plus the vocabulary stored as metadata."""
    return int(params * BITS.get(quant_type.lower(), 16.0) / 8) + vocab_bytes


def folder_bytes(folder: str | Path) -> int:
    """Bytes of the files under a folder (0 when it does not exist)."""
    folder = Path(folder)
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.exists() else 0


@dataclass
class Item:
    name: str
    size: int
    where: str = "none"  # output | temp (kept there until the session ends) | none (not written)
    reason: str = ""  # why not in the output


@dataclass
class DiskPlan:
    out: Path
    temp: Path
    items: dict[str, Item]
    out_room: int  # bytes the output may take: free space and the platform's limit, less the margin
    temp_room: int  # bytes free in the temp folder, less the margin
    shared: bool  # output and temp are on one filesystem (one budget)
    temp_extra: int = 0  # intermediates: the f16 GGUF a k-quant is made from
    temp_only: tuple[str, ...] = ()  # wanted only as an intermediate (the merged model with export_merged=False)
    download: int = 0  # the base weights the merge downloads into the Hub cache first, taken from the room above
    cache: Path | None = None  # where they go

    def path(self, name: str) -> Path | None:
        """Where an artifact is written: <out>/<name>, <temp>/<name>, or None when it is not written."""
        item = self.items.get(name)
        if item is None or item.where == "none":
            return None
        return (self.out if item.where == "output" else self.temp) / name

    def kept(self, name: str) -> bool:
        return name in self.items and self.items[name].where == "output"


def _need(items: dict[str, Item], temp_extra: int) -> tuple[int, int]:
    """(output, temp) bytes at the peak: the GGUF is converted in temp, then moved."""
    out = sum(i.size for i in items.values() if i.where == "output")
    temp = sum(i.size for i in items.values() if i.where == "temp")
    if "gguf" in items and items["gguf"].where != "none":
        temp += temp_extra + (items["gguf"].size if items["gguf"].where == "output" else 0)
    return out, temp


def _fits(plan: DiskPlan) -> bool:
    out, temp = _need(plan.items, plan.temp_extra)
    if plan.shared:  # one disk: everything within its free space, the output alone within its own room (a limit)
        both = out + temp - (plan.items["gguf"].size if plan.kept("gguf") else 0)  # the GGUF moves, not copied
        return both <= plan.temp_room and out <= plan.out_room
    return out <= plan.out_room and temp <= plan.temp_room


def decide(plan: DiskPlan, limit_text: str) -> DiskPlan:
    """Place each artifact in the order of value: the output when it still fits, else the temp folder, else
    nowhere; every artifact not in the output says why."""
    for item in plan.items.values():
        item.where = "none"
    merged = plan.items.get("merged")
    if merged:  # a GGUF is made from it: while the others are placed it is counted in temp, its cheapest place
        merged.where = "temp"
        if not _fits(plan):
            merged.where = "none"
    for name in ORDER:
        item = plan.items.get(name)
        if item is None:
            continue
        for item.where in ("output", "temp", "none"):
            if (item.where == "none" or _fits(plan)) and not (item.where == "output" and name in plan.temp_only):
                break
        if name in plan.temp_only and item.where == "temp":
            item.reason = "export_merged=False: written to the temp folder only, to convert the GGUF from"
        elif item.where != "output":
            item.reason = _why(plan, item, limit_text)
    gguf = plan.items.get("gguf")
    if gguf and gguf.where != "none" and merged and merged.where == "none":
        gguf.where, gguf.reason = "none", "the merged model it is converted from has no room to be written"
    return plan


def _why(plan: DiskPlan, item: Item, limit_text: str) -> str:
    """Why an artifact is not in the output, with the figures."""
    used, _ = _need({n: i for n, i in plan.items.items() if n != item.name and i.where == "output"}, 0)
    why = (f"{_size(item.size)} does not fit in the {_size(max(0, plan.out_room - used))} left in the "
           f"output ({limit_text})")
    if item.where == "temp":
        return why + "; in the temp folder until the session ends"
    if item.name == "gguf" and plan.items.get("merged"):
        peak = item.size + plan.items["merged"].size + plan.temp_extra
        return (f"converting needs the merged model and the GGUF on disk at once ({_size(peak)}), more than "
                f"the room in the output and the temp folder ({_size(plan.temp_room)} free)")
    return why + f", nor in the temp folder ({_size(plan.temp_room)} free)"


def make_plan(out: str | Path, temp: str | Path, sizes: dict[str, int], limit: int | None = None,
              used: int = 0, temp_extra: int = 0, limit_name: str = "", temp_only: tuple[str, ...] = (),
              download: tuple[int, Path | None] = (0, None)) -> DiskPlan:
    """The plan for `sizes` (artifact -> bytes); `limit`: the platform's cap on the output, `used`: already in it;
    `download`: (bytes, folder) the base weights will take in the Hub cache before anything is written, counted
    against the free space of whichever of the two folders shares its disk."""
    out, temp = Path(out), Path(temp)
    for p in (out, temp):
        p.mkdir(parents=True, exist_ok=True)
    out_free, temp_free = shutil.disk_usage(out).free, shutil.disk_usage(temp).free
    if download[0] and download[1] is not None:
        cache_dev = os.stat(_existing(download[1])).st_dev
        out_free -= download[0] * (os.stat(out).st_dev == cache_dev)
        temp_free -= download[0] * (os.stat(temp).st_dev == cache_dev)
    room = out_free if limit is None else min(out_free, limit - used)
    limit_text = f"{_size(out_free)} free there" + (f"; {limit_name} {_size(limit - used)} left under it"
                                                    if limit is not None else "")
    plan = DiskPlan(out, temp, {n: Item(n, s) for n, s in sizes.items()}, max(0, room - min(MARGIN, room // 20)),
                    max(0, temp_free - min(MARGIN, temp_free // 20)), os.stat(out).st_dev == os.stat(temp).st_dev,
                    temp_extra, temp_only, download[0] if download[1] is not None else 0, download[1])
    return decide(plan, limit_text)


def _existing(path: Path) -> Path:
    """The folder itself, or its nearest parent that exists (a Hub cache not created yet)."""
    path = Path(path).resolve()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def base_download(base_model: str, params: int) -> tuple[int, Path | None]:
    """(bytes, Hub cache folder) the merge downloads before loading the base: its weights in 16 bits, as models are
    published, where they are not cached yet (04 often runs in a session of its own: on Kaggle each notebook does).
    (0, None) for a local folder (the embedded default's too) or weights already in the cache."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    from nbutils.runtime.modelsource import resolve

    base_model = resolve(base_model)
    if Path(base_model).is_dir():
        return 0, None

    try:
        snapshot = Path(snapshot_download(base_model, local_files_only=True))
    except (LocalEntryNotFoundError, OSError, ValueError):  # nothing of it cached, or not a Hub id
        snapshot = None
    if snapshot is not None and _weights_complete(snapshot):
        return 0, None
    return params * 2, Path(constants.HF_HUB_CACHE)


def _weights_complete(snapshot: Path) -> bool:
    """The weights transformers loads are all in the snapshot: safetensors (every shard its index names), which it
    asks for first; an older upload's pytorch_model*.bin only where the Hub has no safetensors (huggingface_hub
    keeps that answer in the cache's .no_exist folder), else it downloads the safetensors anyway."""
    import json

    def complete(single: str, index: str) -> bool:
        if (snapshot / index).exists():
            shards = set(json.loads((snapshot / index).read_text(encoding="utf-8")).get("weight_map", {}).values())
            return bool(shards) and all((snapshot / s).exists() for s in shards)
        return (snapshot / single).exists()

    if (snapshot / "model.safetensors.index.json").exists() or (snapshot / "model.safetensors").exists():
        return complete("model.safetensors", "model.safetensors.index.json")
    none_there = snapshot.parent.parent / ".no_exist" / snapshot.name / "model.safetensors"
    return none_there.exists() and complete("pytorch_model.bin", "pytorch_model.bin.index.json")


TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "merges.txt", "tokenizer_config.json")


def export_sizes(ckpt: str | Path, params: int, adapter: bool, merged: bool, gguf_type: str,
                 gguf_lora: bool) -> tuple[dict[str, int], int]:
    """Each artifact's bytes in the order of value, and the temp-only intermediate (an f16 GGUF before a k-quant).
    An unknown gguf_type is refused here, before the merge and a llama-quantize build it would cost."""
    from nbutils.export.adapter import left_out

    if gguf_type and gguf_type.lower() not in BITS:
        raise ValueError(f"gguf_type={gguf_type!r} is not a GGUF type 04 writes: one of {', '.join(BITS)}, or \"\" "
                         "for no GGUF")
    ckpt = Path(ckpt)
    vocab = sum((ckpt / f).stat().st_size for f in TOKENIZER_FILES if (ckpt / f).exists())
    files = [p for p in ckpt.iterdir() if p.is_file() and not left_out(p.name)]
    sizes = {}
    if adapter:
        sizes["adapter"] = sum(p.stat().st_size for p in files)
    if gguf_type and gguf_lora:  # the LoRA matrices in f16: half their fp32 safetensors
        sizes["adapter_gguf"] = sum(p.stat().st_size for p in files if p.suffix == ".safetensors") // 2
    if gguf_type:
        sizes["gguf"] = gguf_bytes(params, gguf_type, vocab)
    if merged or gguf_type:
        sizes["merged"] = params * 2 + vocab
    quantized = gguf_type and gguf_type.lower() not in ("f32", "f16", "bf16", "q8_0")
    return sizes, gguf_bytes(params, "f16", vocab) if quantized else 0


def for_export(out: str | Path, ckpt: str | Path, params: int, adapter: bool, merged: bool, gguf_type: str,
               gguf_lora: bool, base_model: str = "") -> DiskPlan:
    """04's plan: sizes from the checkpoint and the parameter count, this platform's output limit and temp folder,
    and the base weights a merge downloads first (`base_download`; with base_model)."""
    from nbutils.runtime.environment import detect_platform

    platform = detect_platform()
    sizes, extra = export_sizes(ckpt, params, adapter, merged, gguf_type, gguf_lora)
    out = Path(out).resolve()
    runlock.acquire(out)  # re-entrant (04's begin took it): no other run writes this output's work area meanwhile
    temp = work_area(platform.temp_root, out)
    gone = clean_work_area(temp) + clean_work_area(platform.temp_root / WORK_ROOT)  # the second: the old flat layout
    if gone:
        print(f"[disk plan] removed what earlier runs left in the temp folder: "
              f"{', '.join(f'{p.relative_to(platform.temp_root)} ({_size(n)})' for p, n in gone)}; "
              f"{_size(sum(n for _, n in gone))} in all", flush=True)
    limited = platform.name == "kaggle" and out.is_relative_to(platform.working_root.resolve())
    used = folder_bytes(platform.working_root) if limited else 0
    if limited:  # an earlier export's artifacts here are replaced, or removed at the end: not what stays under 20 GiB
        used -= sum(folder_bytes(out / name) for name in ORDER)
    download = base_download(base_model, params) if base_model and "merged" in sizes else (0, None)
    return make_plan(out, temp, sizes, KAGGLE_OUTPUT_LIMIT if limited else None, used, extra,
                     "Kaggle keeps 20 GiB of /kaggle/working:", () if merged else ("merged",), download)


def work_area(temp_root: str | Path, out: str | Path) -> Path:
    """The output folder's own temp folder, <temp_root>/export/<its name>-<hash of its path>: two output folders on one
    machine (two notebooks sharing /tmp) never share a merged model, a GGUF scratch file or a cleanup."""
    out = Path(out).resolve()
    return Path(temp_root) / WORK_ROOT / f"{out.name}-{hashlib.sha256(str(out).encode()).hexdigest()[:8]}"


def _own(name: str) -> bool:
    """A name 04 writes at the top of a work area: an artifact folder, its temporary or trash name while it is built
    or swapped (`atomic.folder`), or the GGUF scratch folder. Anything else there (the unpacked converter, a file of
    the user's) is not the cleanup's. A trash name (`.trash-<name>-<id>`, a removal a kill cut short) is its name's."""
    if name.startswith(".trash-"):
        name = name[len(".trash-"):].rsplit("-", 1)[0]
    return name == SCRATCH or any(name == n or name.startswith(f"{n}.tmp-") for n in ORDER)


def leftovers(temp: str | Path) -> list[Path]:
    """What earlier runs left in a work area: every name of `_own` at its top (an earlier export's temp-only
    artifacts included: its summary is gone, this run writes them again) and what the GGUF step's scratch folder
    holds (a killed conversion's `.partial`, an f16 or base GGUF, llama.cpp's runtime files)."""
    temp = Path(temp)
    if not temp.is_dir():
        return []
    found = sorted(p for p in temp.iterdir() if _own(p.name) and p.name != SCRATCH)
    return found + (sorted((temp / SCRATCH).iterdir()) if (temp / SCRATCH).is_dir() else [])


def clean_work_area(temp: str | Path) -> list[tuple[Path, int]]:
    """Remove `leftovers(temp)` before the plan measures the temp folder, so a rerun after a kill plans with the room
    a first run had; (path, bytes) for each. Call it holding the output folder's lock (`for_export` does)."""
    gone = []
    for path in leftovers(temp):
        size = folder_bytes(path) if path.is_dir() else path.stat().st_size
        atomic.discard(path)  # renamed aside first: a kill half-way leaves a trash name, removed next time
        gone.append((path, size))
    return gone


def _size(n: int) -> str:
    return diskspace.size_text(n / diskspace.MB)


def text(plan: DiskPlan) -> str:
    """The plan as a few lines: each artifact, its size and where it goes (and why not the output)."""
    lines = [f"[disk plan] output {plan.out}: {_size(plan.out_room)} usable; temp {plan.temp}: "
             f"{_size(plan.temp_room)} free" + (" (same disk)" if plan.shared else "")]
    if plan.download:
        lines.append(f"  base model   {_size(plan.download):>10} -> downloaded into the Hub cache {plan.cache} first "
                     "(not cached here), counted above where it shares a disk")
    for item in plan.items.values():
        where = {"output": "output", "temp": f"temp only ({item.reason})", "none": f"not written ({item.reason})"}
        lines.append(f"  {item.name:<13} {_size(item.size):>10} -> {where[item.where]}")
    return "\n".join(lines)


def summary(plan: DiskPlan) -> dict:
    """For export_summary.json: each artifact's size, where it went (path) and why it is not in the output."""
    return {"output": str(plan.out), "temp": str(plan.temp), "output_room_gib": round(plan.out_room / GIB, 3),
            "temp_room_gib": round(plan.temp_room / GIB, 3),
            "artifacts": {n: {"size_gib": round(i.size / GIB, 4), "where": i.where,
                              "path": str(plan.path(n)) if plan.path(n) else None, "why": i.reason}
                          for n, i in plan.items.items()}}


def move_into(src: str | Path, dest_dir: str | Path) -> Path:
    """Move a finished file into dest_dir without a half-written copy ever under its name (an atomic copy, then the
    source removed, across disks; a rename on one)."""
    src, dest_dir = Path(src), Path(dest_dir)
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / src.name
    if os.stat(src.parent).st_dev == os.stat(dest_dir).st_dev:
        os.replace(src, dest)
        atomic.fsync_dir(dest_dir)
        return dest
    atomic.copy_file(src, dest, f"the GGUF ({dest.name})")
    src.unlink()
    return dest
