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
    assert preference._checks(unbuilt, 16) == []  # no "no training rows" after the refusal that explains it
    grpo, _, _ = preferencedata.read_data("grpo", mine, out, tok, "embedded", "auto", 0.1, 0, 256, None)
    assert grpo and preferencedata.fit_problems("grpo", grpo, [], "embedded", 16) == []
    train, held, counts = preferencedata.read_data("dpo", prepared_data, out, tok, "embedded", "auto", 0.1, 0, 256, None)
    assert train and held and "pairs" not in counts
    assert preferencedata.fit_problems("dpo", train, held, "embedded", 16, counts) == []
    # the embedded task with every pair lost (too long, say) is not "your data": no such advice
    assert not any("01 prepared your data" in p for p in preferencedata.fit_problems("dpo", [], [], "embedded", 16, {}))


def _gpus(n):
    from nbutils.runtime.preflight import Accelerator

    return [Accelerator(i, "Tesla T4", (7, 5), 14.7) for i in range(n)]


def _no_launcher_env(monkeypatch, **given):
    """CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER and LOCAL_RANK as given, else unset; each put back after the test
    (set first, so that monkeypatch restores a variable the code under test sets)."""
    for name in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "LOCAL_RANK"):
        monkeypatch.setenv(name, "x")
        if name in given:
            monkeypatch.setenv(name, given[name])
        else:
            monkeypatch.delenv(name)


def test_05_keeps_one_of_several_gpus_and_leaves_a_value_the_user_set(monkeypatch):
    """Kaggle's "GPU T4 x2": transformers would wrap the model in nn.DataParallel, which trl's DPO, KTO and GRPO
    trainers refuse after the model loaded (ORPO's trains twice the planned batch). 05 keeps the first GPU, before
    anything initialises CUDA; a CUDA_VISIBLE_DEVICES the user set is left as it is (several in it: a problem)."""
    import os

    _no_launcher_env(monkeypatch)
    kept, note, problems = preference.one_gpu(_gpus(2))
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0" and os.environ["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert len(kept) == 1 and not problems and "one of the 2 visible: Tesla T4 (CUDA_VISIBLE_DEVICES=0 set)" in note
    assert preference.one_gpu(_gpus(1)) == (_gpus(1), "", [])
    _no_launcher_env(monkeypatch, CUDA_VISIBLE_DEVICES="0,1")
    kept, note, [problem] = preference.one_gpu(_gpus(2))
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,1" and len(kept) == 2 and not note
    assert "CUDA_VISIBLE_DEVICES='0,1' shows 2 GPUs, and 05 trains on one" in problem
    _no_launcher_env(monkeypatch, LOCAL_RANK="1")  # a launcher placed this process on its GPU
    assert preference.one_gpu(_gpus(2)) == (_gpus(2), "", []) and "CUDA_VISIBLE_DEVICES" not in os.environ


def test_05s_grpo_plan_uses_one_gpu_its_longest_prompt_and_trls_batch_rule(tmp_path, monkeypatch, capsys):
    """plan_preference's wiring on two visible T4s: preflight and the memory plan see one GPU; GRPO's memory is
    planned from the longest prompt kept (not max_length); trl's batch rule (batch x grad_accum whole groups) and
    the reward check for long reference answers reach the problems; the table says which GPU trains."""
    import os

    from nbutils.runtime.preflight import inspect
    from nbutils.train import diskspace
    from nbutils.train.recipe import Recipe

    _no_launcher_env(monkeypatch)
    seen, toy = {}, modelsource.load_config("embedded")
    monkeypatch.setattr(preference, "accelerators", lambda: _gpus(len(os.environ.get("CUDA_VISIBLE_DEVICES", "0,1")
                                                                       .split(","))))  # nvidia-smi, as preflight reads it
    monkeypatch.setattr(preference, "inspect", lambda *a: seen.setdefault("env", inspect(*a)))
    monkeypatch.setattr(preference.checkpoints, "for_eval", lambda d: (tmp_path, {}))
    monkeypatch.setattr(preference.recipe, "from_checkpoint",
                        lambda *a: Recipe("embedded", {"load_in_4bit": True}, "fp16", "fp16", {"r": 8}))
    monkeypatch.setattr(preference.recipe, "trained_tokenizer", lambda *a: None)
    monkeypatch.setattr(preference.recipe, "read_run_config", lambda ckpt: {})
    monkeypatch.setattr(preference.modelsource, "check", lambda name: None)
    monkeypatch.setattr(preference.modelsource, "load_config", lambda name: toy)
    monkeypatch.setattr(diskspace, "check", lambda out, need, keep: None)
    rows = [{"prompt": [{"role": "user", "content": f"Q{i}"}], "answer": "a long reference answer " * 3}
            for i in range(8)]
    monkeypatch.setattr(preferencedata, "read_data", lambda *a: (rows, rows[:2], {"prompts": 8, "longest_prompt": 37}))
    mem = {"parts_gb": {}, "estimate_gb": 1.0, "what": "x", "gpu_memory_gb": None, "checkpoint_mb": 1.0}
    monkeypatch.setattr(preference, "plan_memory", lambda *a: seen.setdefault("memory", a) and mem)
    with pytest.raises(preference.PreferencePlanError) as refused:
        preference.plan_preference(method="grpo", data_dir=tmp_path, adapter_dir=tmp_path, out=tmp_path,
                                   per_device_batch_size=4, grad_accum=1, num_generations=8, max_completion_length=32,
                                   reward_functions="nbutils.eval.rewards:correct,nbutils.eval.rewards:well_formed")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0" and seen["env"][0].gpu_count == 1
    assert "one of the 2 visible: Tesla T4 (CUDA_VISIBLE_DEVICES=0 set); 05 trains in one process" in capsys.readouterr().out
    assert seen["memory"][2] == 37  # the longest prompt kept, not max_length=256
    assert "per_device_batch_size=4 x grad_accum=1 = 4 completions a step is not a multiple of num_generations=8" \
        in str(refused.value)
    assert "8 of 8 (100%) of 01's reference answers are longer than 8 words" in str(refused.value)
    plan = preference.plan_preference(method="grpo", data_dir=tmp_path, adapter_dir=tmp_path, out=tmp_path,
                                      show=False, per_device_batch_size=4, grad_accum=2, num_generations=8,
                                      max_completion_length=32, reward_functions="mytask:score")
    assert plan.env.gpu_count == 1 and "gpu" not in plan.rows()  # a rerun: one visible, CUDA_VISIBLE_DEVICES=0 kept


def test_grpo_batches_follow_trls_rule_batch_times_grad_accum_whole_groups(tmp_path):
    """trl 1.16 generates per_device_batch_size x grad_accum completions a step (its generation batch), which must
    hold whole groups; 05's final evaluation groups within one eval batch. Batch 4, grad_accum 2, 8 generations:
    trl accepts it, one prompt a step, and 05's config evaluates in groups of 4."""
    from types import SimpleNamespace

    from transformers import LlamaConfig
    from trl import GRPOConfig

    from nbutils.harness import notebook_recipe

    assert preferencedata.grpo_batch_problems("grpo", 4, 2, 8) == []
    [problem] = preferencedata.grpo_batch_problems("grpo", 4, 1, 8)
    assert "per_device_batch_size=4 x grad_accum=1" in problem and "num_generations=8" in problem
    assert preferencedata.grpo_batch_problems("dpo", 4, 1, 8) == []
    plan = SimpleNamespace(out=tmp_path, max_steps=1, learning_rate=1e-4, precision="fp32", save_steps=10,
                           env=SimpleNamespace(gpu_count=0), max_completion_length=4)
    ours = notebook_recipe.namespace(plan, notebook=notebook_recipe.PREFERENCE, method="grpo", per_device_batch_size=4,
                                     grad_accum=2, num_generations=8)["trainer_arguments"]()
    assert (ours.generation_batch_size, ours.num_generations_eval) == (8, 4)
    args = dict(output_dir=str(tmp_path), use_cpu=True, bf16=False, per_device_train_batch_size=4,
                per_device_eval_batch_size=4, num_generations=8, num_generations_eval=ours.num_generations_eval,
                eval_strategy="steps")
    GRPOConfig(**args, gradient_accumulation_steps=2)  # trl's own checks, the eval batch's included
    with pytest.raises(ValueError, match="must be divisible by num_generations"):
        GRPOConfig(**args, gradient_accumulation_steps=1)
    real = LlamaConfig(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                       num_key_value_heads=8)
    assert preference._schedule("grpo", "auto", False, 100, 4, 2, 8, real)[0] == 100  # one prompt a step
    assert preference._schedule("grpo", "auto", False, 100, 16, 2, 4, real)[0] == 13  # 8 prompts a step


def test_grpos_prompts_are_measured_as_trl_renders_them_and_too_long_ones_quarantined(tmp_path, tok):
    """01's prompts went to trl unmeasured: the memory plan took every prompt for max_length tokens, so a set of long
    prompts (documents to sum up) planned as fitting a T4 it does not fit. Each is counted as trl's GRPOTrainer
    renders it; one over max_length is quarantined (the counts add up), a fifth or more stops the plan naming the
    max_length that keeps 99%, and the memory plan gets the longest prompt kept."""
    import json

    from nbutils.data import splits

    records = [{"instruction": f"Name {i}.", "output": f"n{i}"} for i in range(36)]
    records += [{"instruction": "Sum up: " + " ".join(["long text"] * 8) + f" {i}", "output": "s"} for i in range(4)]
    mine = tmp_path / "data_prep"
    splits.prepare([_write(tmp_path / "raw.jsonl", records)], mine, tok, base_model="embedded", verbose=False,
                   plot=False)
    out = tmp_path / "preference"
    out.mkdir()
    train, held, counts = preferencedata.read_data("grpo", mine, out, tok, "embedded", "auto", 0.1, 0, 24, None)
    every = preferencedata.grpo_rows(splits.load_split(mine, "train")) + preferencedata.grpo_rows(
        splits.load_split(mine, "eval"))
    lengths = {json.dumps(r["prompt"]): preferencedata.prompt_tokens(tok, r["prompt"]) for r in every}
    rendered = {k: tok.apply_chat_template(json.loads(k), add_generation_prompt=True, tokenize=False) for k in lengths}
    assert all(text.startswith(tok.bos_token) for text in rendered.values())  # the template's BOS: none added on top
    assert lengths == {k: len(tok(text, add_special_tokens=False)["input_ids"]) for k, text in rendered.items()}
    long = sum(n > 24 for n in lengths.values())
    assert long == 4 and counts["quarantined"] == long and counts["reasons"] == {"too-long": long}
    assert counts["records"] == counts["kept"] + counts["quarantined"] == len(every) == len(train) + len(held) + long
    assert counts["longest_prompt"] == max(n for n in lengths.values() if n <= 24)
    assert preferencedata.length_problems(counts, 24) == []  # 4 of 40: a tenth, quarantined and said
    quarantine = [json.loads(line) for line in (out / "quarantine.jsonl").read_text().splitlines()]
    assert len(quarantine) == long and all(q["reason"].startswith("too-long: the prompt is") for q in quarantine)
    _, _, short = preferencedata.read_data("grpo", mine, out, tok, "embedded", "auto", 0.1, 0, 10, None)
    [problem] = preferencedata.length_problems(short, 10)
    assert "longer than max_length=10 tokens" in problem and f"set max_length={short['length']['keeps_99_percent']}" \
        in problem


def test_ktos_rows_are_shuffled_so_kl_neighbours_answer_other_prompts_and_batches_mix_labels(tmp_path, tok):
    """trl's KTO reads its rows in order and takes each row's KL completion from the next row of its batch (rotated
    by one): a pair's two rows side by side made half the "mismatched" KL completions answer the same prompt, and a
    file of desirable rows first trained in one-label batches. The rows are shuffled with the seed (the content hash
    covers the order)."""
    pairs = [{"prompt": f"Q{i}", "chosen": f"good {i}", "rejected": f"bad {i}"} for i in range(64)]
    rows, _, _ = preferencedata.read_data("kto", tmp_path, tmp_path, tok, _write(tmp_path / "p.jsonl", pairs), "auto",
                                          0.1, 0, 256, None)
    desirable_first = [{"prompt": f"P{i}", "completion": f"c{i}", "label": i < 100} for i in range(200)]
    kto, _, _ = preferencedata.read_data("kto", tmp_path, tmp_path, tok, _write(tmp_path / "k.jsonl", desirable_first),
                                         "auto", 0.1, 0, 256, None)
    for data in (rows, kto):
        batches = [data[s:s + 16] for s in range(0, len(data) - 15, 16)]
        same = sum(r["prompt"] == k["prompt"] for b in batches for r, k in zip(b, [b[-1], *b[:-1]]))
        assert same <= 2 and all(0 < sum(r["label"] for r in b) < 16 for b in batches)
    again, _, _ = preferencedata.read_data("kto", tmp_path, tmp_path, tok, _write(tmp_path / "p.jsonl", pairs), "auto",
                                           0.1, 0, 256, None)
    assert again == rows  # the same seed, the same order
