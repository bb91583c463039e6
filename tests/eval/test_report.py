"""What 03 shows: one line per model."""

from nbutils.eval import report

BLOCK = {"task_metric": 0.0, "eval_loss": 6.146779537200928, "perplexity": 467.2, "n": 48, "degenerate_rate": 0.125,
         "eos_rate": 0.8958333333333334, "no_eos_at_max": 1, "reasons": {"empty": 1, "char-repeat": 1},
         "tokens_generated": 280, "tokens_saved": 32}


def test_model_line_is_one_line_with_every_figure():
    line = report.model_line("base", BLOCK)
    assert "\n" not in line
    assert line == ("base: task metric 0.000, eval loss 6.1468, degenerate 12.5% (char-repeat 1, empty 1), EOS 89.6% "
                    "of 48 generations; 280 tokens generated, 32 saved by the guard")
    assert "degenerate 0.0% (none)" in report.model_line("tuned", {**BLOCK, "degenerate_rate": 0.0, "reasons": {}})
