"""`detect` on shapes a real model's generations take (tests/data/real_generations.jsonl) that readers judged: an
empty table's rows said over and over are a loop; a sentence said twice is not yet one. (test_detect.py holds the
rest of detect's tests.)"""

from nbutils.eval.detect import ROW_COPIES, detect

ROWS = ["|   |   |   |   |", "|  |    |    |    |", "|   |   |   |  |"]  # as spaced by the model: no two alike


def test_an_empty_tables_rows_said_again_are_a_loop_however_they_are_spaced():
    rows = lambda n: "".join(ROWS[i % 3] + "\n" for i in range(n))  # noqa: E731
    assert detect(rows(ROW_COPIES)).reasons == ["loop"]
    assert not detect(rows(ROW_COPIES - 1)).degenerate  # a box drawn in text: its sides a few lines tall
    assert not detect("| Planet | Size |\n|---|---|\n" + rows(4)).degenerate


def test_a_sentence_said_twice_is_not_yet_a_loop_a_third_time_is():
    """A real answer ended "I'm a service provider, and I'm not a service provider. I'm a service provider, and I'm not
    a service provider." and stopped: readers call two copies emphasis. Half a third copy makes a loop."""
    said = "I'm a service provider, and I'm not a service provider. "
    text = "I'm a helpful AI, designed to assist users with their queries. " + said * 2
    assert not detect(text.rstrip()).degenerate
    assert all(detect(text + said[:c]).reasons == ["loop"] for c in range(len(said) // 2 + 2, len(said)))
    alike = "The model is saved to the output folder. The model is saved to the cache folder. The model is saved."
    assert not any(detect(alike[:k]).degenerate for k in range(20, len(alike) + 1))  # sentences that start alike
