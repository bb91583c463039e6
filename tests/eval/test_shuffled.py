"""Items of a numbered list said again in shuffled order (`nbutils.eval.shuffled`, judged inside `detect`): a list
that cycles through a few items is a loop; a list that names each item once, a key of two answers, and lines said
again without a list's numbers (catalogs, code) are not."""

from nbutils.eval.detect import detect
from nbutils.eval.shuffled import SHUFFLED_COPIES, shuffled_loop

# A real model's answer to "Give me a list of 30 vegetables.": seven items, then the same ones in a new order.
VEGETABLES = ["Carrots", "Tomatoes", "Bell peppers", "Eggplants", "Zucchini", "Onions", "Cucumbers", "Tomatoes",
              "Bell peppers", "Carrots", "Eggplants", "Zucchini", "Onions", "Cucumbers", "Tomatoes", "Bell peppers",
              "Eggplants", "Carrots", "Tomatoes", "Eggplants", "Zucchini", "Onions", "Cucumbers"]


def _numbered(items: list[str]) -> str:
    return "".join(f"{i}. **{item}**\n" for i, item in enumerate(items, 1))


def test_a_list_cycling_through_its_first_items_is_a_loop_once_enough_of_its_last_lines_are_copies():
    first = next(k for k in range(1, len(VEGETABLES) + 1) if shuffled_loop(_numbered(VEGETABLES[:k]), {}))
    m: dict = {}
    assert shuffled_loop(_numbered(VEGETABLES[:first]), m) and m["shuffled_copies"] >= SHUFFLED_COPIES
    assert first == 13 and first - 7 == SHUFFLED_COPIES  # items 8-13: six copies among the last 12 lines
    assert detect(_numbered(VEGETABLES)).reasons == ["loop"]
    assert not shuffled_loop(_numbered(VEGETABLES[:12]) + "13. Onions", {})  # the line being written is not judged


def test_a_list_naming_each_item_once_and_a_key_of_two_answers_are_lists():
    fruits = ["Apples", "Bananas", "Cherries", "Dates", "Figs", "Grapes", "Kiwis", "Lemons", "Limes", "Mangoes",
              "Melons", "Oranges", "Papayas", "Peaches", "Pears", "Plums"]
    assert not shuffled_loop(_numbered(fruits), {})
    key = "".join(f"{i}. {'True' if i % 3 else 'False'}\n" for i in range(1, 21))
    assert not shuffled_loop(key, {})  # copies, but of two items only


def test_lines_said_again_without_a_lists_numbers_are_judged_by_the_other_rules():
    """A catalog's messages, a stylesheet's rules or a column of words say lines again among others: only items under
    a list's numbers count here."""
    unnumbered = "".join(f"- **{item}**\n" for item in VEGETABLES)
    assert not shuffled_loop(unnumbered, {})
    assert not shuffled_loop("".join(f"{item},\n" for item in VEGETABLES), {})
