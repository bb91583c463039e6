"""The degeneration stress set: how it is generated, the figures computed on it, and guard / detect agreement."""

import glob
import zlib

import pytest

from nbutils.eval import corpus, scorecard, stress
from nbutils.eval.detect import detect


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


def test_halves_do_not_depend_on_where_the_checkout_lives():
    """A package file is in the same half whether the virtual environment is under /work/main or a worktree:
    the half is a hash of the path inside site-packages."""
    rels = [f"/pkg{i}/README.md" for i in range(16)]
    halves = [corpus.is_reported(corpus.Doc("markdown", corpus.SITE + r, "x")) for r in rels]
    assert halves == [zlib.crc32(f"site-packages{r}".encode()) % 2 == 1 for r in rels]
    assert any(halves) and not all(halves)


def test_healthy_text_covers_scripts_and_structure(small):
    healthy, _ = small
    groups = {s.group for s in healthy}
    assert {"code", "table", "log", "markdown", "license"} <= groups
    if len(glob.glob("/usr/share/locale/*/LC_MESSAGES/*.mo")) > 100:  # the system's gettext catalogs are here
        scripts = {d.script for d in corpus.documents() if d.kind == "prose"}
        assert len(scripts) >= 10 and {"vietnamese", "vietnamese-nfd", "devanagari", "thai", "arabic"} <= scripts


def test_score_counts_recall_per_cut_false_positives_and_latency():
    healthy = [stress.Sample("healthy", "fine.", "thai"), stress.Sample("healthy", "fine too.", "code")]
    bad = [stress.Sample("token-repeat", "ok " * 40, onset=3, cut=j) for j in range(stress.CUTS)]
    flags = {id(healthy[0]): True, id(healthy[1]): False, **{id(s): s.cut != 3 for s in bad}}
    r = scorecard.score(healthy, bad, flags, lambda t: len(t) >= 40)
    c = r["classes"]["token-repeat"]
    assert c["recall"] == pytest.approx(7 / 8) and c["min_cut"] == 0.0 and c["latency"] == 40  # 8 characters at a time from the onset
    assert r["fp"] == 0.5 and r["fp_groups"] == {"thai": 1.0, "code": 0.0} and r["fp_structured"] == 0.0


def test_streaming_guard_and_detect_agree_on_the_same_texts(small):
    from nbutils.train.modeling import load_tokenizer

    healthy, bad = small
    loops = [s for s in bad if s.cls in stress.LOOP_CLASSES and s.cut % 2 == 0]
    samples = healthy[:40] + loops
    stops = scorecard.stream(samples, load_tokenizer("embedded"))
    for s in loops:
        stop = stops[id(s)]
        if stop.stopped:  # what the guard stops is flagged post hoc, at the stop and at the end
            assert detect(s.text[:stop.at_char]).degenerate and detect(s.text).degenerate, s
    assert sum(stops[id(s)].stopped for s in loops) >= 0.9 * len(loops)
    assert sum(stops[id(s)].stopped for s in healthy[:40]) <= 2
    agree = sum(stops[id(s)].stopped == detect(s.text).degenerate for s in samples) / len(samples)
    assert agree >= 0.9
