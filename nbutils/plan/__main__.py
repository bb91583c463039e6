"""python -m nbutils.plan dry-run MODEL [--out DIR] [--through STAGE] [-p NAME VALUE ...]: the dry run (nbutils/plan/dryrun.py).

MODEL is a Hub id (only config.json, the tokenizer files and generation_config.json are fetched) or a folder
holding those files (a download, a Kaggle Model input). Exit 0 when the chain passes on the model's twin, 1 when
anything failed (every problem is printed with its notebook, cell and message).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nbutils import chain


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nbutils.plan", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    dry = sub.add_parser("dry-run", help="a twin of the model's exact architecture through 01 -> 04 on the CPU")
    dry.add_argument("model", help="a Hub id (owner/name) or a folder with config.json and the tokenizer files")
    dry.add_argument("--out", type=Path, default=None, help="where its files go (default: runs/dry-run/<model>/)")
    dry.add_argument("--through", default="export", choices=[s.stage for s in chain.STAGES[1:]],
                     help="the last notebook's stage (default: export, 01 -> 04; preference adds 05)")
    dry.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                     help="a notebook parameter, as `python -m nbutils.harness run` takes it")
    args = parser.parse_args(argv)
    from nbutils.harness.cli import literal  # the harness's rule for -p values
    from nbutils.plan.dryrun import dry_run

    run = dry_run(args.model, args.out, {k: literal(v) for k, v in args.parameter}, args.through)
    print(run.report())
    return 0 if run.ok else 1


if __name__ == "__main__":
    sys.exit(main())
