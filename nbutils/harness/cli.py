"""The harness command line: papermill-check runs notebooks the way a Kaggle background run does, and stricter.

    python -m nbutils.harness check [--twin all] [--jobs N]   # what `make papermill-check` runs (TWINS=0: no --twin)
    python -m nbutils.harness run NB [NB ...] [-p NAME VALUE ...] [--no-internet] [--time-budget S] [--out DIR]
                                                         # static checks too, unless --no-static
    python -m nbutils.harness lint NB [NB ...] [--platform colab]   # static checks only, no kernel (default: Kaggle)

`--twin NAME` (or `all`) runs in a twin of a Kaggle image (nbutils/harness/twin.py, kaggle-image/NAME.txt): a
copy per notebook with the nbutils dataset attached (pristine for the first; harness/shared_install.py); `check`
runs the project venv and the twins side by side (--jobs at a time, default all at once).
One line per problem: `<check-id> <notebook>[ cell <n>[ line <l>]][ [conditional: ...]]: <what> -- <fix>`; exit 1
when any is found.
`report.json` and `junit.xml` go to --out (default runs/papermill-check/).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nbutils import chain
from nbutils.harness import chainrun
from nbutils.harness.results import report
from nbutils.harness.runner import ROOT, lint, run, run_twins, with_static


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nbutils.harness", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for cmd in ("run", "lint", "check"):
        p = sub.add_parser(cmd)
        if cmd != "check":
            p.add_argument("notebooks", nargs="+", type=Path)
        p.add_argument("--out", type=Path, default=ROOT / "runs" / "papermill-check")
        if cmd != "lint":
            p.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"))
            p.add_argument("--no-internet", action="store_true")
            p.add_argument("--time-budget", type=float, default=600.0 if cmd == "check" else None)
            p.add_argument("--twin", action="append", default=[], metavar="NAME",
                           help="run in this Kaggle image twin (kaggle-image/NAME.txt; 'all': every snapshot); "
                                "check runs the project venv and the twins side by side")
        if cmd == "lint":
            p.add_argument("--platform", choices=("kaggle", "colab"), default="kaggle",
                           help="read branches and installs as this platform runs them (kaggle: a background run)")
        if cmd == "check":
            p.add_argument("--jobs", type=int, default=0, help="runs at a time (default: all at once)")
        if cmd == "run":
            p.add_argument("--no-static", action="store_true", help="skip the static checks (lint) before the run")
    args = parser.parse_args(argv)
    if args.command == "lint":
        return report(lint(args.notebooks, args.platform), args.out)
    params = {k: literal(v) for k, v in args.parameter}
    if args.command == "check":  # the default chain must work with the internet off: the embedded default needs none
        notebooks = [ROOT / nb for nb in chain.notebook_paths()]
        return report(chainrun.check(notebooks, args.out, params, args.time_budget, args.twin, args.jobs), args.out)
    internet = False if args.no_internet else None
    if args.twin:
        ran = lambda: run_twins(args.notebooks, args.out, params, internet, args.time_budget, args.twin)
    else:
        ran = lambda: run(args.notebooks, args.out, params, internet, args.time_budget)
    return report(ran() if args.no_static else with_static(args.notebooks, ran), args.out)


def literal(value: str):
    """A parameter's value as a Python literal (`True`, `4`, `[1, 'a']`), else as text."""
    import ast

    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return value


if __name__ == "__main__":
    sys.exit(main())
