"""docs/benchmarks.md quotes bench/results/*.json: the figures have one source, and each names its command."""

import json
from pathlib import Path

from bench import report

ROOT = Path(__file__).resolve().parents[2]


def test_the_docs_carry_the_recorded_figures():
    assert report.markdown() in (ROOT / "docs" / "benchmarks.md").read_text(), \
        "docs/benchmarks.md is stale: paste `python -m bench.report` under its 'Recorded figures' heading"


def test_a_section_names_the_command_the_machine_and_every_row(tmp_path):
    machine = {"cpu": "AMD EPYC", "cores": 2, "gpu": None, "torch": "2.13.0", "date": "2026-11-25T10:00:00+00:00",
               "load_average_1_5_15": [1.0, 0.5, 0.2]}
    rows = [{"metric": "a | b", "value": 1.5, "target": ">= 1"}, {"metric": "c", "value": "not run", "note": "no GPU"}]
    (tmp_path / "cpu-x-2c.json").write_text(json.dumps({"loss": {"machine": machine, "command": "python -m bench loss_bench",
                                                                "rows": rows}}))
    text = report.markdown(tmp_path)
    assert "## cpu-x-2c" in text and "`python -m bench loss_bench` (AMD EPYC, 2 cores" in text
    assert "| a \\| b | 1.5 | >= 1 |  |" in text and "| c | not run |  | no GPU |" in text
