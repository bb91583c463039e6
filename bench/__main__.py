"""`make bench`: run every benchmark and print one table of measured figures.

Each bench module exposes `run() -> list[dict]` (keys: bench, metric, value, optional target/note).
Figures are measured on this machine in this run; ratios are measured side by side. Each bench's rows are kept,
with the machine, the load and the command, in bench/results/<machine>.json (bench/machine.py): the docs quote
their figures from there.
"""

import importlib
import sys
import time

from bench import machine

MODULES = ["bench.chain_bench", "bench.data_bench", "bench.degeneration_bench", "bench.dryrun_bench", "bench.gguf_bench",
           "bench.guard_bench", "bench.harness_bench", "bench.loss_bench", "bench.preference_bench",
           "bench.real_model_bench", "bench.throughput_bench", "bench.timeplan_bench", "bench.twin_bench"]


def print_table(rows: list[dict]) -> None:
    """The rows under their column names (no rows: the header alone)."""
    cols = ["bench", "metric", "value", "target", "note"]
    cells = [[str(r.get(c, "")) for c in cols] for r in rows]
    widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(cols)]
    line = lambda vals: "  ".join(v.ljust(w) for v, w in zip(vals, widths)).rstrip()  # noqa: E731
    print(line(cols))
    print(line(["-" * w for w in widths]))
    for row in cells:
        print(line(row))


def main(selected: list[str]) -> int:
    rows = []
    for name in MODULES:
        if selected and not any(s in name for s in selected):
            continue
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            rows.append({"bench": name.split(".")[-1], "metric": "skipped", "value": "-", "note": str(e)})
            continue
        t0 = time.perf_counter()
        found = module.run()
        rows.extend(found)
        short = name.split(".")[-1]
        machine.save(short.removesuffix("_bench"), found, f"python -m bench {short}")
        print(f"[bench] {name} done in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
