"""bench.degeneration.labelled.readers: a second reader's labels scored against the first's as the guard's stops are."""

from bench.degeneration.labelled import readers


def _row(i, first, second=None):
    return {"id": str(i), "label": first, **({"second_label": second} if second else {})}


def test_a_second_reader_is_scored_like_the_guard_against_the_first():
    rows = [_row(0, "loop", "loop"), _row(1, "loop", "healthy"), _row(2, "junk", "loop"), _row(3, "healthy", "junk"),
            _row(4, "healthy", "healthy"), _row(5, "loop")]  # the last was read once: left out
    got = readers(rows)
    assert got["n"] == 5 and got["agree"] == 0.4
    assert got["precision"] == round(2 / 3, 3)  # it calls 0, 2 and 3 degenerate; the first reader calls 0 and 2 so
    assert got["loop_recall"] == 0.5  # of the first's loops 0 and 1 it calls 0 degenerate
    assert got["differ"] == [("1", "loop", "healthy"), ("2", "junk", "loop"), ("3", "healthy", "junk")]


def test_rows_read_once_give_no_figures():
    assert readers([_row(0, "loop"), _row(1, "healthy")]) is None
