"""One clause said again and again, joined differently each time (`nbutils.eval.clauses`, judged inside `detect`): a
real model's stuck sentence is a loop from its third copy; a catalog's messages and a program's output that say a
clause once per line are left to the loop rules."""

from nbutils.eval.clauses import CLAUSE_COPIES, clause_loop
from nbutils.eval.detect import detect

RULER = ("Drax the Redwallow was a great and powerful dragon, and he ruled the land with an iron fist. "
         "He was said to be the ruler of the land, and he was said to be the ruler of the land. "
         "He was said to be the ruler of the land. And then")
PROUD = ('Her mom said, "I\'m so proud of you for choosing a little girl\'s life."\n\n'
         'Lily\'s mom continued, "I\'m so proud of you for choosing a little girl\'s life, and I\'m so proud of you for '
         'choosing a little girl\'s life."\n\nLily\'s mom explained, "I')


def test_a_clause_said_three_times_after_a_comma_a_stop_and_a_conjunction_is_a_loop():
    """SmolLM2's dragon story: one clause, joined by ", and", ". " and "." in turn, so no period of tokens repeats."""
    m = {}
    assert clause_loop(RULER, m) and m["clause_copies"] == CLAUSE_COPIES
    assert detect(RULER).reasons == ["loop"]
    second = RULER.index("He was said to be the ruler of the land.")
    assert not detect(RULER[:second]).degenerate  # two copies are a sentence said again, not yet a loop


def test_a_clause_said_again_between_frames_in_a_quote_is_a_loop_so_does_not_split_a_clause():
    """The bedtime story: "Lily's mom continued/explained" in turn between the copies; "so" is an intensifier
    there, not a conjunction: the clause is one."""
    m = {}
    assert clause_loop(PROUD, m) and m["clause_words"] == 11
    assert detect(PROUD).degenerate


def test_lines_that_each_say_a_clause_once_are_no_clause_loop():
    """A catalog's messages from one template ("X changed, used to notify") and a program's printed output: one copy
    per line, judged by the loop rules, which know catalogs and sample output."""
    catalog = "".join(f"{what} changed, which is used to notify the assistive technology\n\n"
                      for what in ("The table caption", "The table summary", "The row header", "The column header"))
    assert not clause_loop(catalog, {})
    output = "Output:\n\n```\n" + "Return True if two sets have a null intersection.\n" * 3 + "```\n"
    assert not clause_loop(output, {})


def test_short_clauses_said_often_are_no_loop():
    """"mix well" and "return False" are what recipes and code say again; a clause needs six words or more."""
    recipe = "Add the flour, mix well. Add the sugar, mix well. Add the milk, mix well. Add the eggs, mix well. Bake"
    assert not clause_loop(recipe, {}) and not detect(recipe).degenerate


def test_a_long_clause_said_again_with_a_word_added_is_said_again_a_word_changed_is_another():
    """A real essay: "The ocean is also home to countless ecosystems that are found nowhere else on earth." then
    without "also", twice: one clause of ten words or more said three times. "Your team is the best in the world of
    sports" and "... of dreams" say two things, and a short clause with a word dropped is a step said again."""
    said = "the ocean is home to countless ecosystems that are found nowhere else on earth"
    also = said.replace("is home", "is also home")
    essay = f"It is vast. The ocean is home to whales. {also.capitalize()}. {said.capitalize()}.\n\n{also.capitalize()}. S"
    assert clause_loop(essay, {}) and detect(essay).reasons == ["loop"]
    team = ("Your team is the best in the world of sports. They win.\n\nYour team is the best in the world of sports, "
            "your team is the best in the world of dreams. You")
    assert not clause_loop(team, {})
    jack = ("You'll need to get into the jack. You'll need to get the jack, which lifts the car. You'll need to get the "
            "jack, wh")
    assert not clause_loop(jack, {})
