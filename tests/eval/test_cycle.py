"""The early-cycle rule (`nbutils.eval.cycle`), judged through `detect`: a cycle of sentences or lines said again
before its second copy is whole is a loop wherever it is cut; blocks that documents repeat (code, wrapped prose, a
program's output, a catalog's pairs, addresses) wait for a second whole copy."""

from nbutils.eval.detect import detect


def test_sentences_said_again_before_a_second_whole_copy_are_a_loop():
    a, b, c = ("The adapter is saved next to the tokenizer files in the output folder. ",
               "Resume reads the newest checkpoint it finds there. ", "Then training goes on where it stopped. ")
    text = "Here is what happens: " + a + b + c + a + b
    assert "loop" in detect(text).reasons and detect(text).metrics["cycle_said_again"] >= 100
    assert not detect("Here is what happens: " + a + b + c + a).degenerate  # one sentence again: not yet


def test_a_short_cycle_said_twice_whole_in_one_line_is_a_loop_a_line_said_twice_is_not():
    """Under 100 characters, a cycle counts once said again whole, back to back, within one line: two sentences, or
    messages without stops, or the whole text (under 200 characters) said twice. One line said twice, line by line,
    is a program's output or a catalog's pair."""
    head = "The last lines of the log, as the run printed them, before it was stopped by the time budget: "
    unit = "Conveying Verbatim Copies. Initialize internal state from a seed. *** WARNING: *** "
    assert len(unit) < 100 and "loop" in detect(head + unit + unit).reasons
    assert not detect(head + unit + unit[:-30]).degenerate  # not whole yet: the loop rules wait too
    stopless = "## 2.4.1 (March 3rd, 2024) Lỗi khi đọc tập tin cấu hình %s \"legacy\" or \"strict\" "
    assert len(stopless) < 100 and "loop" in detect(head + stopless * 2).reasons
    assert "loop" in detect(stopless * 2).reasons and len(stopless * 2) < 200  # the whole text is the two copies
    assert not detect(head + stopless + stopless[:-20]).degenerate
    line = "Builds a profiler object using the specified timer function.\n"
    assert not detect("Output:\n\n" + head + "\n" + line * 2).degenerate


def test_a_short_cycle_of_two_lines_or_more_said_twice_whole_is_a_loop_a_list_that_says_one_line_twice_is_not():
    """Under 100 characters, a cycle of different lines (messages, list items) said again whole, back to back, is a
    loop at two copies; a list whose next line starts like the one before it is not yet."""
    unit = "Hạt Splitsko-dalmatinska\nCopyright (c) 2023 Jelle Zijlstra\nQuá nhiều tiến trình\n"
    head = "        self.__flags = flags\n"
    assert len(unit) < 100 and "loop" in detect(head + unit + unit).reasons
    assert not detect(head + unit + unit[:-12]).degenerate
    items = "- Fix the export of merged weights\n- Add a progress bar to the data check\n- Document the resume flag\n"
    assert not [k for k in range(20, len(items) + 1, 3) if detect("Changes:\n" + items[:k]).degenerate]


def test_a_cycle_of_lines_said_twice_whole_or_with_a_code_block_in_it_is_a_loop():
    lines = ["Set focus on the main window (in order to collect key events)",
             "Check the adapter files before the export starts again",
             "The tokenizer is saved next to the weights in the output folder"]
    unit = "\n".join(lines) + "\n"
    assert "loop" in detect("Notes:\n" + unit + unit.rstrip()).reasons  # two whole copies, the last line end unsaid
    fenced = unit + "```\npython train.py\n```\n"  # the cycle opens a code block: the cycle is not inside one
    assert "loop" in detect("Notes:\n" + fenced + fenced[:len(unit) + 10]).reasons


def test_a_cycle_of_sentences_or_lines_after_an_opened_code_block_is_a_loop_before_its_second_copy():
    """The head opened a code block and the generation went on in prose, mid-line or line by line: sentences said
    again are a cycle begun there as anywhere, and a ruler being written at the end still shows it."""
    a, b, c = ("The adapter is saved next to the tokenizer files in the output folder. ",
               "Resume reads the newest checkpoint it finds there. ", "Then training goes on where it stopped. ")
    head = "Output:\n\n```\nThis version just zaps the buffer "
    assert "loop" in detect(head + a + b + c + a + b).reasons
    lines = a.strip() + "\n" + b.strip() + "\n" + c.strip() + "\n"
    assert "loop" in detect("Clone it:\n\n```\n$ git clone https://example.org/project " + lines + lines[:110]).reasons
    ruled = a + b + "-" * 60 + " " + c
    assert "loop" in detect("Notes: " + ruled + ruled[:len(a + b) + 30]).reasons  # ends inside the second ruler


def test_a_code_block_or_a_wrapped_docstring_said_again_once_is_healthy():
    """Sibling methods share their bodies and their docstrings; wrapped at a column, or indented, they are layout
    that repeats: the loop rules judge them at a second whole copy, not before."""
    body = ("        if state:\n            self.encoder = None\n        else:\n            if sys.byteorder == "
            "'little':\n                self.encoder = codecs.utf_16_le_encode\n            else:\n")
    code = "    def getstate(self):\n" + body + "    def setstate(self, state):\n" + body
    doc = ("Return a list of all header values.\n\nThese will be sorted in the order they appeared in the original "
           "header\nlist, or were added to this instance, and may contain duplicates.\n\n")
    docs = doc + "Return a list of the header keys.\n\n" + doc
    for text in (code, docs):
        assert not any(detect(text[:k]).degenerate for k in range(40, len(text) + 1, 3)), text
    # Short lines that start in lowercase were never wrapped (narrower than WRAP_COLUMNS): a cycle of them is judged.
    unit = "saving the adapter files\nreading the newest checkpoint\ngoing on where training stopped\nchecking the files\n"
    assert "loop" in detect("Notes:\n" + unit + unit[:100]).reasons and len(unit) > 100


def test_a_cycle_of_changelog_lines_that_name_code_and_links_is_a_loop_before_its_second_copy():
    """Lines at the margin without stops (changelog items, messages) may name code in backticks and carry links: a
    cycle of them is prose said again, judged before its second copy is whole, wherever it is cut."""
    unit = ("- Speed up ``build_name_map`` on large fonts (#3923)\nExtra space to add for GTK_CAN_DEFAULT buttons\n"
            "* [@someone](https://github.com/someone) made their first contribution in this release\n")
    head = "Release notes, newest first, as the maintainers wrote them for this version: "
    for k in range(int(0.6 * len(unit)), len(unit)):
        assert "loop" in detect(head + unit + unit[:k]).reasons, k
    indented = "".join("  " + line + "\n" for line in unit.splitlines())  # code indents its lines: judged at two copies
    assert not detect(head + "\n" + indented + indented[:110]).degenerate


def test_a_cycle_said_again_from_a_line_start_that_opens_with_punctuation_is_a_loop():
    unit = ":param obj: the document object to patch in place\nThis is likely the last minor release before 1.0.\n" \
           ":return: a new patch instance for the document\n"
    assert "loop" in detect("normalisation of the string " + unit + unit[:int(0.7 * len(unit))]).reasons


def test_lines_that_break_where_the_next_word_fits_were_not_wrapped_a_wrapped_paragraph_said_again_is_healthy():
    """A wrapper breaks a line only where the next word would not fit: separate messages one per line break
    anywhere, and a cycle of them is a loop. A catalog that says a wrapped paragraph again after another message
    (a singular and a plural help text) is healthy."""
    unit = ("Copies an object property or an array element to a new location\nlocal folder for the exported model "
            "files\n## [3.4.7](https://github.com/example/project/compare/3.4.6...3.4.7) (2026-04-02)\n")
    assert "loop" in detect("Notes, as printed: " + unit + unit[:int(0.7 * len(unit))]).reasons
    para = ("If the DOMAIN parameter is not given, the domain is taken from the\nenvironment variable TEXTDOMAIN. If "
            "the catalog is not found in the\ndefault folder, the variable TEXTDOMAINDIR names another\nplace.\n")
    text = "Show the translation of a message.\n\n" + para + "Default search folder: %s\n\n" + para
    assert not any(detect(text[:k]).degenerate for k in range(40, len(text) + 1, 3))


def test_an_address_said_again_is_not_prose():
    link = "`Draft 2020-12 <https://docs.example.org/en/latest/api/schema/validators/#schema.validators.Draft202012>`_"
    text = "* Full support for " + link + ", " + link.replace("2020-12", "2019-09")
    assert not any(detect(text[:k]).degenerate for k in range(40, len(text) + 1, 3))


def test_a_catalog_that_says_one_message_for_three_colours_is_healthy():
    msg = " घटक के लिए डिफ़ॉल्ट चमक के लिए एक परिवर्तन का प्रतिनिधित्व करता है. शून्य कोई परिवर्तन नहीं दर्शाता है"
    text = "\n\n".join(colour + msg for colour in ("लाल", "हरी", "नीले"))
    assert not any(detect(text[:k]).degenerate for k in range(40, len(text) + 1, 4))


def test_messages_built_from_one_template_are_healthy_a_cycle_after_other_text_is_not():
    """A catalog says one long message for a double-click, a middle-click and a right-click: the frame before each
    copy differs by a word. A loop's first copy follows other text."""
    msg = ("-click on the title bar does. Valid values are toggle-shade, which rolls the window up, toggle-maximize, "
           "which maximizes it, minimize, menu and none, which does nothing at all.")
    text = "\n\n".join(f"This option sets what a {button}{msg}" for button in ("double", "middle", "right"))
    assert not any(detect(text[:k]).degenerate for k in range(40, len(text) + 1, 4))
    unit = "This option sets what a double" + msg + " "
    assert "loop" in detect("Here is the setting you asked about. " + unit + unit[:int(0.7 * len(unit))]).reasons


def test_sibling_paragraphs_whose_subjects_differ_by_a_few_words_are_healthy_wherever_cut():
    """A catalog says one paragraph for mice and again for touchpads: the 32 characters before the two copies differ
    by more than a word, the words before them hardly."""
    rest = (" Можна встановити для профілю прискорення типове значення («default»), тобто типовий профіль прискорення "
            "для кожного з пристроїв, плаский («flat»), коли прискорення відбувається зі сталим коефіцієнтом, або "
            "адаптивним («adaptive»), коли прискорення адаптується до руху.")
    text = "\n\n".join(f"Профіль прискорення для з'єднаних із комп'ютером {device}.{rest}"
                       for device in ("мишей", "сенсорних панелей"))
    assert not any(detect(text[:k]).degenerate for k in range(40, len(text) + 1, 4))
    unit = f"Профіль прискорення для з'єднаних із комп'ютером мишей.{rest} "
    assert "loop" in detect("Ось що робить цей параметр. " + unit + unit[:int(0.7 * len(unit))]).reasons


def test_a_line_that_ends_in_a_letter_with_marks_wraps_as_any_letter_does_composed_or_not():
    """Vietnamese written decomposed (NFD, as some catalogs are) ends a wrapped line with a mark after its letter:
    the break is inside a sentence all the same, so the paragraph said again waits for the loop rules."""
    import unicodedata

    para = ("Chép (reflink/clone) không được hỗ trợ hoặc không hợp lệ và tệp không thể được hỗ\ntrợ nên nó "
            "không được sao chép sang thư mục đích đã chọn trước đó.\n")
    for form in ("NFC", "NFD"):
        text = unicodedata.normalize(form, "Ghi chú về phiên bản mới:\n" + para + "Bản dịch cũ:\n" + para)
        assert not any(detect(text[:k]).degenerate for k in range(200, len(text) + 1, 3)), form
    hindi = ("यह फ़ाइल पहले से मौजूद है और इसे बदलने से पहले उसकी एक प्रति बनाई जाती है ताकि पुरानी\nसामग्री "
             "खो न जाए और बाद में उसे फिर से पाया जा सके। फिर नई फ़ाइल लिखी जाती है।\n")  # the line ends in a vowel sign
    text = "टिप्पणी:\n" + hindi + "पुराना अनुवाद:\n" + hindi
    assert not any(detect(text[:k]).degenerate for k in range(200, len(text) + 1, 3))


def test_two_space_code_said_again_cut_after_a_number_and_a_stop_is_not_prose():
    """reStructuredText's literal blocks indent code two spaces; cut after "-1." the text has not ended a sentence
    (a number may go on), so the code said again waits for the loop rules, as code does."""
    block = ("  scale = weights.std(axis=0) # scale = array([0.5, 1, 1.5, 2])\n"
             "  mask = np.isfinite(values) & (counts > 0) # mask =\n"
             "  array([True,False,True,True])\n  result = (values/scale).clip(-1, 1) # array([-1.")
    text = ("Scale the values first, then keep the rows that are finite, as the example shows::\n\n" + block +
            " 0.3, 1.])\n  result[~mask] = 0\n\nWithout the copy the inputs change in place, so that::\n\n" + block)
    assert not detect(text).degenerate


def _a_loop_wherever_cut(head: str, unit: str, said: int, step: int) -> None:
    """head + unit + unit cut every `step` characters once `said` characters of the second copy are written: a loop."""
    for k in range(said, len(unit) - 1, step):
        assert "loop" in detect(head + unit + unit[:k]).reasons, k


def test_a_cycle_whose_copies_follow_words_that_end_alike_is_a_loop_wherever_it_is_cut():
    """The words before the first copy and before the second may end in the same letters ("school", "pool"): the part
    said again then starts inside a word, and the copy itself starts after it, at a capital. Text without spaces
    (Chinese) has no word to skip: a catalog's "red / green component ..." pair stays healthy."""
    unit = ("Its pupils learn to read and write in the morning and go home when the bell rings at noon. "
            "Every day they walk back along the road past the orchard and the mill to the old pool ")
    _a_loop_wherever_cut("Notes on the village school ", unit, 110, 7)
    red = ("红色分量的默认亮度变化表示为一个数值其中零表示没有变化小于零的数值表示亮度减少而大于零的数值表示亮度增加"
           "这个数值会在每次重新绘制窗口的时候应用到整个画面上面并且会一直保留到用户在设置对话框里面把它重新改回原来的默认数值为止")
    assert not detect("窗口外观设置的说明如下所示\n\n" + red + "\n\n" + red.replace("红", "绿")).degenerate


def test_a_cycle_of_catalog_lines_with_a_row_in_columns_is_a_loop_before_its_second_copy():
    """A row laid out in columns ("-y, --side-by-side    output in two columns") ends a message, it was not wrapped:
    a wrapped column goes on indented under itself, and the next line at the margin is the next message."""
    unit = ("%s and %s differ: byte %s, line %s\n-y, --side-by-side            output in two columns side by side\n"
            "file list of package %s holds an empty file name\n")
    head = "Messages of the tool, as the catalog lists them:\n"
    _a_loop_wherever_cut(head, unit, 100, 5)  # from 100 characters said again
    wrapped = "-y, --side-by-side            output in two columns side by\n                              side\n"
    assert not detect(head + wrapped + "Usage: diff [option]... files\n" + wrapped).degenerate


def test_a_cycle_of_messages_in_two_scripts_is_a_loop_where_the_script_changes():
    """Catalog messages have no stops and may open in lowercase (Vietnamese) or in a script without capitals
    (Devanagari): where the script changes between two words, a new message starts, and the cycle is judged there."""
    unit = ("không thể mở tập tin tạm để ghi dữ liệu mới vào bộ nhớ đệm của chương trình "
            "फ़ाइल को पढ़ने में असफल रहा क्योंकि इसकी अनुमति नहीं है ")
    _a_loop_wherever_cut("Các thông báo của công cụ, như danh mục liệt kê chúng: ", unit, 100, 6)


def test_a_line_break_where_the_script_changes_starts_a_message_it_was_not_wrapped():
    """The widest line of a cycle may end in a lowercase letter, and the next line open in a script without capitals:
    a wrapper could have broken there, but a catalog's next message in another language starts there."""
    unit = ("%s: lỗi khi liên kết “%.250s” tới “%.250s” trong thư mục đích: %s\nहरे रंग के विपरीत बदलें\n"
            "Duplicate elements in either input list are ignored.\nHandle one request at a time until shutdown.\n")
    _a_loop_wherever_cut("Xác thực là cần thiết để cài đặt phần mềm.\n", unit, 100, 6)


def test_a_line_break_where_the_language_changes_or_the_next_line_leaves_room_starts_a_message():
    """The widest line of a cycle may end in a lowercase letter and the next open in one: a Vietnamese message, then
    an English one (marks on most syllables, then none), or a next line that ends where the lowercase word after it
    would have fit (a wrapper fills its lines) starts a message. A French paragraph wrapped between a line without
    accents and one with a few stays wrapped, and said again, healthy."""
    unit = ("Không thể mở tệp cấu hình vì nó đã bị một tiến trình khác khóa lại\nrun the export again with a new "
            "output folder\nCheck the adapter files before the export starts.\n")
    _a_loop_wherever_cut("Các thông báo của công cụ:\n", unit, 100, 6)
    unit = ("Không thể chọn phiên bản mới nhất của gói này vì nó chỉ là gói ảo\nchuỗi dịch còn thiếu ký tự\n"
            "không tìm thấy tập tin cấu hình\nLưu các thay đổi trước khi thoát.\n")
    _a_loop_wherever_cut("Các thông báo của công cụ:\n", unit, 100, 6)
    para = "Le fichier de configuration contient les options de la\ncommande et les paramètres généraux du programme.\n"
    text = "Aide du programme :\n" + para + "Ancienne traduction :\n" + para
    assert not any(detect(text[:k]).degenerate for k in range(40, len(text) + 1, 3))


def test_a_cycle_of_messages_without_stops_after_unlike_text_or_at_the_start_is_a_loop():
    """Messages without stops that open in lowercase say where they start by what comes before the two copies: the
    text before the loop and the cycle's end share no words. Sibling messages from one template share the words
    before the part they say alike (a Polish catalog's contrast / brightness pair stays healthy)."""
    unit = ("không thể đọc phần đầu của tập tin cấu hình đã cho trong thư mục người dùng "
            "which will clear everything ignored by the ignore file and the cache "
            "lỗi khi ghi tập tin cơ sở dữ liệu mới vào đĩa ")
    head = "- Release notes of the tool, with the names of everyone who sent a fix for this version of it, thanks! "
    _a_loop_wherever_cut(head, unit, 100, 9)
    _a_loop_wherever_cut("", unit, 100, 9)  # the first copy opens the text: nothing before it
    code = ('    """Returns a set of all available time zones.\n\n    This may attempt to open a large number of files, '
            'since the\n    way to check a file is to open it and look for the "magic string" at the beginning.\n'
            '    """\n    from importlib import resources\n\n    vali ')  # many words, none shared, letters alike
    catalog = ("bắt buộc THAY_ĐỔI chế độ (ký hiệu) cho những tập tin thêm vào Protecting Users' Legal Rights From "
               "Anti-Circumvention Law. Đang đọc các danh sách gói ")
    _a_loop_wherever_cut(code, catalog, 100, 9)
    tail = ", wartości mniejsze niż zero określają zmniejszenie, a wartości większe niż zero wskazują zwiększenie."
    pair = (f"Reprezentuje zmianę domyślnej jasności barwy czerwonej. Zero wskazuje brak zmian{tail}\n\n"
            f"Reprezentuje zmianę domyślnego kontrastu barwy niebieskiej. Zero wskazuje brak zmian kontrastu{tail}")
    assert not [k for k in range(40, len(pair) + 1, 4) if detect(pair[:k]).degenerate]


def test_a_cycle_is_judged_alike_composed_and_decomposed():
    """A tokenizer that composes letters on decode (Qwen2's: NFC) and one that keeps them decomposed (NFD) see the
    same cycle: its lengths are counted decomposed, so both are a loop from the same cut."""
    import unicodedata

    unit = ("Không thể thay đổi mật khẩu cho người dùng này. Tệp cấu hình bị hỏng, hãy thử lại sau. "
            "Gặp lỗi khi hòa trộn các ghi chú tự động. ")
    head = "Các thông báo của công cụ, như danh mục liệt kê chúng: "
    for k in range(40, len(unit) - 1, 6):
        nfd = unicodedata.normalize("NFD", head + unit + unit[:k])
        assert detect(nfd).degenerate == detect(unicodedata.normalize("NFC", nfd)).degenerate, k
    _a_loop_wherever_cut(head, unicodedata.normalize("NFC", unit), 90, 6)


def test_hangul_is_counted_as_written_while_letters_with_marks_are_counted_decomposed():
    """Decomposing would write each Hangul syllable as two or three jamo, and a Korean cycle would count as 100
    characters after some 45 syllables said again: Korean is written composed whatever the tokenizer, so its
    syllables count one each, and the rule asks for 100 of them as for any script."""
    unit = ("설정 파일을 읽는 중에 잘못된 문법이 발견되어 작업을 계속할 수 없습니다 "
            "관리자에게 문의하거나 파일을 다시 만든 다음 프로그램을 처음부터 실행하십시오 ")
    head = "이 도구가 남긴 메시지를 목록이 보여 주는 그대로 옮겨 적으면 다음과 같습니다: "
    assert not [k for k in range(40, len(unit), 5) if detect(head + unit + unit[:k]).degenerate]  # before: from 60
    assert detect(head + unit * 2).degenerate  # said again whole: the loop rules


def test_a_paragraph_said_again_with_a_new_opening_stops_mid_stream_one_said_again_under_a_heading_waits():
    """A real model's smartphone review: the next paragraph opens with a sentence of its own, then says the paragraph
    before it again, word for word, and `max_new_tokens` cut it before the second copy was whole. The guard stops it
    mid-stream; a paragraph said again under a heading of its own, or from its first word, still waits for the
    second whole copy (a document may go on differently)."""
    from nbutils.eval.guard import settled

    said = ("The user's feedback is also constructive and supportive, with a focus on the user's satisfaction and the "
            "user's positive experience. ")
    review = ("The review is written in a friendly tone. The user's description is clear and concise. " + said +
              "\n\nThe user's review is written in a friendly and professional tone. " + said)
    verdict = detect(review[:-10])
    assert verdict.metrics["cycle_next_paragraph"] == 1 and settled(verdict)
    for again in ("\n\n## Battery\n\n" + said, "\n\n" + said):
        verdict = detect("The review is written in a friendly tone. " + said + again[:-10])
        assert "cycle_chars" in verdict.metrics and not settled(verdict) and settled(verdict, ended=True), again


def test_a_poems_chorus_said_again_after_a_verse_waits_for_the_loop_rules():
    """A real model's poem says its chorus again after other stanzas ("Your love, your love, ..."): short lines in
    stanzas are verse, left to the loop rules (which stop a chorus said a third time); a list's short lines said again
    without a blank line between are still a cycle."""
    chorus = "Your love, your love,\nYour love, your love,\nA whisper of love,\nA loving one.\n\n"
    verse = "The rain of felucca,\nA tender lover,\nA rosy smile,\nA loving one.\n\n"
    other = "Your love, your love,\nYour love, your love,\nA gentle breeze,\nA gentle breeze.\n\n"
    poem = "In twilight's cloak, a stream\nOf raindrops dances.\n\n" + chorus + verse + other + chorus + verse[:22]
    assert not detect(poem).degenerate
    assert "loop" in detect(poem + verse[22:] + other + chorus + verse + other + chorus).reasons


def test_a_sentence_echoed_in_the_next_paragraph_does_not_stop_mid_stream():
    """A real answer echoes one sentence of a paragraph in the next, which opens with a sentence of its own: not a
    paragraph said again (its openings share few words), so the guard waits, where a paragraph said again with its
    opening said much as before stops at once (test above)."""
    from nbutils.eval.guard import settled

    echoed = ("The air is constantly being compressed and stretched, and when it reaches a certain point, it suddenly "
              "expands, creating a massive bubble.")
    text = ("The air is incredibly fragile and prone to collapse when an airplane is in the air. " + echoed +
            "\n\nThis phenomenon is known as the airfoil effect, where the air is deflected away from the airplane's "
            "shape. " + echoed[:-30])
    verdict = detect(text)
    assert "cycle_chars" in verdict.metrics and verdict.metrics["cycle_next_paragraph"] == 0
    assert not settled(verdict)
