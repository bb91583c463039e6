"""03's per-sample table (escaped, tinted by verdict, long text cut) and the reasons chart."""

from nbutils.eval import report


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
