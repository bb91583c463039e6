"""What 03 shows: one line per model, the per-sample table (escaped, tinted by verdict, long text cut), the reasons chart."""

import pytest

from nbutils.eval import report

BLOCK = {"task_metric": 0.0, "eval_loss": 6.146779537200928, "perplexity": 467.2, "n": 48, "degenerate_rate": 0.125,
         "eos_rate": 0.8958333333333334, "no_eos_at_max": 1, "reasons": {"empty": 1, "char-repeat": 1},
         "tokens_generated": 280, "tokens_saved": 32}


def test_model_line_is_one_line_with_every_figure():
    line = report.model_line("base", BLOCK)
    assert "\n" not in line
    assert line == ("base: exact_match 0.000 (primary), eval loss 6.1468, degenerate 12.5% (char-repeat 1, empty 1), EOS 89.6% "
                    "of 48 generations; 280 tokens generated, 32 saved by the guard")
    assert "degenerate 0.0% (none)" in report.model_line("tuned", {**BLOCK, "degenerate_rate": 0.0, "reasons": {}})


def test_the_headline_names_the_primary_metric_when_it_is_not_exact_match():
    """Long answers: ROUGE-L is primary; a headline that said "task metric" showed exact match, 0.000 both ways."""
    line = report.model_line("tuned", {**BLOCK, "primary_metric": {"name": "rouge_l", "value": 0.4125}})
    assert line.startswith("tuned: rouge_l 0.412 (primary), exact_match 0.000, eval loss 6.1468")



def test_table_escapes_tints_and_cuts():
    rows = [{"prompt": "<b>q</b>", "answer": "x" * 500, "verdict": "degenerate: loop"},
            {"prompt": "fine", "answer": "city", "verdict": "ok", "correct": True},
            {"prompt": "wrong", "answer": "town", "verdict": "ok", "correct": False}]
    table = report.samples_table_html(rows, ["prompt", "answer"])
    assert "&lt;b&gt;q&lt;/b&gt;" in table and "<b>q</b>" not in table
    assert table.count('<tr class="bad">') == 1 and table.count('<tr class="ok">') == 1 and table.count('<tr class="">') == 1
    assert "x" * 400 + " …" in table and "x" * 401 not in table
    assert table.count("<th>") == 2


def test_reasons_chart_is_written(tmp_path):
    path = tmp_path / "reasons.png"
    fig = report.reasons_chart({"base": {"loop": 3, "empty": 1}, "tuned": {"loop": 1}}, path)
    assert path.stat().st_size > 1000
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["empty", "loop"]
    report.reasons_chart({"base": {}}, tmp_path / "none.png")  # nothing degenerate: one empty group, no crash
    assert (tmp_path / "none.png").exists()


def test_03s_pages_and_charts_are_whole_under_their_names_or_not_there(tmp_path, monkeypatch):
    rows = [{"prompt": "q", "answer": "a", "verdict": "ok"}]
    report.write_pages(tmp_path, rows, ["prompt", "answer"], {"base": {"loop": 1}})
    assert "<table" in (tmp_path / "samples.html").read_text() and (tmp_path / "reasons.png").stat().st_size > 1000
    scores = {"primary": "exact_match",
              "metrics": {"exact_match": {"base": {"mean": 0.2, "ci": [0.1, 0.3]}, "tuned": {"mean": 0.8, "ci": [0.7, 0.9]}}}}
    report.metric_chart(scores, tmp_path / "metrics.png")
    assert (tmp_path / "metrics.png").stat().st_size > 1000

    def dies_mid_write(counts, path):  # a kill or a full disk after the first bytes
        open(path, "wb").write(b"\x89PNG")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(report, "reasons_chart", dies_mid_write)
    (tmp_path / "again").mkdir()
    with pytest.raises(OSError, match="reasons chart"):
        report.write_pages(tmp_path / "again", rows, ["prompt", "answer"], {"base": {}})
    assert sorted(p.name for p in (tmp_path / "again").iterdir()) == ["samples.html"]  # no partial PNG, no temp name


def test_a_long_prompt_shows_its_end_where_the_question_is():
    prompt = "<|start_header_id|>system<|end_header_id|>Cutting Knowledge Date: 2023 " + "x" * 500 + " What is 2+2?"
    table = report.samples_table_html([{"prompt": prompt, "output": "y" * 500}], ["prompt", "output"])
    assert "What is 2+2?" in table and "… " + "x" in table and "y" * 400 + " …" in table


def test_the_side_by_side_column_leads_with_the_primary_metric():
    column = report.side_by_side({**BLOCK, "primary_metric": {"name": "rouge_l", "value": 0.41}})
    assert list(column)[:2] == ["rouge_l", "exact_match"] and column["rouge_l"] == 0.41 and column["tokens_saved"] == 32
    assert list(report.side_by_side(BLOCK)) == ["exact_match", "eval_loss", "degenerate_rate", "eos_rate", "tokens_saved"]
