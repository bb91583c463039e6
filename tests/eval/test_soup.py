"""Word and subword soup (`nbutils.eval.soup`, judged inside `detect`): soup that keeps function words at their
natural rate is found; healthy text that looks a little like it (licenses, German, contractions, logs, names) is not."""

import re

import pytest

from nbutils.eval import soup as S
from nbutils.eval.detect import detect


def test_a_fragment_is_a_piece_of_a_word_not_a_short_word():
    assert S._fragment("rk") and S._fragment("yl") and S._fragment("t")
    assert not S._fragment("the") and not S._fragment("a") and not S._fragment("water")


SPARSE_SOUP = ("Registers or Bleach scanning Speed to, command of always by Note github same is median to os there "
               "translations user format level versions precision in. Workflows request to argument the long headers "
               "self, search, int github pydantic functions that. Byte Tk runkle compressed httpx")
SOUP_HEALTHY = {
    "license terms": "Permission is hereby granted to any person obtaining a copy of the Software, to deal in the "
                     "Software without restriction, subject to the following conditions: the above notice shall be "
                     "included in all copies of the Software, by, or on behalf of, the Licensor.",
    "german": "Speicher für TGA-Kontextstruktur konnte nicht bereitgestellt werden. Speicher zum Laden eines "
              "PNM-Bildes konnte nicht bereitgestellt werden. Der zum Laden eines XPM-Bildes verwendete Speicher "
              "konnte nicht zugewiesen werden. Neuer Pixbuf konnte nicht angelegt werden.",
    "german with names": "Alle Datenbanken außer template0 müssen Verbindungen erlauben,\nd.h. ihr "
                         "pg_database.datallowconn muss wahr sein. Ihre Installation\nenthält Datenbanken außer "
                         "template0, deren pg_database.datallowconn\nauf falsch gesetzt ist. Sie sollten Verbindungen "
                         "für alle Datenbanken\naußer template0 erlauben oder ",
    "french help": "Chaque MOTIF peut être\xa0:\n  ENTIER               copier jusqu'au numéro de ligne indiqué sans "
                   "inclure cette ligne\n  /EXP_RAT/[POSITION]  copier jusqu'à la ligne correspondante sans inclure "
                   "cette ligne\n  %EXP_RAT%[POSITION]  ignorer jusqu'à la ligne correspondante sans inclure cette "
                   "ligne\n  {ENTIER}             répéter le motif",
    "contractions": "When pip can't run, you can't use pip to fix pip, so it isn't installed and you won't get far: "
                    "it's the way you fix it, we'll see, they're sure it is by re-running pip that you fix it.",
    "log": "INFO:db:Virgin Islands Creole English\nINFO:worker.3:Bolivian Sign Language\nINFO:app:pg_control CRC "
           "value is incorrect\nWARNING:app:Southern Mashan Hmong\nERROR:db:while building principal\n"
           "INFO:app:Program called an obsolete, deleted function\nDEBUG:db:force mode for added files\n",
    "command help": "  get                       Get the value of a key\n  set                       Set the value of a key\n"
                    "  reset                     Reset the value of a key\n  list-keys                 List keys\n",
    "korean symbols": "흐흐흐 ㄱㄱㄱ☆ㅠ_ㅠ 어릨 ⓡⓖ훀 ⓔ뎨 亞영ⓔ능횹 ☆서울 ⓔ궈 ⓡ릘㉱긐 因仁 家훀 ㅠ.ㅠ ⓡ마 ⓔ다",
    "names": "Sam Ruby helped with a lot of edge cases.\n\nJonathan Ellis was awarded the prestigious Beau Potage "
             "D'Or for his\nwork in solving the nestable tags conundrum.\n\nAn incomplete list of people have "
             "contributed patches to Beautiful\nSoup:\n\n Istvan Albert, Andrew Lin, Anthony Baxter, Oliver Beattie",
    "long sentence": "The maintainers of *attrs* and thousands of other packages are working with Tidelift to deliver "
                     "commercial support and maintenance for the open source packages you use to build your apps.",
    "printf in thai": "%liวัน %liชม. %liนาที %liวิ\n\n%liชม. %liนาที %liวิ\n\n%liนาที %liวิ\n\n%liวิ\n\n%liวัน",
    "table cells": '   "billion laughs", "**True**", "**True**", "**True**", "**True**", "**True**", "False (1)"\n'
                   '   "quadratic blowup", "**True**", "**True**", "**True**", "**True**", "**True**", "**True**", '
                   '"False"\n   "external entity", "False", "False", "True", "False"\n',
}


def test_sparse_word_soup_is_found_from_clauses_that_end_on_function_words():
    assert "word-soup" in detect(SPARSE_SOUP).reasons
    assert "word-soup" in detect("The notebook loads the model.\n\n" + SPARSE_SOUP).reasons


@pytest.mark.parametrize("kind", sorted(SOUP_HEALTHY))
def test_natural_text_with_capitals_contractions_labels_and_symbols_is_clean(kind):
    text = SOUP_HEALTHY[kind]
    flagged = [k for k in range(20, len(text) + 1, 3) if detect(text[:k]).degenerate]
    assert not flagged, (kind, flagged[0], detect(text[:flagged[0]]))


def test_soup_after_another_script_is_judged_alone_and_a_hash_is_no_fragment():
    greek = "μη έγκυρη παράμετρος για την επιλογή %s\n\nπάρα πολλές παράμετροι ει "
    soup = "apple river quantum blue seven dance window happily orange mountain jazz pencil cloud frog silver tiger lamp"
    assert not detect(greek).degenerate and "word-soup" in detect(greek + soup).reasons
    url = ("An example can be found `here <https://github.com/bowtie-json-schema/bowtie/blob/"
           "e77fd93598cb6e7dc1b8b1f53c00e5aa410c201a/implementations/python-jsonschema/Dockerfile#L1-L8>`_.")
    assert not detect("Note that you will need a Rust toolchain installed, as it is a build-time dependency. " + url
                      ).degenerate


def test_soup_with_natural_function_words_is_found_by_long_bare_runs_and_lone_capitals():
    bare = ("docs open for is synchronization the policy com of window on type it other file is class python "
            "correlation successfully as of each purpose all setnchannels for version dictionary of index there "
            "checkers and colorstring valid header the py detected pydantic getframerate badge can single exception")
    caps = ("strong about snippet used is existing if Return. Models First binary environ names instances The effects "
            "add we incrementally highlightcolor pydantic of fields raised ipynb com to description details Python "
            "does weekday. The open the False Viicos color, install returns to count that com one Decimal ne")
    assert "word-soup" in detect(bare).reasons and "word-soup" in detect(caps).reasons
    prose = ("4. Redistribution. You may reproduce and distribute copies of the\n      Work or Derivative Works thereof "
             "in any medium, with or without\n      modifications, and in Source or Object form, provided that You\n"
             "      meet the following conditions:\n\n      (a) You must give any other recipients of the Work or\n"
             "      Derivative Works a copy of this License; and\n")  # the Apache License: capitals are defined terms
    assert not any(detect(prose[:k]).degenerate for k in range(40, len(prose) + 1, 7))


def test_fragments_on_a_line_of_their_own_are_subword_soup_short_real_words_are_not():
    prose = "The notebook loads the model and writes the adapter next to it.\n"
    assert "subword-soup" in detect(prose + "h al tors acti ro u i mi in canv rk l yl i t t").reasons
    for line in ["It is up to you to do so if it is on by default and we do not go on", "Nhập mã PIN của bạn để mở "
                 "khóa và để có thể đi tới đó", "x = f(a, b) if n > 0 else g(c, d) + h(e) * k(i, j) - m(o, p)"]:
        assert not detect(prose + line).degenerate, line


def test_a_line_of_names_that_glue_letters_to_digits_is_no_fragment_line_soup_with_a_hex_word_still_is():
    """An assembler's list of machines (h8300h, h8300sx) tokenizes as letters and digits: the letters are names."""
    options = ("-mach=<name>             Establece el tipo de máquina H8300 a una de:\n"
               "                           h8300h, h8300hn, h8300s, h8300sn, h8300sx, h8300sxn\n")
    text = "Opciones del ensamblador para la arquitectura y sus modos de máquina:\n\n" + options
    assert not any(detect(text[:k]).degenerate for k in range(len(text) - 60, len(text) + 1))
    soup = "open i an on _ i th r p chin ext fe es CH her oteE oi 041f ro UPLE A ui ia jis por tr"
    assert "subword-soup" in detect("The build environment may differ.\n\n" + soup).reasons


def test_sparse_soup_with_commas_is_found_by_lone_capitals_or_a_broken_pair_prose_with_names_is_not():
    """Soup with a comma every few words and function words under three in ten: four capitals alone between lowercase
    words, or two and a broken pair ("the and"), where prose keeps more function words around its names."""
    caps = ("values the instance addr, medium Lib the redundant https, of chat drive Features, in the chunks "
            "Charset, textbox as repositories Example, jsonschema by kwargs")
    pair = ("values the instance addr medium Lib, redundant https chat have drive Features, collective chunks the "
            "and textbox, dataset repositories with jsonschema, the bleach kwargs psdash clean, turtle")
    assert "word-soup" in detect(caps).reasons and "word-soup" in detect(pair).reasons
    cnri = ('having an office at 1895 Preston White Drive,\nReston, VA 20191 ("CNRI"), and the Individual or '
            'Organization\n("Licensee") accessing and otherwise using Python 1.6.1 software in\nsource or binary form '
            'and its associated documentation.\n\n2. Subject to the terms and conditions of this License Agreement, '
            'CNRI\nhereby grants Licensee a nonexclusive, royalty-free, world-wide\nlicense to reproduce')
    csv = ('Describe the usual properties of Excel-generated TAB-delimited files.\n\nDescribe the usual properties '
           'of Unix-generated CSV files.\n\n"Sniffs" the format of a CSV file (i.e. delimiter, quotechar)\nReturns '
           'a Dialect object.\n\nReturns a dialect (or None) correspond')
    mixed = ("Couple MACED at California dog park for not wearing face masks while having lunch (VIDEO) - RT USA "
             "News\trt.com.131279\tPaar in Hundepark in Kalifornien mit Pfefferspray besprüht, weil es b")  # German
    for prose in (cnri, csv, mixed):  # function words at three in ten, four capitals: healthy
        assert not any(detect(prose[:k]).degenerate for k in range(40, len(prose) + 1)), prose


def test_forty_words_without_a_comma_few_of_them_function_words_are_soup_a_sentence_with_one_comma_is_not():
    """A run of words without punctuation, fewer than four in ten of them function words. A run-on sentence whose
    grammar holds has more, and is no soup: see test_a_run_on_sentence_and_a_pattern_of_letters_are_no_soup."""
    run_on = ("model window sits in list panel for open data file from index table so value path can use each help text "
              "page with class item header as it will set more name table column on row border when cell grid has "
              "sheet border by column width")
    assert "word-soup" in detect(run_on).reasons
    sentence = run_on.replace("index table so", "index table, so").rsplit(" has ", 1)[0]
    assert not detect(sentence).degenerate


def test_a_sentence_of_one_or_two_words_between_others_counts_as_a_broken_pair_short_answers_in_prose_do_not_flag():
    """Soup with stops sprinkled in leaves sentences of a word or two ("module. Str py. Type"): each is a broken
    pair, and with two more soup is found. Prose with a few short sentences keeps its function words: clean."""
    assert S.STUB_RE.search("the interface quotechar keyword options module. Str py. Type additional")
    soup = ("as parse same Python mps fields address to is ints pencolor closest all will bytes pydantic Error of the "
            "with. Powerful. Red making the urllib normally the interface quotechar keyword options module. Str py. "
            "Type additional when key discrete north glyph to exi")
    assert "word-soup" in detect(soup).reasons
    prose = ("The parser reads every file in the folder. Try it. It works on all the files we have, and it is fast "
             "enough for a notebook. Read more. The docs are in the folder next to it. See below. We keep it short.")
    changelog = ("Fixed a crash when the cache is empty. Thanks Bob. Added a flag to skip the check. See issue 12. "
                 "Dropped Python 3.8. Works now. The wheel is smaller.")
    for text in (prose, changelog):
        assert not any(detect(text[:k]).degenerate for k in range(40, len(text) + 1)), text


# Word soup the stress set drew from the tuning half (seed 0): judged on its last 24 words, it was missed at 6 of the
# 64 cuts of its last 64 characters, where the window held a few words that happen to read well ("Use io is and").
SPRINKLED_SOUP = ("Who this marker the be Added starting integral ligature function Return string in positive noting name "
                  "for refold one non message pydantic so Key initialize based faster Str glyph an path symlinks Lib "
                  "runtime to. Context version, provided by loop most request to that pypa, of, intact the class to "
                  "module with bf instance complex https is regression it python replacement can, img sure by "
                  "implementation language links want ast can. Html for with to Release objects contents Async to like "
                  "Records or normalization number the must Context. Use io is and com an usefulinc. Layer are all "
                  "deprecation couldn Ds This median pypi way forcing named name protocols to size of old")


def test_word_soup_is_found_wherever_its_last_64_characters_are_cut_post_hoc():
    missed = [k for k in range(64) if not detect(SPRINKLED_SOUP[:len(SPRINKLED_SOUP) - k]).degenerate]
    assert not missed, missed
    ends = [detect(SPRINKLED_SOUP[:len(SPRINKLED_SOUP) - k], lookback=0) for k in range(64)]
    assert not all(v.degenerate for v in ends)  # the end alone misses some cuts: the look back is what finds them
    looked_back = detect(SPRINKLED_SOUP[:len(SPRINKLED_SOUP) - next(k for k, v in enumerate(ends) if not v.degenerate)])
    assert looked_back.metrics["soup_chars_before_end"] > 0


def test_a_catalogs_messages_in_a_dialect_are_lines_not_soup_and_soup_after_them_is_found():
    """Short lines that open with a capital, or with the same words, are messages (a dialect's function words are in no
    list; its "a" before a vowel is no English article); at the text's start its first line is whole. Soup that runs
    on past MESSAGE_WORDS on a line of its own is still soup."""
    messages = ("Ducj i tascj a abilitin Maiusc\n\nIl tast Ctrl a abilite BlocNum\n\nUn tast Alt a inviie Maiusc adun\n\n"
                "Braille (cun virgulis)\n\nIl tast Maiusc a impie BlocMaiusc\n\nDucj i doi tascj a abilitin Ctrl\n\n"
                "Il tast Maiusc a impie il grup sucessif\n")
    two = ("Dji n'a savou drovi l'fitchî timporaire tot lijhant l'imådje XBM\n\n"
           "Dji n'a savou scrire dins l'fitchî timporaire tot tcherdjant l'imådje")
    for text in (messages, two):
        assert not [k for k in range(20, len(text) + 1, 3) if detect(text[:k]).degenerate], text
    soup = ("apple river quantum blue seven dance window happily orange mountain jazz pencil cloud frog silver tiger "
            "lamp garden rocket velvet")
    assert "word-soup" in detect(messages + "\n" + soup).reasons and len(soup.split()) > S.MESSAGE_WORDS


def test_a_list_of_mixed_commands_that_pass_options_or_a_help_of_options_is_a_list_not_soup():
    """`sudo apt-get install -y x`, `pip uninstall -y y`, `python -m pip install -U z`: lines that open with different
    commands but pass options are a list, at every prefix; soup passes no options. So is a program's help whose lines
    open with `-L`, `-S`, `-d` (ps's messages in French), one-letter options that soup would count as fragments."""
    commands = ("sudo apt-get install -y libgl1 ninja-build zlib1g-dev\npip uninstall -y cycler kiwisolver\n"
                "python -m pip install -U soupsieve beautifulsoup4\nsudo apt-get install -y libc6 zip unzip\n"
                "pip install -U tqdm rich\npython -m build --wheel\nconda install -y numpy scipy\n"
                "pip uninstall -y isort\npython -m pip install -U regex packaging\nnpm install -g yarn\n")
    help_text = ("-L comme H/-m/m mais sans PID/PGID/SID/SESS à suivre pour NLWP\n\n-L sans -F n'a pas de sens\n\n"
                 "-L/-T avec H/m/-m et -o/-O/o/O n'a pas de sens\n\n-S requiert k, K, m ou M (KiB par défaut)\n\n"
                 "-T avec H/-m/m mais aucun PID à suivre pour SPID\n\n-d interdit en mode «\xa0sure\xa0»\n\n"
                 "-d requiert un paramètre positif\n\n-i n'a pas de sens")
    for text in (commands, help_text):
        flagged = [k for k in range(20, len(text) + 1, 2) if detect(text[:k]).degenerate]
        assert not flagged, (flagged[0], detect(text[:flagged[0]]).reasons)


def test_short_items_listed_comma_after_comma_are_no_soup_the_same_words_without_commas_are():
    """A list of features has few function words by nature: a comma every few words says it is a list."""
    items = ["smooth zoom levels", "panning", "thumbnail grid layouts", "slideshow timers", "camera metadata display",
             "colour profile handling", "batch file renaming", "lossless rotation", "custom keyboard shortcuts",
             "plugin hooks", "tag editing", "print page layouts"]
    listed = "The viewer does not offer " + ", ".join(items) + ", or any of that."
    assert not any(detect(listed[:k], lookback=0).degenerate for k in range(60, len(listed) + 1))
    assert detect("The viewer does not offer " + " ".join(items)).reasons == ["word-soup"]


def test_a_help_table_whose_columns_line_up_is_no_soup_the_same_rows_without_the_gaps_are():
    """Option names and abbreviations (`eol CH`, `lt le eq`, `cs5 cs6`) are fragments and bare words; a gap of three
    spaces that sets a column apart on two lines, or one gap and a column another line starts at, makes them a table,
    at every prefix. The same rows with single spaces are soup; so are soup lines with one stray gap, a fragment that
    starts at a gap's column by chance, and more than MESSAGE_WORDS words run on after a table."""
    stty = ("🚀 eof CH       CH ends the input\n   eol CH       CH ends the line\n   eol2 CH      CH ends the line too\n"
            "   lnext CH     CH enters the next char quoted\n   rprnt CH     CH redraws the line\n"
            "   swtch CH     CH switches to a shell layer\n   werase CH    CH erases the last word\n")
    flags = ("Flags:\n  cs5 cs6 cs7 cs8   set char size to 5 to 8 bits\n  ixon ixoff ixany  enable xon xoff flow ctl\n"
             "  hupcl hup cread   send hup sig on close\n  ocrnl onlcr onlret  xlat cr nl on output\n")
    ops = ("Comparison operators for --compare-versions are:\n"
           "  lt le eq ne ge gt       (treat an empty version as earlier than any version);\n"
           "  lt-nl le-nl ge-nl gt-nl (treat an empty version as later than any version);\n"
           "  < << <= = >= >> >       (only for compatibility with the control file syntax).\n")
    for text in (stty, flags, ops):
        flagged = [k for k in range(20, len(text) + 1) if detect(text[:k], lookback=0).degenerate]
        assert not flagged, (flagged[0], detect(text[:flagged[0]], lookback=0).reasons)
        squeezed = re.sub(r"(\S) {2,}(\S)", r"\1 \2", text)
        assert any(detect(squeezed[:k], lookback=0).degenerate for k in range(20, len(squeezed) + 1)), squeezed
    stray = ("apple river quantum   blue seven dance window happily\norange mountain jazz pencil cloud frog silver tiger\n"
             "lamp garden rocket velvet harbor candle meadow")
    assert detect(stray).reasons == ["word-soup"]
    fragments = "rt mme ou ve rt e ze ld tilt o acti th dcl he me l c ge ust dr ke a"
    by_chance = "x = 'a'   # the letter a\n" + fragments[:49]  # `ve` starts where `#` does, after one space
    assert detect(by_chance).reasons == ["subword-soup"]
    runs_on = "ab   1\ncd   2\n" + fragments  # two rows of a table, then 21 words with no gap
    assert detect(runs_on).reasons == ["subword-soup"]


def test_a_window_cut_inside_a_word_is_read_from_that_words_start():
    """The window's characters are counted from its tokens, so its cut may fall inside "mean": read from there,
    "an the file" was an article before a consonant, a broken pair that made a definition soup."""
    text = ('Words used here: "Copy" shall mean the file that a person gets from the Licensor included in or '
            "attached to a letter, with the notice that is kept in it.")
    assert S._from_word_start("we mean the file", 11) == "mean the file"
    assert S._from_word_start("we mean the file", 13) == "mean the file"  # a cut at a word's start stays
    verdict = detect(text)
    assert not verdict.degenerate and verdict.metrics["bad_pairs"] == 1, verdict  # "in or attached" alone


LEGAL_DEFINITIONS = (
    '"Owner" shall mean the person named in or on the Record. "Copy" shall mean the file, as sent, in or with the '
    'Package. "Notice" shall mean the text, (a line), kept in or near the Archive. "User" shall mean the person who '
    'gets the file in or through the Store. "Term" shall mean the time, in days, set in or by the Order. ')


def test_prepositions_joined_by_a_conjunction_are_grammar_a_preposition_before_one_alone_is_not():
    """Laws and manuals join prepositions ("in or on", "to and from"): healthy at every word's end. A preposition
    before a conjunction and no preposition after it ("of and the") stays a broken pair."""
    ends = [k for k in range(1, len(LEGAL_DEFINITIONS)) if LEGAL_DEFINITIONS[k - 1].isalnum()
            and not LEGAL_DEFINITIONS[k].isalnum()]
    assert [k for k in ends if detect(LEGAL_DEFINITIONS[:k], lookback=0).degenerate] == []
    for joined, broken in (("in or on", "in or the"), ("to and from", "to and the"), ("with or without", "of and a")):
        pair = {}
        for phrase in (joined, broken):
            pair[phrase] = detect(f"The parts are kept {phrase} boxes, as the notes say, and the rest is sold.").metrics
        assert pair[joined]["bad_pairs"] == 0 and pair[broken]["bad_pairs"] == 1, pair


def test_a_bound_after_a_preposition_is_no_broken_pair():
    """"for at least two hours" (a real model's bread recipe, stopped as soup with one more sign): a preposition before
    "at least" or "at most" is a bound, not two prepositions in a row; "for at the" still is one."""
    recipe = "You bake the bread in the oven for {} two hours, and then you let it cool on a rack before you cut it."
    for bound in ("at least", "at most"):
        assert detect(recipe.format(bound)).metrics["bad_pairs"] == 0
    assert detect(recipe.format("at the")).metrics["bad_pairs"] == 1


def test_letters_in_alphabetical_order_are_an_alphabet_not_subword_soup():
    """A real model asked for the alphabet wrote "a b c ... z z.": single letters, each beside the next in the
    alphabet (forwards or backwards), are listed letters; the same letters out of order are fragments."""
    assert not detect("The alphabet is: a b c d e f g h i j k l m n o p q r s t u v w x y z z.").degenerate
    assert not detect("Backwards: z y x w v u t s r q p o n m l k j i h g f e d c b a.").degenerate
    assert "subword-soup" in detect("The letters are: q d x b m t h z k f w c p j s v g n r l y u e o i.").reasons


def test_a_capital_after_the_is_a_name_not_a_capital_alone():
    """A real model on the seasons: "the Earth", "the Sun", "the Moon" in a sentence of 21 words without a comma read
    as three capitals alone, and the answer was soup at that prefix. After "the", a capital starts a name."""
    seasons = ("This tilt causes the Earth's axis to move at a different speed than the spinning of the Moon. As a "
               "result, the Earth's axis is tilted towards the Sun, which means that the Northern Hemisphere of the "
               "Earth experiences more direct sunlight during the summer months and the Southern Hemisphere")
    verdict = detect(seasons, lookback=0)
    assert not verdict.degenerate and verdict.metrics["mid_caps"] == 0, verdict


def test_a_capitalized_word_after_a_possessive_is_no_lone_capital():
    """"Constantine's Christianity": the "s" after the apostrophe is no lowercase word before a lone capital. A real
    model's history answer (a long sentence, names, no comma) was stopped as word soup for it."""
    text = ("The Roman Empire embraced Christianity, demonstrating how the Emperor's will was reflection of "
            "Constantine's Christianity. The enduring of Buddhism was exposed when the Roman Empire was eventually "
            "subjected to the Eastern Orthodox Christian Church and eventually")
    assert "Christianity" not in S.MIDCAP_RE.findall(text.split(". ")[1]) and not detect(text, lookback=0).degenerate


def test_a_run_on_sentence_and_a_pattern_of_letters_are_no_soup():
    """Real answers readers call healthy: a 60-word sentence without a comma whose grammar holds (function words at
    the rate of speech, no broken pair), "A B A B B B ..." continuing a pattern, "La la la." opening an answer;
    letters at random are fragments."""
    run_on = ("This has to do with something that is not exempt of homeless funds set aside not to build the structures "
              "that the homeless need to help fight the problem and to support the people that needs help with not "
              "building the structures that can see the illness so that they can fight so much and get money for "
              "having the lift.")
    assert not any(detect(run_on[:k]).degenerate for k in range(40, len(run_on) + 1, 5))
    assert not detect("A B A B B B A B A A A A B B B A B I A A.").degenerate
    chant = ("La la la. My friend (in Spanish) is referring to the endless, unending, continuous, and unending, a "
             "metaphor that has been used throughout history to describe a never-ending cycle.")
    assert not detect(chant).degenerate  # a word three times in a row is a chant, not two broken pairs
    assert detect("Q X Z K A B Q R T U X Z B Y W V J Q.").reasons == ["subword-soup"]
