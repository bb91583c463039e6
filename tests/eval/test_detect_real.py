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


def test_a_formula_said_again_and_again_is_a_loop_from_its_third_copy():
    """"What is 7 factorial?" answered "7! = 7 × 6 × 5 × 4 × 3 × 2 × 1 = 7 × 6 × 5 ..." to the token limit: numbers
    and symbols only, so no word marks the loop, but a copy of eight numbers said three times is one."""
    copy = " = 7 × 6 × 5 × 4 × 3 × 2 × 1"
    head = "The number of factors of 7 is 7!"
    assert not detect(head + copy * 2 + " =").degenerate  # a formula written out, then once more
    assert detect(head + copy * 3 + " =").reasons == ["loop"]  # (the last number may go on: "1" could be "10")
    assert not detect("Use 10.0.0.1, 10.0.0.1 or 10.0.0.1 as the gateway.").degenerate  # a short one, said thrice


def test_a_numbered_list_of_numbers_that_differ_is_a_list_one_value_said_again_is_a_loop():
    """"List the divisors of 48." answered "1. 1 / 2. 2 / 3. 4 / 4. 5 ... / 14. 8*11 / 15. 10*12": wrong, but every
    value another, so a list; "1. 5 / 2. 5 / 3. 5 ..." says one value again under the next numbers."""
    values = ["1", "2", "4", "5", "6", "8", "10", "12", "18", "21", "30", "45", "61", "8*11", "10*12", "12*14"]
    divisors = "".join(f"{i}. {v}\n" for i, v in enumerate(values, 1))
    assert not any(detect(divisors[:k]).degenerate for k in range(4, len(divisors) + 1))
    assert detect("".join(f"{i}. 5\n" for i in range(1, 12))).reasons == ["counting-loop"]
    assert detect("".join(f"({n})\n" for n in range(59, 102))).reasons == ["counting-loop"]  # marks counted: no list
