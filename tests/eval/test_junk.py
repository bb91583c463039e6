"""Unicode junk (`nbutils.eval.junk`): what no writing system puts in text, and what scripts do put there."""

import pytest

from nbutils.eval.junk import unicode_junk


@pytest.mark.parametrize("text", ["The result is \ufffd\ufffd and then", "control\x07 chars\x1b here",
                                  "CafÃ© rÃ©sumÃ© naÃ¯ve", "zero\u200bwidth\u200bjunk\u200bhere",
                                  "adjusted\ue9de patil\uea77 muy", "ЖaФ中بxΩ😀ю字ωmЯЖaФ中بxΩ😀ю字ωmЯ"])
def test_junk_is_found_and_counted(text):
    m = {}
    assert unicode_junk(text, m) and any(v for k, v in m.items() if k != "script_switches" or v >= 8)


@pytest.mark.parametrize("text", ["Plain ASCII text, with tabs\tand\nnew lines.", "%s番号\x1f: %s%%0A保持者\x1f: %s",
                                  "白いTシャツを買いました。Pythonのバージョンは3.12です。",
                                  "שלום, this is Hebrew next to English \u200f and a mark.", "\ufeffA file with a byte-order mark."])
def test_scripts_field_separators_and_one_bom_are_no_junk(text):
    """gnupg's catalogs put \\x1f between fields; a byte-order mark opens many files (one invisible is no junk)."""
    assert not unicode_junk(text, {})


def test_a_french_no_break_space_after_a_capital_is_typography_the_same_text_mis_decoded_is_junk():
    """French sets U+00A0 before : ; ! ? and »: after "DÉCONSEILLÉ" it is a letter and a space, said twice; the same
    text read as Latin-1 (Ã©, Â\u00a0) is mojibake."""
    text = ("DÉCONSEILLÉ\u00a0: cette clé est ignorée.\n\nLa commande «\u00a0logout\u00a0» est invoquée.\n\n"
            "DÉCONSEILLÉ\u00a0: cette clé est ignorée\u00a0!")
    assert not unicode_junk(text, {})
    assert unicode_junk(text.encode("utf-8").decode("latin-1"), {})
