"""The harness's results: one row per notebook, report.json, junit.xml and the summary table."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape

from nbutils.harness.problems import Problem


@dataclass
class Result:
    notebook: str
    status: str = "passed"
    seconds: float = 0.0
    problems: list[Problem] = field(default_factory=list)
    executed: str = ""

    @property
    def failing(self) -> list[Problem]:
        return [p for p in self.problems if not p.allowed]


def write_reports(out: Path, results: list[Result]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    data = {"ok": not any(r.failing for r in results),
            "notebooks": [{**asdict(r), "problems": [asdict(p) for p in r.problems],
                           "allowances": [str(p) for p in r.problems if p.allowed]} for r in results]}
    (out / "report.json").write_text(json.dumps(data, indent=2))
    cases = []
    for r in results:
        body = "".join(f'<failure type="{escape(p.check)}" message="{escape(str(p), {chr(34): "&quot;"})}"/>'
                       for p in r.failing)
        cases.append(f'<testcase classname="papermill-check" name="{escape(r.notebook)}" time="{r.seconds}">'
                     f"{body}</testcase>")
    failures = sum(1 for r in results if r.failing)
    (out / "junit.xml").write_text(f'<?xml version="1.0" encoding="utf-8"?>\n<testsuite name="papermill-check" '
                                   f'tests="{len(results)}" failures="{failures}">{"".join(cases)}</testsuite>\n')


def summary_table(results: list[Result]) -> str:
    rows = [("notebook", "status", "seconds", "first problem")]
    for r in results:
        allowed = ", ".join(f"{p.check} (cell {p.cell})" for p in r.problems if p.allowed)
        first = str(r.failing[0]) if r.failing else (f"allowed: {allowed}" if allowed else "-")
        rows.append((r.notebook, r.status, f"{r.seconds:.1f}", first[:100]))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row[:3], widths)) + "  " + row[3] for row in rows)


def report(results: list[Result], out: Path | None) -> int:
    for r in results:
        for p in r.problems:
            print(p)
    if out is not None:
        write_reports(out, results)
    print(summary_table(results))
    return 1 if any(r.failing for r in results) else 0
