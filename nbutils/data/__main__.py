"""`python -m nbutils.data prepare INPUT [INPUT ...] --out DIR ...`: 01's data preparation from a shell."""

from __future__ import annotations

import argparse
import json
import sys

from nbutils.data import readers, splits


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nbutils.data", description="Prepare chat training data.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="raw files -> train/eval splits + manifest + quarantine")
    p.add_argument("inputs", nargs="+")
    p.add_argument("--out", required=True)
    p.add_argument("--format", default="auto", choices=["auto", *readers.FORMATS])
    p.add_argument("--tokenizer", default="embedded", help="path or hub id; default: the embedded default's")
    p.add_argument("--max-seq-len", type=lambda v: v if v == "auto" else int(v), default="auto",
                   help="auto: covers 99%% of records, capped by the model's positions")
    p.add_argument("--eval-fraction", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-records", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=16, help="per-device batch size the batching plan is made for")
    p.add_argument("--columns", default="", help="user=COL,assistant=COL[,system=COL]; default: auto-detect")
    p.add_argument("--split", default=None, help="the split of a saved HF dataset folder with several; default: train")
    p.add_argument("--strict", action="store_true", help="stop at the first bad record")
    p.add_argument("--truncate", action="store_true", help="cut long records to --max-seq-len instead of keeping them out")
    p.add_argument("--train-on-prompt", action="store_true", help="labels on every token, not only the answers")
    args = parser.parse_args(argv)
    try:
        m = splits.prepare(args.inputs, args.out, args.tokenizer, max_seq_len=args.max_seq_len,
                    eval_fraction=args.eval_fraction, seed=args.seed, max_records=args.max_records, fmt=args.format,
                    strict=args.strict, truncate=args.truncate, train_on_prompt=args.train_on_prompt,
                    batch_size=args.batch_size, columns=splits.parse_columns(args.columns), split=args.split)
    except (splits.DataError, FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(json.dumps({"counts": m["counts"], "splits": m["splits"], "batching": m["batching"]["strategy"],
                      "out": args.out}))
    return 0



if __name__ == "__main__":
    sys.exit(main())
