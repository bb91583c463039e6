"""Characters as layout sees them (`nbutils.eval.textshape`): marks belong to their letter, wide characters take
two columns, a sentence ends with a stop after a non-space and then a space."""

import re
import unicodedata

from nbutils.eval.textshape import MARKS, RUN_RE, SENTENCE_END_RE, width


def test_combining_marks_in_every_script_are_in_the_class_and_letters_are_not():
    marks = re.compile(f"[{MARKS}]")
    for mark in ("\u0301", "\u0323", "\u093e", "\u0e31", "\u064e", "\u20d7"):  # acute, dot below, Devanagari, Thai, fatha
        assert marks.fullmatch(mark) and unicodedata.category(mark)[0] == "M", hex(ord(mark))
    assert not marks.search("aéЖ中ก")


def test_width_counts_wide_characters_twice_and_marks_not_at_all():
    assert width("abc") == 3 and width("中文") == 4 and width("ｔｅｓｔ") == 8
    assert width(unicodedata.normalize("NFD", "tiếng")) == 5
    assert width("\u0e2a\u0e31\u0e19") == 2 and width("\u0915\u0948") == 1  # Thai and Devanagari signs above or below


def test_a_sentence_ends_with_a_stop_after_a_word_and_then_a_space_code_does_not():
    assert SENTENCE_END_RE.search("It works. Then") and SENTENCE_END_RE.search("它能用。然后")
    assert SENTENCE_END_RE.search('He said "done." ') and SENTENCE_END_RE.search("यह ठीक है। अब")
    assert not SENTENCE_END_RE.search("os.path.join(a, b)") and not SENTENCE_END_RE.search("version 1.0 is")


def test_a_run_is_one_character_ten_times_or_more():
    assert RUN_RE.search("x" + "=" * 10) and not RUN_RE.search("=" * 9 + "-")
