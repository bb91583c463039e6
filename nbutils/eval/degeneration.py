"""After generation: a circuit breaker for whole runs, summaries for the report, a command line.

The verdict itself (`detect`: loops wherever the text was cut off, in every script; soup, unicode junk,
empty output) is nbutils.eval.detect; the generate-time guard that stops only the rows that degenerate is
nbutils.eval.guard. `CircuitBreaker` stops a whole run when most early samples are garbage.

Command line:  python -m nbutils.eval.degeneration check FILE.jsonl [--field text]
"""

from __future__ import annotations

import argparse
import json
import sys

from nbutils.eval.detect import Verdict, detect

# ---- after generation ------------------------------------------------------------------------------------------------

class DegenerationError(RuntimeError):
    """Raised by CircuitBreaker: most early generations are garbage, so the run is stopped before it burns hours."""


class CircuitBreaker:
    """Raises DegenerationError when more than `max_share` of the first `min_samples` outputs degenerate."""

    def __init__(self, min_samples: int = 16, max_share: float = 0.5):
        self.min_samples = min_samples
        self.max_share = max_share
        self.seen: list[tuple[str, Verdict]] = []
        self.checked = False

    def update(self, items, verdicts: list[Verdict] | None = None) -> None:
        """Feed outputs (texts) or Verdicts (or texts plus their verdicts); checks once min_samples are in."""
        items = list(items) if isinstance(items, (list, tuple)) else [items]
        for k, item in enumerate(items):
            if isinstance(item, Verdict):
                self.seen.append(("", item))
            else:
                self.seen.append((item, verdicts[k] if verdicts is not None else detect(item)))
        if self.checked or len(self.seen) < self.min_samples:
            return
        self.checked = True
        first = self.seen[: self.min_samples]
        bad = [(t, v) for t, v in first if v.degenerate]
        share = len(bad) / len(first)
        if share > self.max_share:
            reasons: dict[str, int] = {}
            for _, v in bad:
                for r in v.reasons:
                    reasons[r] = reasons.get(r, 0) + 1
            examples = "\n".join(f"  - [{', '.join(v.reasons)}] {t[:160]!r}{'...' if len(t) > 160 else ''}"
                                 for t, v in bad[:3])
            raise DegenerationError(
                f"{len(bad)} of the first {len(first)} generations ({share:.0%}) are degenerate, more than the "
                f"{self.max_share:.0%} allowed; reasons: {reasons}.\nExamples:\n{examples}\nLikely causes: the model "
                "never learnt to emit EOS (pad token == EOS token, so EOS was masked out of the labels in training); "
                "a chat template different from the one used in training, or none; fp16 overflow (inf/NaN logits: "
                "use fp32 or bf16 where the GPU really supports it).")


def summarize(rows: list[dict], max_new_tokens: int) -> dict:
    """Rates and counts for a report over evaluation.generate's rows: text or verdict; optionally eos, tokens,
    guard_stopped (the guard cut the row short) with its reasons."""
    reasons: dict[str, int] = {}
    degenerate = eos = at_max = saved = 0
    for r in rows:
        stopped = bool(r.get("guard_stopped"))
        v = r.get("verdict") or (detect(r["text"]) if "text" in r else Verdict(stopped, list(r.get("reasons", []))))
        degenerate += v.degenerate or stopped
        for reason in dict.fromkeys(v.reasons or (r.get("reasons", []) if stopped else [])):
            reasons[reason] = reasons.get(reason, 0) + 1
        eos += bool(r.get("eos"))
        at_max += not r.get("eos") and not stopped and r.get("tokens", 0) >= max_new_tokens  # never said EOS
        saved += max(0, max_new_tokens - r.get("tokens", max_new_tokens)) if stopped else 0
    n = max(1, len(rows))
    return {"n": len(rows), "degenerate_rate": degenerate / n, "eos_rate": eos / n, "no_eos_at_max": at_max,
            "reasons": dict(sorted(reasons.items())), "tokens_generated": sum(r.get("tokens", 0) for r in rows),
            "tokens_saved": saved}


# ---- command line ------------------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nbutils.eval.degeneration", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="print one JSON verdict per JSONL record, then a summary line")
    check.add_argument("file")
    check.add_argument("--field", default="text", help="the field holding the generated text (default: text)")
    args = parser.parse_args(argv)
    counts = {"checked": 0, "degenerate": 0, "unreadable_lines": 0}
    reasons: dict[str, int] = {}
    with open(args.file, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                text = json.loads(line)[args.field]
                if not isinstance(text, str):
                    raise TypeError(f"field {args.field!r} holds {type(text).__name__}, not text")
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                counts["unreadable_lines"] += 1
                print(json.dumps({"line": n, "error": f"{type(e).__name__}: {e}"}))
                continue
            v = detect(text)
            counts["checked"] += 1
            counts["degenerate"] += v.degenerate
            for r in v.reasons:
                reasons[r] = reasons.get(r, 0) + 1
            print(json.dumps({"line": n, "degenerate": v.degenerate, "reasons": v.reasons, "metrics": v.metrics}))
    rate = counts["degenerate"] / counts["checked"] if counts["checked"] else 0.0
    print(json.dumps({"summary": {**counts, "degenerate_rate": round(rate, 4), "reasons": reasons}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
