"""The figures computed on the stress set (`bench.degeneration.scorecard`): recall per class and per cut, false positives
per group, latency; and the guard streamed token by token over the same texts as `detect` sees them."""

import pytest

from bench.degeneration import scorecard, stress
from nbutils.eval.detect import detect


@pytest.fixture(scope="module")
def small():
    return stress.build(stress.TUNING_SEED, reported=False, n_healthy=60, per_class=2)


def test_score_counts_recall_per_cut_false_positives_and_latency():
    healthy = [stress.Sample("healthy", "fine.", "thai"), stress.Sample("healthy", "fine too.", "code")]
    bad = [stress.Sample("token-repeat", "ok " * 40, onset=3, cut=j) for j in range(stress.CUTS)]
    flags = {id(healthy[0]): True, id(healthy[1]): False, **{id(s): s.cut != 3 for s in bad}}
    r = scorecard.score(healthy, bad, flags, lambda t: len(t) >= 40)
    c = r["classes"]["token-repeat"]
    assert c["recall"] == pytest.approx(7 / 8) and c["min_cut"] == 0.0 and c["latency"] == 40  # 8 characters at a time from the onset
    assert r["fp"] == 0.5 and r["fp_groups"] == {"thai": 1.0, "code": 0.0} and r["fp_structured"] == 0.0


@pytest.mark.integration  # builds a stress sample (every document on the machine) and streams it: about 30 s
def test_streaming_guard_and_detect_agree_on_the_same_texts(small):
    from nbutils.data.chatformat import load_tokenizer

    healthy, bad = small
    loops = [s for s in bad if s.cls in stress.LOOP_CLASSES and s.cut % 2 == 0]
    samples = healthy[:40] + loops
    stops = scorecard.stream(samples, load_tokenizer("embedded"))
    for s in loops:
        stop = stops[id(s)]
        if stop.stopped:  # what the guard stops is flagged post hoc, on the prefix decoded up to the stop
            assert stop.agreed and detect(s.text).degenerate, s
    assert sum(stops[id(s)].stopped for s in loops) >= 0.9 * len(loops)
    assert sum(stops[id(s)].stopped for s in healthy[:40]) <= 2
    agree = sum(stops[id(s)].stopped == detect(s.text).degenerate for s in samples) / len(samples)
    assert agree >= 0.9
