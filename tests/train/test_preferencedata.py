"""05's rows before anything loads: the data fits the method, held-out rows apart from training, the steps and the
lengths the data asks for."""

import pytest

from nbutils.runtime import modelsource
from nbutils.train import preference, preferencedata


def test_the_data_must_fit_the_method_before_anything_loads():
    kto_row, pair = {"prompt": "p", "completion": "c", "label": True}, {"prompt": "p", "chosen": "a", "rejected": "b"}
    [dpo] = preferencedata.fit_problems("dpo", [kto_row] * 3, [kto_row], "kto.jsonl", 16)
    assert "unpaired KTO rows (prompt/completion/label: 3 train and 1 held-out)" in dpo and "set method='kto'" in dpo
    assert preferencedata.fit_problems("orpo", [pair], [pair], "pairs.jsonl", 16) == []
    assert preferencedata.fit_problems("kto", [kto_row], [pair], "x", 16) == []  # pairs or unpaired rows
    assert "per_device_batch_size=1: KTO estimates its KL term" in preferencedata.fit_problems("kto", [kto_row], [], "x", 1)[0]
    grpo = preferencedata.fit_problems("grpo", [{"prompt": [], "answer": "a"}], [], "pairs.jsonl", 16)
    assert "GRPO samples its own answers to 01's prompts and reads no preference file" in grpo[0]
    assert "1 of 01's records have no user turn" in grpo[1]


def _plan(method, train, held, counts, **kw):
    """A PreferencePlan around rows and counts, for its table (no model, no GPU)."""
    from types import SimpleNamespace

    rec = SimpleNamespace(base_model="embedded", quantization=None, precision="fp32")
    mem = {"parts_gb": {}, "estimate_gb": 0.1, "what": "x"}
    return preference.PreferencePlan(SimpleNamespace(rows=dict), method, rec, None, None, None, train, held, counts,
                                     mem, 1e-3, "given", 4, 2, 256, **kw)


def _write(path, rows):
    import json

    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.mark.parametrize("method", ["dpo", "kto"])
def test_held_out_pairs_sharing_a_training_prompt_are_quarantined_counted_and_said(method, tmp_path, tok):
    """Train and held-out files are deduplicated each on its own: a held-out pair on a training prompt would judge
    what the policy trained on. It is quarantined, the counts still add up and the table says it; KTO's table gives
    its rows and the records they came from."""
    train = [{"prompt": f"Q{i}", "chosen": f"good {i}", "rejected": f"bad {i}"} for i in range(20)]
    held = [*train[:5], {"prompt": "Q5", "chosen": "other", "rejected": "answer"}, {"prompt": "Qx", "chosen": "g",
                                                                                      "rejected": "b"}]
    rows, kept, counts = preferencedata.read_data(method, tmp_path, tmp_path, tok, _write(tmp_path / "t.jsonl", train),
                                                  _write(tmp_path / "e.jsonl", held), 0.1, 0, 256, None)
    assert [r["line"] for r in kept] == [7] and not {r["prompt"] for r in kept} & {r["prompt"] for r in rows}
    assert counts["reasons"] == {"held-out-overlap": 6} and counts["shapes"] == {"pairs": 21}
    assert counts["records"] == counts["kept"] + counts["quarantined"] + counts["duplicates"] == 27
    table = _plan(method, rows, kept, counts).table()
    assert "6 held-out records share a training record's prompt: quarantined" in table
    assert ("40 rows from 20 records (a pair gives two rows) train / 1 held out" if method == "kto"
            else "20 train / 1 held out") in table


def test_auto_steps_are_one_epoch_for_a_real_model_and_the_methods_own_for_a_toy_one():
    """A fixed 16 steps trains 5,000 pairs at batch 16 on 5% of them: a real model's "auto" is one pass, capped; the
    embedded default (and every smoke run) keeps its fast steps."""
    from transformers import LlamaConfig

    real = LlamaConfig(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                       num_key_value_heads=8)  # Llama-3.2-1B's shape
    toy = modelsource.load_config("embedded")

    def steps(method, rows, config=real, value="auto", smoke=False, batch=16, accum=1):
        return preference._schedule(method, value, smoke, rows, batch, accum, 4, config)

    assert steps("dpo", 5000) == (313, "auto: one epoch; 1.00 epochs of 5000 training rows")
    assert steps("dpo", 5000, accum=2)[0] == 157 and steps("grpo", 432)[0] == 108  # GRPO: 4 prompts a step
    assert steps("dpo", 60000)[0] == preferencedata.MAX_AUTO_STEPS
    assert "capped at 1000; 0.27 epochs" in steps("dpo", 60000)[1]
    assert steps("dpo", 5000, toy)[0] == 16 and steps("grpo", 432, toy)[0] == 40
    assert steps("dpo", 5000, value=50)[0] == 50 and steps("dpo", 5000, smoke=True)[0] == preference.SMOKE["max_steps"]


def test_a_fifth_of_the_records_over_max_length_stops_the_plan_naming_the_length_that_keeps_99_percent(tmp_path, tok):
    short = [{"prompt": f"Q{i}", "chosen": "a", "rejected": "b"} for i in range(6)]
    long = [{"prompt": f"L{i}", "chosen": "word " * (40 + i), "rejected": "b"} for i in range(4)]
    _, _, counts = preferencedata.read_data("dpo", tmp_path, tmp_path, tok, _write(tmp_path / "t.jsonl", short + long),
                                            "auto", 0.2, 0, 32, None)
    length = counts["length"]
    assert (length["too_long"], length["measured"]) == (4, 10) and length["keeps_99_percent"] % 64 == 0
    [problem] = preferencedata.length_problems(counts, 32)
    assert problem.startswith("4 of 10 records are longer than max_length=32 tokens")
    assert f"set max_length={length['keeps_99_percent']}, which keeps 99% of them" in problem
    assert preferencedata.length_problems({"length": {**length, "too_long": 2}}, 32) == []  # a fifth: a few outliers


def test_grpos_completion_length_auto_follows_the_reference_answers(tok):
    """16 tokens was the toy model's value for every model: "auto" is 03's rule over the reference answers."""
    rows = [{"prompt": [], "answer": "city"}]
    assert preferencedata.completion_length("grpo", "auto", tok, rows)[0] == 16  # the embedded task: as fast as before
    longer = preferencedata.completion_length("grpo", "auto", tok, [{"prompt": [], "answer": "word " * 60}])[0]
    assert longer > 60 and preferencedata.completion_length("grpo", 24, tok, rows) == (24, "given")
    assert preferencedata.completion_length("dpo", "auto", tok, rows)[0] == 0


def test_embedded_pairs_are_refused_on_a_users_data_and_built_on_the_embedded_task(prepared_data, tmp_path, tok):
    """preference_data="embedded" (05's default) pairs each answer with a random word of the toy task: on a user's
    data that is a held-out accuracy that means nothing. 01's manifest says which data it prepared: on the embedded
    task the pairs are built; on any other data none are, and the plan says what to set. GRPO reads no pairs."""
    from nbutils.data import splits

    raw = _write(tmp_path / "mine.jsonl", [{"instruction": f"Add {i} and {i}.", "output": str(2 * i)} for i in range(30)])
    mine = tmp_path / "data_prep"
    splits.prepare([raw], mine, tok, base_model="embedded", verbose=False, plot=False)
    assert preferencedata.embedded_task(prepared_data) and not preferencedata.embedded_task(mine)
    out = tmp_path / "preference"
    out.mkdir()
    train, held, counts = preferencedata.read_data("dpo", mine, out, tok, "embedded", "auto", 0.1, 0, 256, None)
    assert (train, held, counts) == ([], [], {"pairs": preferencedata.NOT_EMBEDDED})
    assert not any(out.iterdir())  # no toy pairs written beside the plan
    for method in ("dpo", "orpo", "kto"):
        [problem] = preferencedata.fit_problems(method, train, held, "embedded", 16, counts)
        assert "set preference_data to your pairs or KTO file(s)" in problem and "method='grpo'" in problem
    assert "pairs not built: 01's data is not the embedded task" in _plan("dpo", train, held, counts).table()
    unbuilt = _plan("dpo", train, held, counts)
    unbuilt.memory.update(checkpoint_mb=1, gpu_memory_gb=None)
    unbuilt.out = out
    assert preference._checks(unbuilt, 16, 4) == []  # no "no training rows" after the refusal that explains it
    grpo, _, _ = preferencedata.read_data("grpo", mine, out, tok, "embedded", "auto", 0.1, 0, 256, None)
    assert grpo and preferencedata.fit_problems("grpo", grpo, [], "embedded", 16) == []
    train, held, counts = preferencedata.read_data("dpo", prepared_data, out, tok, "embedded", "auto", 0.1, 0, 256, None)
    assert train and held and "pairs" not in counts
    assert preferencedata.fit_problems("dpo", train, held, "embedded", 16, counts) == []
    # the embedded task with every pair lost (too long, say) is not "your data": no such advice
    assert not any("01 prepared your data" in p for p in preferencedata.fit_problems("dpo", [], [], "embedded", 16, {}))
