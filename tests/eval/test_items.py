"""List items said again with a word or two changed (`nbutils.eval.items`, judged inside `detect`): a looping list's
long items are a loop from the third; a list's short steps that start alike, a catalog's messages and a changelog's
entries are not."""

from nbutils.eval.detect import _tokens, detect
from nbutils.eval.items import ITEM_COPIES, item_loop

RUBIK = ("To solve a Rubik's cube, follow these steps:\n\n"
         "1. Choose a cube: The first step is to choose a cube that you want to solve. This can be any cube.\n\n"
         "2. Cube to the top: The second step is to remove the top layer of the cube. This is where the magic happens."
         "\n\n3. Cube to the bottom: The third step is to remove the bottom layer of the cube. This is where the magic "
         "happens.\n\n4. Cube to the bottom again: The fourth step is to remove the bottom layer of the cube. This is "
         "where the magic happens again.\n\n5. Cube to the top again: The fifth step is to remove the top")


def test_rubik_steps_said_again_with_a_word_changed_are_a_loop_from_the_third():
    """A real model's Rubik's cube steps: each item the one before with its number, its ordinal and a word or two
    changed. Two such items are a list; the third whole one makes a loop, before the fourth is written."""
    fourth = RUBIK.index("\n\n5.")  # where item 4 ends
    assert not detect(RUBIK[:fourth]).degenerate  # item 4 may go on: items 2 and 3 are alike, two of them
    verdict = detect(RUBIK[:fourth + 1])  # item 4 whole: three in a row
    assert verdict.reasons == ["loop"] and verdict.metrics["item_copies"] == ITEM_COPIES
    assert detect(RUBIK).reasons == ["loop"]


def test_short_steps_that_start_alike_are_a_list():
    """The same model's other answer: short items ("Cube the remaining layers of the original cube.") said again
    with a word changed are a list's terse steps, under ITEM_WORDS words each."""
    steps = ("1. Cube the top layer of the original cube.\n2. Cube the remaining layers of the original cube.\n"
             "3. Cube the remaining layers of the original cube.\n4. Cube the remaining layer of the original cube.\n"
             "5. Cube the top layer of the original cube.\n\nTo solve this puzzle, you must")
    assert not [k for k in range(20, len(steps) + 1, 4) if detect(steps[:k]).degenerate]


def test_catalog_messages_from_one_template_are_no_list_items():
    """Messages without a list's mark, each the one before with a word changed, are a catalog's (the stress set's
    gettext catalogs hold many): the rule asks for a list item's mark on every line."""
    catalog = "".join(f"Not enough memory to load the {w} image file from the disk before the program can start it."
                      "\n\n" for w in ("GIF", "ICO", "RAS", "PNM", "XPM"))
    assert not item_loop(catalog, _tokens, {}) and not detect(catalog).degenerate
    listed = "".join(f"- {line}\n" for line in catalog.split("\n\n")[:3])  # the same lines as a list's items
    assert item_loop(listed, _tokens, {})


def test_entries_that_are_no_sentences_are_no_list_items_said_again():
    """A changelog's entries from one template (no stop at their end, or links and code in them) are a document's,
    however alike: the rule asks for items that are sentences, with few symbols among their tokens."""
    entries = [f"- Bump the {w} package from version 2 to version 3 in the docs folder of the project repository"
               for w in ("pytest", "sphinx", "ruff")]
    assert not item_loop("\n".join(entries) + "\n", _tokens, {})
    assert item_loop("\n".join(e + "." for e in entries) + "\n", _tokens, {})
    linked = [e + " (`#123 <https://github.com/o/r/pull/123>`_)." for e in entries]
    assert not item_loop("\n".join(linked) + "\n", _tokens, {})


# A real model's answer to "Name 20 musical instruments.": each item the one before with its name swapped.
INSTRUMENTS = ("1. **The Violin**: The violin is a traditional instrument in the classical music tradition. It is "
               "played with a bow.\n\n" + "".join(
                   f"{i}. **The {name}**: The {name.lower()} is a musical instrument that plays the {name.lower()}. "
                   f"It is played with a {pick} pick.\n\n"
                   for i, (name, pick) in enumerate((("Saxophone", "saxophone"), ("Tuba", "trombone"),
                                                     ("Cello", "violin")), 2)))


def test_items_said_again_with_their_own_name_swapped_are_a_loop():
    """The name an item opens with (bold, or before a colon) is a placeholder where the item says it again: "The tuba is
    a musical instrument that plays the tuba" is "The saxophone ..." with one word changed, not three."""
    assert item_loop(INSTRUMENTS, _tokens, {})
    assert detect(INSTRUMENTS).reasons == ["loop"]
    assert not item_loop(INSTRUMENTS.replace("It is played with a trombone pick.", "Its low notes carry a brass band "
                                             "through a march, and it rests on the player's lap."), _tokens, {})


def test_an_item_is_its_line_and_the_lines_under_it():
    """Steps of several lines ("**Step 2: Choose a Tie**" then its paragraph) are one item each, and a sentence's
    commas are no code: three such items, each the one before with its number and ordinal changed, are a loop."""
    steps = "Here's a guide:\n\n" + "".join(
        f"{i}. **Step {i}: Choose a Tie**\nThe {nth} step is to select a tie. This can be a specific type of tie, such "
        "as a ribbon, a bow, or a tie that is designed to hold a specific item.\n\n"
        for i, nth in enumerate(("first", "second", "third"), 1))
    assert item_loop(steps, _tokens, {})
    assert not item_loop(steps.rsplit("3. **Step", 1)[0], _tokens, {})  # two items so far
    varied = steps.replace("select a tie. This can be a specific type of tie, such as a ribbon, a bow, or a tie that "
                           "is designed to hold a specific item.\n\n3.", "measure the tie against your collar and "
                           "make sure the wide end hangs well below the narrow one.\n\n3.")
    assert not item_loop(varied, _tokens, {})
