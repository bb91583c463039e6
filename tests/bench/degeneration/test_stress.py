"""The degeneration stress set (`bench.degeneration.stress`): every class after a healthy prefix, cut at eight offsets,
healthy text of every kind, tuning and reported samples apart."""

import glob

import pytest

from bench.degeneration import corpus, stress
from nbutils.eval.detect import detect

# Every test builds a stress sample, which reads every document on the machine first (about 15 s per process).
pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def small():
    return stress.build(stress.TUNING_SEED, reported=False, n_healthy=60, per_class=2)


def test_every_class_is_cut_at_eight_offsets_of_its_last_period(small):
    _, bad = small
    assert {s.cls for s in bad} == set(stress.CLASSES)
    for cls in stress.CLASSES:
        for base in (0, 1):
            cuts = [s for s in bad if s.cls == cls and s.base == base]
            assert [s.cut for s in cuts] == list(range(stress.CUTS))
            if cls != "empty":
                lengths = [len(s.text) for s in cuts]
                assert lengths == sorted(lengths) and all(c.text.startswith(cuts[0].text) for c in cuts)
                assert cuts[0].onset <= len(cuts[0].text)


def test_prefixes_are_healthy_and_at_most_600_characters(small):
    _, bad = small
    for s in bad:
        if s.cls in stress.LOOP_CLASSES and s.cls != "char-repeat":
            assert s.onset <= 600 + 2 + 1500, s  # prefix (<= 600) + separator + the loop's first copy
            assert not detect(s.text[:max(0, s.onset - 420)].rstrip()).degenerate or s.onset < 440


def test_tuning_and_reported_samples_differ():
    a, _ = stress.build(stress.TUNING_SEED, reported=False, n_healthy=20, per_class=1)
    b, _ = stress.build(stress.REPORTED_SEED, reported=True, n_healthy=20, per_class=1)
    assert stress.TUNING_SEED != stress.REPORTED_SEED and not {s.text for s in a} & {s.text for s in b}
    docs = corpus.documents()
    assert any(corpus.is_reported(d) for d in docs) and not all(corpus.is_reported(d) for d in docs)


def test_healthy_text_covers_scripts_and_structure(small):
    healthy, _ = small
    groups = {s.group for s in healthy}
    assert {"code", "table", "log", "markdown", "license"} <= groups
    if len(glob.glob("/usr/share/locale/*/LC_MESSAGES/*.mo")) > 100:  # the system's gettext catalogs are here
        scripts = {d.script for d in corpus.documents() if d.kind == "prose"}
        assert len(scripts) >= 10 and {"vietnamese", "vietnamese-nfd", "devanagari", "thai", "arabic"} <= scripts


def test_per_group_draws_that_many_of_every_script_and_kind():
    from collections import Counter

    healthy, _ = stress.build(stress.TUNING_SEED, reported=False, per_class=1, per_group=3)
    counts = Counter(s.group for s in healthy)
    groups = {stress.group_of(d) for d in stress.everything() if not corpus.is_reported(d)}
    assert set(counts) == groups and set(counts.values()) == {3}
