"""Healthy text for the stress set (`bench.degeneration.corpus`): documents from files on the machine, their script, and the
tuning/reported halves."""

import zlib

import pytest

from bench.degeneration import corpus


def test_script_of_names_the_script_of_a_text():
    assert corpus.script_of("The adapter is trained in four-bit precision.") == "latin"
    assert corpus.script_of("Привет, как дела? Это обычный текст.") != corpus.script_of("これは普通の日本語の文章です。")
    assert corpus.script_of("สวัสดีครับ นี่คือข้อความภาษาไทย") == "thai"


@pytest.mark.integration  # reads every document on the machine: about 15 s
def test_every_document_has_a_kind_a_source_and_text():
    docs = corpus.documents()
    assert docs and all(d.kind and d.source and d.text.strip() for d in docs)
    assert {"code", "markdown", "license"} <= {d.kind for d in docs}


def test_halves_do_not_depend_on_where_the_checkout_lives():
    """A package file is in the same half whether the virtual environment is under /work/main or a worktree:
    the half is a hash of the path inside site-packages."""
    rels = [f"/pkg{i}/README.md" for i in range(16)]
    halves = [corpus.is_reported(corpus.Doc("markdown", corpus.SITE + r, "x")) for r in rels]
    assert halves == [zlib.crc32(f"site-packages{r}".encode()) % 2 == 1 for r in rels]
    assert any(halves) and not all(halves)
