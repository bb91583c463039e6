"""Detection (`nbutils.eval.detect`): every degeneration class caught with its reason, healthy text of every kind
left alone, wherever the text ends. Word and subword soup: tests/eval/test_soup.py; cycles
cut before their second copy: tests/eval/test_cycle.py; the stress set: tests/bench/degeneration/test_stress.py."""

import os
import re
import sysconfig

import pytest

from bench.degeneration.scorecard import whisper_rule
from nbutils.eval.detect import detect

PROSE = ("The adapter is trained in four-bit precision so that it fits on a T4, and only the small low-rank "
         "matrices receive gradients. ")
POSITIVES = [
    ("char-repeat", "The answer is " + "a" * 40),
    ("char-repeat", "Done" + "!" * 30),
    ("char-repeat", "好的" + "哈" * 12),
    ("char-repeat", "Result:\n" + "\n" * 20),
    ("token-repeat", "Sure. " + "hello " * 12),
    ("token-repeat", PROSE + "the, " * 10),
    ("loop", PROSE + "I think this is right. " * 3),
    ("loop", PROSE + "This is the end. That is all. We are done here. " * 3),
    ("loop", "def f(x):\n    return x\n" + "for i in range(n):\n    total += weights[i] * values[i]\n" * 4),
    ("loop", "Answer the question.\n" + "### Instruction:\nWhat is QLoRA and why does it save memory?\n" * 3),
    ("loop", PROSE + "very " * 3 + ("deep learning is fun " * 4)),
    ("counting-loop", "Steps: " + " ".join(f"Step {i}: add the flour to the bowl." for i in range(41, 53))),
    ("counting-loop", "\n".join(f"{i}. Repeat the previous step with the next batch" for i in range(3, 15))),
    ("word-soup", "apple river quantum blue seven dance window happily orange mountain jazz pencil cloud frog "
                  "silver tiger marble lamp echo violin candle basket"),
    ("subword-soup", "The Ġcat Ġsat Ġon Ġthe Ġmat"),
    ("subword-soup", "▁the ▁model ▁is ▁train ing ▁on ▁data"),
    ("subword-soup", "un ##aff ##able ##ness ##ing ##ly"),
    ("subword-soup", "co ll ab ra ti on ne tw or ks ar ch it ec tu re de ve lo pm en t"),
    ("unicode-junk", "Résumé: CafÃ© rÃ©sumÃ© naÃ¯ve faÃ§ade"),
    ("unicode-junk", "The result is \ufffd\ufffd and then \ufffd"),
    ("unicode-junk", "zero\u200bwidth\u200bjunk\u200bhere\u200bagain"),
    ("unicode-junk", "control\x07 chars\x1b here\x00"),
    ("unicode-junk", "ЖaФ中بxΩ😀ю字ωmЯ" * 2),
    ("empty", ""),
    ("empty", " \n\t "),
    ("special-tokens-only", "<|eot|><pad><pad>"),
    ("special-tokens-only", "</s>"),
    ("special-tokens-only", "<|im_end|>\n<|endoftext|>"),
    ("special-tokens-only", "<|im_"),  # a marker cut short by max_new_tokens: once a crash in detect
    ("special-tokens-only", " [PA"),
    ("token-repeat", "The name\n\n" + "<|pad|>" * 12),  # pad tokens forever instead of EOS
]
HEALTHY = {
    "code": "import torch\n\n\ndef add(a, b):\n    \"\"\"Add two numbers.\"\"\"\n    return a + b\n\n\nclass Point:\n"
            "    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n\n    def norm(self):\n"
            "        return (self.x ** 2 + self.y ** 2) ** 0.5\n\n\nassert add(1, 2) == 3\nassert add(2, 3) == 5\n"
            "assert add(3, 4) == 7\nMASK = 0xFFFFFFFFFFFFFFFF\n# " + "-" * 76 + "\n",
    "markdown table": "| model | params | T4 memory |\n| --- | --- | --- |\n| 0.5B | 494M | 3.1 GB |\n"
                      "| 1.5B | 1.5B | 5.2 GB |\n| 7B | 7.6B | 9.8 GB |\n| 8B | 8.0B | 10.4 GB |\n",
    "changelog": "## 0.4.1\n- Fixed a crash when the cache is empty\n- Fixed typos in the docs\n\n## 0.4.0\n"
                 "- Added packing\n- Fixed the resume bug (#41)\n- Fixed the tokenizer save (#42)\n\n## 0.3.9\n"
                 "- Fixed the tokenizer save\n",
    "license": "Permission is hereby granted, free of charge, to any person obtaining a copy of this software and "
               "associated documentation files (the \"Software\"), to deal in the Software without restriction, "
               "including without limitation the rights to use, copy, modify, merge, publish, distribute.\n\n"
               "THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED.",
    "numbered instructions": "1. Open the notebook.\n2. Attach the dataset.\n3. Turn on the GPU.\n4. Run all cells.\n"
                             "5. Download the adapter.\n6. Upload it as a new model version.\n",
    "markdown list": "Why it fails:\n\n- the pad token is the EOS token\n- the chat template differs\n"
                     "- fp16 overflows\n\nSee the docs.",
    "rst heading": "Installation\n============\n\nRun ``pip install nbutils`` and then import it.\n",
    "german": "Das Modell wird in vier Bit geladen, damit es auf eine T4 passt. Danach werden nur die kleinen "
              "Adapter trainiert, und die Gewichte des Basismodells bleiben eingefroren.",
    "french": "Le modèle est chargé en quatre bits pour tenir sur une T4. Ensuite, seuls les petits adaptateurs "
              "sont entraînés et les poids du modèle de base restent figés.",
    "chinese": "模型以四位精度加载，以便放入一块T4显卡。之后只训练小的适配器，基础模型的权重保持冻结。使用Python和PyTorch进行训练。",
    "russian": "Модель загружается в четырёх битах, чтобы поместиться на T4. Затем обучаются только небольшие "
               "адаптеры, а веса базовой модели остаются замороженными.",
    "json": '{"model": "qwen", "lr": 0.0002, "epochs": 3, "lora": {"r": 16, "alpha": 32, "dropout": 0.05}}',
    "padding after EOS": "Paris is the capital of France.</s>" + "<pad>" * 12,
}


@pytest.mark.parametrize("reason,text", POSITIVES, ids=[f"{r}-{i}" for i, (r, _) in enumerate(POSITIVES)])
def test_each_class_is_caught_with_its_reason(reason, text):
    v = detect(text)
    assert v.degenerate and reason in v.reasons, v


@pytest.mark.parametrize("kind", sorted(HEALTHY))
def test_healthy_kinds_are_not_flagged(kind):
    assert not detect(HEALTHY[kind]).degenerate, detect(HEALTHY[kind])


def test_long_healthy_text_passes_where_the_zlib_ratio_fails():
    with open(os.path.join(sysconfig.get_paths()["stdlib"], "LICENSE.txt"), encoding="utf-8") as f:
        long = f.read()
    assert whisper_rule(long) and not detect(long).degenerate  # zlib's ratio crosses 2.4 on long healthy text
    assert detect(long + "\n" + "I will stop now. " * 3).degenerate
    assert detect("I will stop now. " * 3).degenerate


def test_verdict_explains_itself():
    v = detect(PROSE + "I think this is right. " * 3)
    assert v.reasons == ["loop"] and v.metrics["loop_repeats"] >= 2 and v.metrics["loop_period"] > 0


# ---- where the text ends, punctuation, counting formats, scripts --------------------------------------------------

SENTENCE = "The adapter weights are saved next to the tokenizer so that the notebook can resume. "  # ~85 chars
CUT_LOOPS = {  # name: (healthy prefix, unit, copies); every cut of the last copy must be flagged
    "issue example": ("", "specify how encoding and errors: ", 30),
    "75-char period after prose": (PROSE * 3, SENTENCE, 18),
    "multi-sentence cycle": (PROSE, "It works. Then it stops. Then it works again, as before. ", 6),
    "prompt echo": ("Sure, here it is.\n", "### Instruction:\nSummarize the following text in two lines.\n\n", 5),
    "commas": ("", ", ", 300),
    "spaced commas": ("", " ,", 300),
    "commas after a word": ("x", " ,", 100),
    "code lines": ("def f(x):\n    return x\n", "for i in range(n):\n    total += weights[i] * values[i]\n", 4),
    "vietnamese NFD": ("", "Mô hình được nạp ở chế độ bốn bit. ", 8),
}


@pytest.mark.parametrize("name", sorted(CUT_LOOPS))
def test_loop_verdict_does_not_depend_on_where_the_text_ends(name):
    import unicodedata

    prefix, unit, copies = CUT_LOOPS[name]
    if "NFD" in name:
        unit = unicodedata.normalize("NFD", unit)
    body = prefix + unit * copies
    missed = [c for c in range(len(unit)) if not detect(body + unit[:c]).degenerate]
    assert not missed, (name, missed)


def test_a_counted_menu_of_nine_items_is_healthy_at_every_prefix_ten_or_more_are_a_counting_loop():
    from nbutils.eval.detect import COUNT_REPEATS

    menu = "".join(f"Move window to workspace {n}\n\n" for n in range(1, COUNT_REPEATS))
    assert not [k for k in range(20, len(menu) + 1) if detect(menu[:k]).degenerate]
    sorted_menu = "".join(f"Move window to workspace {n}\n\n" for n in sorted(range(1, 13), key=str))
    assert not [k for k in range(20, len(sorted_menu) + 1) if detect(sorted_menu[:k]).degenerate]
    loop = menu + "".join(f"Move window to workspace {n}\n\n" for n in range(COUNT_REPEATS, 30))
    assert "counting-loop" in detect(loop).reasons


@pytest.mark.parametrize("form", ["[{n}]", "({n})", "{n})", "<{n}>", "{{{n}}}", "#{n}", "{n}.", "— {n} —", "№{n}",
                                  "Step {n}: mix the dough.", "- [{n}] item", "| {n} | yes |"])
def test_counting_loops_in_any_bracket_or_separator_at_every_cut(form):
    text = "Here are the references: " + " ".join(form.format(n=n) for n in range(29, 75))
    last = form.format(n=75)
    missed = [c for c in range(len(last) + 1) if not detect(text + " " + last[:c]).degenerate]
    assert not missed, missed
    assert "counting-loop" in detect(text).reasons or "loop" in detect(text).reasons


@pytest.mark.parametrize("text", [", " * 300, " ," * 300, "x " + ", " * 100, "Well" + "!?" * 60, "ok" + " ." * 150])
def test_punctuation_loops_are_token_repeats(text):
    assert detect(text).degenerate and "token-repeat" in detect(text).reasons


SCRIPTS = {
    "vietnamese": "Mô hình được nạp ở chế độ bốn bit để vừa với một GPU T4. Sau đó chỉ các bộ chuyển đổi nhỏ được "
                  "huấn luyện, còn trọng số của mô hình gốc được giữ nguyên. Người dùng mới có thể chạy lại sổ tay.",
    "hindi": "मॉडल को चार बिट में लोड किया जाता है ताकि वह एक T4 पर आ सके। इसके बाद केवल छोटे एडाप्टर प्रशिक्षित किए "
             "जाते हैं और मूल मॉडल के भार स्थिर रहते हैं।",
    "thai": "โมเดลถูกโหลดแบบสี่บิตเพื่อให้พอดีกับการ์ด T4 หลังจากนั้นจะฝึกเฉพาะอะแดปเตอร์ขนาดเล็ก "
            "ส่วนน้ำหนักของโมเดลหลักจะคงที่ ผู้ใช้สามารถเริ่มใหม่ได้",
    "arabic with harakat": "يُحَمَّلُ النَّمُوذَجُ بِأَرْبَعِ بِتَّاتٍ لِيَتَّسِعَ فِي بِطَاقَةٍ وَاحِدَةٍ، ثُمَّ تُدَرَّبُ "
                           "المُحَوِّلَاتُ الصَّغِيرَةُ فَقَط وَتَبْقَى أَوْزَانُ النَّمُوذَجِ الأَصْلِيِّ ثَابِتَةً.",
    "ukrainian": "Модель завантажується у чотирьох бітах, щоб поміститися на T4. Потім навчаються лише невеликі "
                 "адаптери, а ваги базової моделі залишаються замороженими.",
    "chinese": HEALTHY["chinese"],
    "english": HEALTHY["license"],
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
@pytest.mark.parametrize("form", ["NFC", "NFD"])
def test_scripts_with_combining_marks_are_healthy_at_every_prefix(name, form):
    import unicodedata

    text = unicodedata.normalize(form, SCRIPTS[name])
    flagged = [k for k in range(40, len(text) + 1, 7) if detect(text[:k]).degenerate]
    assert not flagged and not detect(text).degenerate, (name, form, detect(text[:flagged[0]]) if flagged else None)


@pytest.mark.parametrize("ruler", ["~" * 40, "-" * 60, "=" * 30, "—" * 30, "＝" * 30, "─" * 50, "_" * 40, "ー" * 20,
                                   "ـ" * 20, "· " * 20])
def test_rulers_are_judged_the_same_in_every_script(ruler):
    # Two different paragraphs (the next script's): one said again verbatim after a ruler is a cycle begun.
    names = sorted(SCRIPTS)
    verdicts = {name: detect(SCRIPTS[name] + "\n\n" + ruler + "\n\n" + SCRIPTS[names[i - 1]]).degenerate
                for i, name in enumerate(names)}
    assert set(verdicts.values()) == {False}, verdicts
    assert detect(ruler * 8).degenerate  # a ruler as long as a page (past RULER_COLUMNS) is not layout


def test_ascii_fast_tokenizer_gives_the_same_tokens():
    """detect() tokenizes ASCII tails with a cheaper pattern: it must cut exactly where the Unicode one does."""
    import glob

    from nbutils.eval import detect as D

    files = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))[:40]
    texts = [open(f, encoding="utf-8", errors="replace").read()[:6000] for f in files]
    texts += ["a\x1cb\x1fc 0x1F \\x41 \\U0041 Step 41: foo_bar __init__ x1d4b0 ## 3rd", HEALTHY["license"]]
    checked = 0
    for text in texts:
        low = text.lower()
        if not low.isascii():
            continue
        norm = D.NUMBER_RE.sub(D._number, low)
        assert D.ASCII_TOKEN_RE.findall(norm) == D.TOKEN_RE.findall(norm)
        checked += 1
    assert checked >= 30


@pytest.mark.parametrize("junk", ["椼q<<#4慿vD|岧綕nj珹纒夡苾吇弁P炚免悦箉d槑K数h鏽藄({|7綿4GAn鴑R僢倣圅鞵",
                                  "უზბ\n壃駌布ŏüŶ峉ĀŹ欗ŶÿűĭãŮĥ擘郜ąŋ篚ĕŗĩÞ楝ŐĴŠ谷ěŃŴ", "adjusted\ue9de patil\uea77 muy"])
def test_random_characters_are_junk_where_script_switches_are_few(junk):
    assert "unicode-junk" in detect(junk).reasons


@pytest.mark.parametrize("text", ["白いTシャツを買いました。Pythonのバージョンは3.12です。iPhoneとMacBookで動きます。",
                                  "Nhập mã PIN của iPhone để mở khóa. Łódź i ŁÓDŹ to to samo miasto, McDonald's też.",
                                  "使用 pip install 安装 NumPy 和 PyTorch，然后运行 python -m pytest 检查。"])
def test_latin_words_and_capitals_in_other_scripts_are_no_junk(text):
    assert not any(detect(text[:k]).degenerate for k in range(10, len(text) + 1))


def test_two_sentences_said_twice_within_a_line_are_a_loop_wherever_the_text_ends():
    unit = "Codec details when looking up the registry. XML-RPC request handler class. "
    head = "The server module documents its handlers. " + unit * 2
    assert all("loop" in detect(head + unit[:c]).reasons for c in range(len(unit)))
    listing = "Accessible name\n\nAccessible role\n\n" + "The table caption changed\n\n" * 2  # list lines: not yet
    assert not detect(listing).degenerate


def test_a_table_cell_said_six_times_is_a_row_eight_times_a_loop():
    row = 'Table:\n   "quadratic blowup", ' + '"**True**", ' * 6
    assert not detect(row).degenerate and "loop" in detect(row + '"**True**", ' * 2).reasons
    assert "loop" in detect("Table:\n" + "<td>yes</td> " * 9).reasons



def test_sentences_with_code_said_twice_are_a_loop_a_code_example_said_twice_is_not():
    """A block of sentences said again word for word is a loop at two copies, even with `code`, <urls> and %s in
    it (those make it look like code); a README that shows the same code example twice is healthy."""
    unit = "Give cooperating semaphores the same explicit `name` and `directory`. If not, see <https://www.gnu.org/>.\n"
    head = "Semaphores\n==========\n\n" + unit * 2
    assert all("loop" in detect(head + unit[:c]).reasons for c in range(len(unit)))
    example = "Run it with::\n\n    pip install tox\n    tox -e py312 --parallel auto -- -k 'not slow'\n\n"
    readme = "Testing\n-------\n\n" + example + "Or, on Windows::\n\n" + example
    assert not any(detect(readme[:k]).degenerate for k in range(40, len(readme) + 1, 5))


def test_a_hex_table_cut_before_the_digits_of_a_literal_is_still_a_loop():
    """`0x` or `\\x` at the very end is a number cut short: one period back the same place holds a whole number."""
    unit = "    0x007e: 0x007e,     #  TILDE\n    0x007f: 0x007f,     #  DELETE\n    0x00a0: 0x00ff,     #  NBSP\n"
    body = "decoding_map = {\n" + unit * 3
    assert all(detect(body + unit[:c]).degenerate for c in range(len(unit)))
    escapes = "    '\\x7e'     #  0x7E -> TILDE\n    '\\x7f'     #  0x7F -> DELETE\n    '\\xa0'     #  0xA0 -> NBSP\n"
    assert all(detect("table = (\n" + escapes * 3 + escapes[:c]).degenerate for c in range(len(escapes)))
    healthy = "decoding_map = {\n    0x007e: 0x007e,     #  TILDE\n    0x007f: 0x007f,     #  DELETE\n    0x"
    assert not detect(healthy).degenerate
    assert not any(detect(t).degenerate for t in ("0x", "\\", "\\x", " 0x", "a\\u"))  # nothing left: no crash


DOCS = {"chinese": "生成一个位置无关的可执行文件\n\n即使发生错误也要创建输出文件",
        "ukrainian": "Модель завантажується у чотирьох бітах.\n\nПотім навчаються лише невеликі адаптери."}


@pytest.mark.parametrize("width", [3, 20, 72, 78, 80, 100, 120])
@pytest.mark.parametrize("char", ["~", "=", "-", "#", "*", ".", "─"])
@pytest.mark.parametrize("doc", sorted(DOCS))
def test_ruler_lines_between_sections_are_healthy_at_every_prefix(doc, char, width):
    """A line of one separator up to RULER_COLUMNS wide, after blank lines, under a title or alone: at every third
    prefix while a ruler is being written and for a few characters after it, every ninth in the prose between."""
    text = DOCS[doc] + "\n\n\n" + char * width + "\n\n" + DOCS[doc] + "\n" + char * width + "\n" + DOCS[doc]
    rulers = [range(m.start(), m.end() + 6) for m in re.finditer(re.escape(char) + "+", text) if len(m.group()) == width]
    flagged = [k for k in range(10, len(text) + 1)
               if k % (3 if any(k in r for r in rulers) else 9) == 0 and detect(text[:k]).degenerate]
    assert not flagged, (flagged[:1], detect(text[:flagged[0]]).reasons if flagged else None)
    assert not detect("\ufeff" + char * width + "\nTitle\n" + char * width + "\n" + DOCS[doc]).degenerate


@pytest.mark.parametrize("char", ["~", "=", "."])
def test_runs_that_are_no_ruler_are_loops_by_their_characters(char):
    """Wider than RULER_COLUMNS at a line start, or past 100 after words on the same line: dot runs included."""
    assert "char-repeat" in detect("Chapter one\n\n" + char * 121).reasons
    assert "char-repeat" in detect("Loading the model " + char * 100).reasons
    assert not detect("Loading the model " + char * 60 + " done.").degenerate


def test_a_programs_sample_output_in_a_code_block_is_no_loop_until_it_goes_on():
    line = "Hello from the adapter!\n"
    head = "Run it:\n\n```python\nfor _ in range(3):\n    print('Hello from the adapter!')\n```\n\nOutput:\n\n```\n"
    assert not any(detect(head + (line * 4)[:k]).degenerate for k in range(1, 4 * len(line)))
    assert "loop" in detect(head + line * 6).reasons  # inside a code block too, a line said on and on is a loop
    assert "loop" in detect("The output is:\n" + line * 3).reasons  # outside a code block, three copies are one


def test_sample_output_after_a_long_document_is_judged_by_all_of_its_code_blocks():
    """The end of a long text opens a code block; the window the check reads starts inside an earlier block whose
    closing fence it sees: the whole text says where the end is."""
    line = "automate that too.\n"
    earlier = ("Install it:\n\n```bash\npip install automation-tools\nautomate init --path ./jobs\n"
               "automate add nightly --cron '0 2 * * *' --command 'python backup.py'\nautomate add report --after "
               "nightly --command 'python report.py --mail ops@example.org'\nautomate check --strict\n"
               "automate list --format=json\n{\n  \"nightly\": \"0 2 * * *\",\n  \"report\": \"after nightly\"\n}\n```\n\n")
    head = earlier + "Then:\n\n```pycon\n>>> for i in range(4):\n...     print('automate that too.')\n```\n\nOutput:\n\n```\n"
    assert not any(detect(head + (line * 4)[:k]).degenerate for k in range(1, 4 * len(line)))
    assert "loop" in detect(head + line * 6).reasons


def test_a_list_of_shell_commands_is_no_soup():
    cmds = ("pip install torch transformers accelerate\npip uninstall -y bitsandbytes\npip install peft==0.17.1 "
            "datasets\npython -m pip install -U huggingface-hub\npip install tokenizers safetensors sentencepiece\n"
            "pip uninstall -y tensorflow jax\npython -m pip install -U rouge-score sacrebleu\npip install nltk")
    assert not any(detect(cmds[:k]).degenerate for k in range(20, len(cmds) + 1, 5))


def test_a_character_cut_at_the_end_is_judged_without_its_first_bytes():
    """A stop or max_new_tokens can cut a character in two; decoded, it ends in U+FFFD. The verdict is that of the
    text before it, as the guard judges it."""
    for text in ["中, " * 6, "A calm and healthy sentence about the adapter"]:
        assert detect(text + "\ufffd").reasons == detect(text).reasons
        assert detect(text + "\ufffd\ufffd").reasons == detect(text).reasons


def test_a_counted_table_in_code_is_healthy_counted_lines_of_prose_are_a_loop():
    """An enum, a codec's table, a key map: indented lines of code that count, as long as the source goes on. Counted
    lines of prose, indented or not, are a counting loop."""
    keys = "_capability_names = {\n" + "".join(f"    _curses.KEY_F{n}: 'kf{n}',\n" for n in sorted(range(64), key=str))
    codec = "decoding_table = (\n" + "".join(f"    '\\ufffe'   #  0x{n:02X} -> UNDEFINED\n" for n in range(0x80, 0xA0))
    for text in (keys, codec):
        assert not [k for k in range(200, len(text) + 1, 11) if detect(text[:k]).degenerate]
    steps = "".join(f"    Step {n}: add the flour to the bowl.\n" for n in range(1, 40))
    assert "counting-loop" in detect(steps).reasons


def test_escapes_and_options_that_differ_only_in_case_are_different_lines_said_in_one_case_they_loop():
    """A catalog lists an interpolation message for `\\L`, `\\U`, `\\l` and `\\u`, or a linker's for `-F` and `-f`:
    lowercased, the lines are one said again. Escapes and one-letter options keep their case; the same line said in
    one case is a loop as before."""
    line = '%s:%d: 8비트 문자 "%c"의 인터폴레이션("\\{}")이 잘못되었습니다\n\n'
    head = "%s:%d: 잘못된 RSJ 버전. 버전 1만 지원합니다.\n\n"
    text = head + "".join(line.format(c) for c in "LUlu") + "%s:%d: 잘못된 문자열 정의"
    assert not [k for k in range(100, len(text) + 1, 3) if detect(text[:k]).degenerate]
    assert "loop" in detect(head + line.format("L") * 3).reasons
    options = ("%F%P: no se puede usar --no-define-common sin -shared\n\n%F%P: no se puede usar -F sin -shared\n\n"
               "%F%P: no se puede usar -f sin -shared\n\n%F%P: no se puede usar -r y -shared a la vez\n\n")
    assert not [k for k in range(100, len(options) + 1, 2) if detect(options[:k]).degenerate]
    assert "loop" in detect("%F%P: no se puede usar -F sin -shared\n\n" * 3).reasons


def test_a_list_of_printf_placeholders_is_healthy_a_long_run_of_them_is_a_loop():
    """dpkg's catalogs name twelve options as `--%s, --%s, ... or --%s`: each placeholder prints a different value, so
    such a list is a list up to 2 * COUNT_REPEATS items, as counted items are."""
    msg = ("Il faut indiquer une action parmi --%s, --%s, --%s, --%s, --%s, --%s, --%s, --%s, --%s, --%s, --%s ou "
           "--%s\n\nAucune action indiquée\n\n")
    assert not [k for k in range(30, len(msg) + 1) if detect(msg[:k]).degenerate]
    assert "loop" in detect("Options: " + "--%s, " * 21).reasons


def test_an_ipv6_mask_is_an_address_at_every_prefix_hex_groups_said_on_are_a_token_repeat():
    """An IPv6 address or mask has eight groups (ffff:ffff:...: 39 characters, in any case); a ninth is no address."""
    text = ">>> net_if_addrs()\n{'lo': [addr(family=AF_INET6, address='::1', netmask='{}', broadcast=None)]}"
    for mask in (":".join(["ffff"] * 8), ":".join(["FFFF"] * 8)):
        full = text.replace("{}", mask)
        assert not any(detect(full[:k], lookback=0).degenerate for k in range(20, len(full) + 1)), mask
    assert detect("The mask is " + "ffff:" * 12).reasons == ["token-repeat"]


def test_counting_to_a_hundred_is_a_count_a_number_said_again_is_a_loop():
    """A real model asked to write the numbers from 1 to 100 counts; bare numbers that step evenly are a count at
    every prefix, whatever the separator. A number said again, or counted inside a bracket, stays a loop."""
    for sep in (", ", " ", "\n", "; "):
        count = sep.join(str(n) for n in range(1, 60))
        assert not [k for k in range(1, len(count) + 1, 5) if detect(count[:k]).degenerate], sep
    assert "token-repeat" in detect("5, " * 30).reasons and "counting-loop" in detect(" ".join(
        f"[{n}]" for n in range(29, 60))).reasons


def test_list_items_said_again_under_the_next_numbers_are_copies():
    """A real model listing animals wrote one item three times under the numbers 1, 2, 3 and ended: the numbers are
    the list's layout, so three items are three copies of a line, however short, symbols and all; two are not."""
    item = "{}. Blue-Eyed Bluefin-Boreas (Bluefin-Boreas)"
    assert "counting-loop" in detect("\n".join(item.format(n) for n in (1, 2, 3))).reasons
    assert not detect("\n".join(item.format(n) for n in (1, 2))).degenerate
    albania = "\n".join(f"{n}. Albania (2023)" for n in range(2, 5))  # a year said again in every copy is content
    assert "counting-loop" in detect("1. Albania, Albania (2023)\n" + albania + "\n5.").reasons
    assert not detect("1. Albania (2023)\n2. Austria (2023)\n3. Belgium (2023)\n4.").degenerate

