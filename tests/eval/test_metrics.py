"""Metrics checked against the libraries' own results on known pairs, the auto choice, intervals and user scorers."""

import sys
import textwrap

import pytest

from nbutils import plots
from nbutils.eval import metrics

HYP, REF = "the cat lay on the mat", "the cat sat on the mat"


def test_exact_match_known_pairs():
    assert metrics.exact_match(["  Paris ", "rome"], ["paris", "oslo"]) == [1.0, 0.0]


def test_rouge_l_matches_rouge_score():
    from rouge_score import rouge_scorer

    expected = rouge_scorer.RougeScorer(["rougeL"]).score(REF, HYP)["rougeL"].fmeasure
    assert metrics.rouge_l([HYP], [REF]) == [pytest.approx(expected)]
    assert expected == pytest.approx(5 / 6)  # LCS of 5 words out of 6 on both sides


def test_chrf_matches_sacrebleu():
    from sacrebleu.metrics import CHRF

    expected = CHRF().sentence_score(HYP, [REF]).score / 100
    assert metrics.chrf([HYP], [REF]) == [pytest.approx(expected)]
    assert 0.5 < expected < 1.0
    assert metrics.chrf([REF], [REF]) == [pytest.approx(1.0)]


def test_auto_picks_by_reference_length():
    assert metrics.resolve("auto", ["city", "name", "a pet"]) == (list(metrics.BUILTIN), "exact_match")
    assert metrics.resolve("auto", ["a long answer in a full sentence"] * 3)[1] == "rouge_l"
    assert metrics.resolve("chrf, rouge_l", ["x"]) == (["chrf", "rouge_l"], "chrf")
    with pytest.raises(ValueError, match="unknown metric"):
        metrics.resolve("bleu", ["x"])


def test_user_metric(tmp_path, monkeypatch):
    (tmp_path / "mytask_scoring.py").write_text(textwrap.dedent("""
        def startswith(output, reference):
            return float(output.startswith(reference[:1]))
        def broken(output, reference):
            return "yes"
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    block = metrics.compare("mytask_scoring:startswith", {"base": ["x", "y"], "tuned": ["a", "b"]}, ["a", "b"], n_boot=50)
    assert block["primary"] == "mytask_scoring:startswith"
    assert block["metrics"]["mytask_scoring:startswith"]["tuned"]["mean"] == 1.0
    with pytest.raises(TypeError, match="must return a number"):
        metrics.compare("mytask_scoring:broken", {"tuned": ["a"]}, ["a"])
    with pytest.raises(ValueError, match="cannot import"):
        metrics.compare("no_such_module_xyz:f", {"tuned": ["a"]}, ["a"])
    sys.modules.pop("mytask_scoring", None)


def test_compare_intervals_and_win_tie_loss(tmp_path):
    refs = ["city"] * 10
    block = metrics.compare("auto", {"base": ["name"] * 8 + ["city"] * 2, "tuned": ["city"] * 9 + ["pet"]}, refs,
                            n_boot=500, seed=1)
    em = block["metrics"]["exact_match"]
    assert em["base"]["mean"] == pytest.approx(0.2) and em["tuned"]["mean"] == pytest.approx(0.9)
    assert em["base"]["ci"][0] <= 0.2 <= em["base"]["ci"][1]
    assert em["tuned"]["ci"][1] <= 1.0 and em["delta"]["ci"][0] > 0
    assert em["win_tie_loss"] == {"win": 8, "tie": 1, "loss": 1}
    assert set(block["metrics"]) == {"exact_match", "rouge_l", "chrf"}
    assert block == metrics.compare("auto", {"base": ["name"] * 8 + ["city"] * 2, "tuned": ["city"] * 9 + ["pet"]}, refs,
                                    n_boot=500, seed=1)  # same seed, same intervals
    fig = plots.plot_metric_comparison(block, tmp_path / "metrics.png")
    assert (tmp_path / "metrics.png").stat().st_size > 1000 and [t.get_text() for t in fig.axes[0].get_xticklabels()] == [
        "exact_match *", "rouge_l", "chrf"]  # the primary metric starred (the figure itself: tests/test_plots.py)
    assert [r["metric"] for r in metrics.summary_rows(block)][0] == "exact_match (primary)"


def test_words_in_any_script_count_and_match():
    """rouge-score's own tokenizer keeps a-z and 0-9 only: identical Russian or Chinese answers scored 0."""
    assert metrics.rouge_l(["Москва — столица России"], ["Москва — столица России"]) == [pytest.approx(1.0)]
    assert metrics.rouge_l(["北京是中国的首都"], ["北京是中国的首都"]) == [pytest.approx(1.0)]
    assert metrics.rouge_l(["北京是首都"], ["上海是城市"]) == [pytest.approx(0.2)]  # one character of five in common
    assert metrics.resolve("auto", ["北京是中国的首都。"] * 3)[1] == "rouge_l"  # nine words, not one


def test_a_word_keeps_its_combining_marks():
    """Devanagari vowel signs are marks, not letters: 'नमस्ते दुनिया' split into five words, so auto read a
    two-word answer as long (ROUGE-L) and ROUGE-L matched word pieces."""
    assert metrics.words("नमस्ते दुनिया") == ["नमस्ते", "दुनिया"]
    assert metrics.resolve("auto", ["नमस्ते दुनिया"] * 3)[1] == "exact_match"
    assert metrics.rouge_l(["नमस्ते"], ["नमस्ते दुनिया"]) == [pytest.approx(2 / 3)]  # one word of two


def test_nfd_and_nfc_spellings_are_the_same_answer():
    """Qwen's tokenizer gives NFC back: an NFD reference (Vietnamese typed on macOS) scored a right answer 0."""
    import unicodedata

    ref = unicodedata.normalize("NFD", "Tiếng Việt rất đẹp")
    out = unicodedata.normalize("NFC", ref)
    assert out != ref
    assert metrics.exact_match([out], [ref]) == [1.0]
    assert metrics.rouge_l([out], [ref]) == [pytest.approx(1.0)]
    assert metrics.chrf([out], [ref]) == [pytest.approx(1.0)]
    assert metrics.words(ref) == ["tiếng", "việt", "rất", "đẹp"]


def test_auto_with_a_user_scorer_adds_it_and_scores_are_numbers_in_0_1(tmp_path, monkeypatch):
    (tmp_path / "np_scoring.py").write_text("import numpy as np\ndef f(o, r):\n    return np.float32(o == r)\n"
                                            "def big(o, r):\n    return 5\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    names, primary = metrics.resolve("auto,np_scoring:f", ["city"])
    assert names == [*metrics.BUILTIN, "np_scoring:f"] and primary == "exact_match"
    assert metrics.resolve("np_scoring:f,auto", ["a long answer in a full sentence"]) == (
        ["np_scoring:f", *metrics.BUILTIN], "np_scoring:f")
    assert metrics.scorer("np_scoring:f")(["a", "b"], ["a", "c"]) == [1.0, 0.0]  # numpy's float32 is a number
    with pytest.raises(ValueError, match=r"returned 5 for sample 0; a score is in \[0, 1\]"):
        metrics.scorer("np_scoring:big")(["a"], ["a"])
    sys.modules.pop("np_scoring", None)


def test_no_resamples_give_no_interval_and_a_negative_count_is_refused(tmp_path):
    """03's n_bootstrap = 0 raised IndexError from numpy after both models had generated."""
    import math

    assert all(math.isnan(v) for v in metrics.bootstrap_ci([1.0, 0.0], n_boot=0))
    block = metrics.compare("exact_match", {"base": ["a", "b"], "tuned": ["a", "a"]}, ["a", "a"], n_boot=0)
    assert metrics.summary_rows(block)[0]["tuned"] == "1.000 [nan, nan]"
    plots.plot_metric_comparison(block, tmp_path / "metrics.png")  # bars without error bars
    with pytest.raises(ValueError, match="n_bootstrap=-1: .* 0 \\(no intervals\\) or more"):
        metrics.bootstrap_ci([1.0], n_boot=-1)


def test_thai_written_without_spaces_is_scored_letter_by_letter_as_chinese():
    """A letter and its marks are one unit in Thai (as a run of letters and marks, a whole sentence was one word:
    ROUGE-L all or nothing, and auto read a sentence as a one-word answer)."""
    assert metrics.words("สวัสดี ครับ") == ["ส", "วั", "ส", "ดี", "ค", "รั", "บ"]
    sentence = "กรุงเทพมหานครเป็นเมืองหลวงของประเทศไทย"
    assert metrics.resolve("auto", [sentence] * 3)[1] == "rouge_l"
    assert 0.5 < metrics.rouge_l(["กรุงเทพเป็นเมืองหลวง"], ["กรุงเทพมหานครเป็นเมืองหลวง"])[0] < 1.0


def test_a_user_metric_gets_nfc_text_as_the_built_ins_compare(tmp_path, monkeypatch):
    """An NFD reference and the NFC the tokenizer gives back are one answer to your scorer too (it got them raw)."""
    import unicodedata

    (tmp_path / "nfc_scoring.py").write_text("def same(o, r):\n    return float(o == r)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ref = unicodedata.normalize("NFD", "Tiếng Việt")
    block = metrics.compare("exact_match,nfc_scoring:same", {"tuned": ["Tiếng Việt"]}, [ref], n_boot=10)
    assert block["metrics"]["nfc_scoring:same"]["tuned"]["mean"] == 1.0
    sys.modules.pop("nfc_scoring", None)
