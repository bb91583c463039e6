"""Where every record read ends up, for 01's SFT data and 05's preference data alike: kept, quarantined (source, line,
reason), or a duplicate of an earlier record, listed with the line it repeats. The counts add up:
records == kept + quarantined + duplicates (+ too_long in 01). `quarantine.jsonl` lists every record kept out,
duplicates included ({"source", "line", "reason"}; a duplicate's reason is "duplicate: ..." and it also names the
first record as "repeats": {"source", "line"}).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Ledger:
    """The quarantine list, the counts, and the first place each record was seen (to name what a duplicate repeats).

    strict: the first bad record raises `error` naming its file and line instead of being quarantined."""

    strict: bool = False
    error: type = ValueError
    extra: tuple = ()
    quarantine: list[dict] = field(default_factory=list)
    counts: dict = field(default_factory=dict)
    shapes: dict = field(default_factory=dict)
    inputs: dict = field(default_factory=dict)
    seen: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        self.counts = {k: 0 for k in ("records", "kept", "quarantined", "duplicates", *self.extra)} | self.counts

    def bad(self, source: str, line: int, reason: str, key: str = "quarantined", stop: bool = True) -> None:
        """One record kept out, with its reason (counted under `key`: quarantined, or too_long in 01). stop=False: kept
        out under strict too (01's max_seq_len="auto" leaves the longest records out by design)."""
        if self.strict and stop:
            raise self.error(f"{source} line {line}: {reason} (strict=True stops at the first bad record)")
        self.quarantine.append({"source": source, "line": line, "reason": reason})
        self.counts[key] += 1

    def first(self, key, source: str, line: int) -> bool:
        """True the first time `key` is seen; after that the record is a duplicate, listed with the line it repeats."""
        if key not in self.seen:
            self.seen[key] = (source, line)
            return True
        src, ln = self.seen[key]
        where = f"line {ln}" if src == source else f"{src} line {ln}"
        self.quarantine.append({"source": source, "line": line, "reason": f"duplicate: repeats {where}",
                                "repeats": {"source": src, "line": ln}})
        self.counts["duplicates"] += 1
        return False

    def reasons(self) -> dict[str, int]:
        """Records kept out, by reason id (the text before the first colon)."""
        out: dict[str, int] = {}
        for q in self.quarantine:
            rid = q["reason"].split(":")[0]
            out[rid] = out.get(rid, 0) + 1
        return dict(sorted(out.items()))

    def write(self, out_dir: str | Path, write_text=None) -> Path:
        """quarantine.jsonl in out_dir: one line per record kept out. write_text(path, text): how to write it (05
        passes nbutils.train.atomic's, which never leaves half a ledger under the final name)."""
        path = Path(out_dir) / "quarantine.jsonl"
        text = "".join(json.dumps(q) + "\n" for q in self.quarantine)
        write_text(path, text) if write_text else path.write_text(text)
        return path
