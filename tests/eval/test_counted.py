"""The numbers of a loop's copies (`nbutils.eval.counted`, judged inside `detect`): a count written as a numbered list
is a count, a value said again under the next numbers is a loop, and copies are exact where only the part before the
first whole copy says another number."""

from nbutils.eval.counted import counted, steps_evenly
from nbutils.eval.detect import detect


def test_numbers_that_step_evenly_count_and_a_column_of_the_same_number_is_exact():
    assert steps_evenly(["1", "2", "3"]) and steps_evenly(["40", "30", "20"]) and not steps_evenly(["5", "5", "5"])
    # "1. 1 / 2. 2 / 3. 3" reversed as detect's tokens: each copy is NUM "." NUM "\n", both places count
    rev = ["\n", "\ue000", ".", "\ue000"] * 3
    assert counted(rev, 12, 4, ["1", "1", "2", "2", "3", "3"]) == (False, True, False, True)
    assert counted(rev, 12, 4, ["1", "5", "2", "5", "3", "5"])[3] is False  # one place says 5 again: not every


def test_a_count_written_as_a_numbered_list_of_its_numbers_is_a_count_a_value_said_again_is_not():
    """SmolLM2 asked to count wrote "1. 1 / 2. 2 / 3. 3 ...": every number steps evenly, a count at every prefix. A
    list whose item says one value again under the next numbers stays a loop."""
    count = "\n".join(f"{n}. {n}" for n in range(1, 40))
    assert not [k for k in range(1, len(count) + 1, 3) if detect(count[:k], lookback=0).degenerate]
    assert detect("\n".join(f"{n}. 5" for n in range(1, 40))).degenerate


def test_code_lines_said_again_after_a_line_that_differs_by_a_number_are_a_loop():
    """A real model's is_prime: `if n % 3 == 0 and n % 5 == 0: return False` said five times after `if n > 3: return
    False`, whose tokens match the copies' end but whose number does not. The whole copies are an exact loop."""
    head = "```python\ndef is_prime(n):\n    if n == 2:\n        return True\n    if n > 3:\n        return False\n"
    text = head + "    if n % 3 == 0 and n % 5 == 0:\n        return False\n" * 5
    verdict = detect(text)
    assert verdict.reasons == ["loop"] and verdict.metrics["loop_repeats"] == 5, verdict
    assert not detect(head + "    if n % 3 == 0 and n % 5 == 0:\n        return False\n").degenerate
