"""Healthy documents in tricky shapes (`bench.degeneration.shaped`): rulers, openings, sample output, command lists."""

import random

from bench.degeneration import shaped
from bench.degeneration.corpus import Doc, snippet
from nbutils.eval.detect import RULER_COLUMNS, detect

PROSE = Doc("prose", "/usr/share/locale/uk/LC_MESSAGES/x.mo",
            "\n\n".join(f"Повідомлення номер {w}: файл не знайдено, спробуйте ще раз." for w in "абвгґдеєжзиіїй"), "cyrillic")
README = Doc("readme", "site-packages/x/METADATA", "# Title\n\nInstall it, then run it.\n\nIt prints what it did.\n" * 5)


def test_ruled_documents_hold_rulers_no_wider_than_a_ruler():
    doc = shaped.ruled([PROSE])[0]
    rulers = [line for line in doc.text.splitlines() if line and len(set(line)) == 1 and line[0] in shaped.RULER_CHARS]
    assert doc.kind == "ruled" and doc.script == "cyrillic" and rulers
    assert all(len(r) * (2 if r[0] in "─━═＝－～" else 1) <= RULER_COLUMNS for r in rulers)


def test_opened_documents_are_sampled_from_their_start():
    docs = shaped.opened([Doc("readme", f"site-packages/p{i}/METADATA", README.text) for i in range(40)])
    assert docs and all(d.kind == "opened" for d in docs)
    for d in docs:
        assert snippet(d, random.Random(0)).startswith(d.text[:5])


def test_sample_output_repeats_a_short_line_inside_a_code_block():
    doc = shaped.output([README, Doc("docstring", "a.py#doc", "Return the value of the thing.\n")], n=3)[0]
    assert doc.kind == "output" and "Output:\n\n```\n" in doc.text
    printed = doc.text.split("Output:\n\n```\n", 1)[1].split("\n```", 1)[0].splitlines()
    assert 2 <= len(printed) <= 4 and len(set(printed)) == 1


def test_command_lists_and_every_shaped_kind_are_healthy_where_they_end():
    docs = shaped.commands(n=4) + shaped.ruled([PROSE])
    assert docs[0].kind == "commands" and any(line.startswith(("pip ", "$ pip")) for line in docs[0].text.splitlines())
    for d in docs:
        assert not detect(d.text).degenerate, (d.kind, detect(d.text).reasons)
