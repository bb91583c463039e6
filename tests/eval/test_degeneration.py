"""The run-level half of degeneration (`nbutils.eval.degeneration`): the circuit breaker, summaries, the CLI."""

import json
import subprocess
import sys

import pytest

from nbutils.eval.degeneration import CircuitBreaker, DegenerationError, main, summarize
from nbutils.eval.detect import Verdict

PROSE = ("The adapter is trained in four-bit precision so that it fits on a T4, and only the small low-rank "
         "matrices receive gradients. ")


def test_cli_prints_one_verdict_per_record_then_a_summary(tmp_path, capsys):
    path = tmp_path / "gen.jsonl"
    records = [{"text": "A fine answer."}, {"text": "ha " * 20}, "{oops", {"text": 3}, {"other": "x"},
               {"text": "", "answer": PROSE}]
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")
    out = subprocess.run([sys.executable, "-m", "nbutils.eval.degeneration", "check", str(path)], capture_output=True,
                         text=True)
    lines = [json.loads(x) for x in out.stdout.splitlines()]
    assert out.returncode == 0 and len(lines) == len(records) + 1
    assert [x.get("line") for x in lines[:-1]] == [1, 2, 3, 4, 5, 6]
    assert lines[0]["degenerate"] is False and lines[1]["degenerate"] and lines[1]["reasons"]
    assert all("error" in lines[i] for i in (2, 3, 4)) and lines[5]["reasons"] == ["empty"]
    assert lines[-1]["summary"]["checked"] == 3 and lines[-1]["summary"]["unreadable_lines"] == 3
    assert main(["check", str(path), "--field", "answer"]) == 0  # in-process this time: no second interpreter
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["summary"]["checked"] == 1


def test_circuit_breaker_raises_with_share_examples_and_causes():
    breaker = CircuitBreaker(min_samples=4, max_share=0.5)
    breaker.update(["A good answer.", "ok " * 20])
    with pytest.raises(DegenerationError) as err:
        breaker.update(["la " * 200, "<|end|><|end|>"])
    msg = str(err.value)
    assert "3 of the first 4 generations (75%)" in msg and "..." in msg  # long example truncated
    assert "EOS" in msg and "pad token == EOS token" in msg and "chat template" in msg and "fp16" in msg


def test_circuit_breaker_quiet_below_the_threshold_and_judges_only_the_first_samples():
    breaker = CircuitBreaker(min_samples=4, max_share=0.5)
    breaker.update([PROSE, "ok " * 20, PROSE, "la " * 20])  # 2 of 4: not more than half
    breaker.update(["la " * 20] * 10)  # later garbage is for the report, not the breaker
    verdicts = [Verdict(True, ["loop"])] * 3 + [Verdict(False)]
    with pytest.raises(DegenerationError):
        CircuitBreaker(4, 0.5).update(verdicts)


def test_summarize_counts():
    rows = [{"tokens": 32, "eos": False, "verdict": Verdict(True, ["loop"])},
            {"tokens": 8, "eos": False, "guard_stopped": True, "reasons": ["loop"]},
            {"tokens": 3, "eos": True, "text": "Paris."},
            {"tokens": 12, "eos": False, "guard_stopped": True, "verdict": Verdict(True, ["word-soup"])}]
    s = summarize(rows, max_new_tokens=32)
    assert s["no_eos_at_max"] == 1 and s["tokens_saved"] == 24 + 20
    assert s["reasons"] == {"loop": 2, "word-soup": 1}
    assert s["eos_rate"] == pytest.approx(0.25) and s["degenerate_rate"] == pytest.approx(0.75) and s["n"] == 4
