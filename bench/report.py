"""The figures of bench/results/*.json as markdown, for docs/benchmarks.md (`python -m bench.report`).

The docs quote measured figures from one source: the rows each bench saved, with the machine, its load and the
command that made them. tests/bench/test_bench_report.py keeps docs/benchmarks.md equal to this output.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench.machine import RESULTS


def _cell(value) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def section(bench: str, entry: dict) -> str:
    """One bench's rows as a table, under the command that made them and the machine they ran on."""
    m = entry["machine"]
    where = f"{m['gpu'] or m['cpu']}, {m['cores']} cores, torch {m['torch']}, {m['date'][:10]}, load average " \
            f"{' / '.join(str(x) for x in m['load_average_1_5_15'])}"
    lines = [f"### {bench}", "", f"`{entry['command']}` ({where})" + (f": {entry['note']}" if entry.get("note") else ""),
             "", "| metric | value | target | note |", "|---|---|---|---|"]
    lines += [f"| {_cell(r['metric'])} | {_cell(r['value'])} | {_cell(r.get('target', ''))} | {_cell(r.get('note', ''))} |"
              for r in entry["rows"]]
    return "\n".join(lines)


def markdown(folder: Path = RESULTS) -> str:
    """Every results file, every bench in it, in name order."""
    out = []
    for path in sorted(folder.glob("*.json")):
        results = json.loads(path.read_text())
        out.append(f"## {path.stem}\n\n" + "\n\n".join(section(b, results[b]) for b in sorted(results)))
    return "\n\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown())
