"""05's plan: the method's memory, the learning rate, the held-out rows, and the proof the reference is 02's adapter."""

import pytest

from nbutils.runtime import modelsource
from nbutils.train import memory, preference, preferencedata


def test_memory_plan_counts_two_sequences_per_pair_the_reference_and_grpos_cache():
    from transformers import LlamaConfig

    cfg = LlamaConfig(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                      num_key_value_heads=8, vocab_size=128256)  # Llama-3.2-1B's shape
    dpo = memory.plan_preference(cfg, "dpo", 256, 8, 16, 4, 16, None)
    orpo = memory.plan_preference(cfg, "orpo", 256, 8, 16, 4, 16, None)
    grpo = memory.plan_preference(cfg, "grpo", 256, 8, 16, 4, 16, None)
    sft = memory.estimate(memory.Shape.from_config(cfg), 256, 16, 16, "plain")
    assert dpo["parts_gb"]["checkpoints"] == pytest.approx(sft["checkpoints"] / memory.GB, abs=1e-3)  # 8 pairs = 16
    assert dpo["parts_gb"]["reference_adapter"] > 0 and orpo["parts_gb"]["reference_adapter"] == 0
    assert grpo["parts_gb"]["kv_cache"] > 0 and dpo["parts_gb"]["kv_cache"] == 0
    assert "2 prompts x 4" in grpo["what"]
    assert memory.plan_preference(cfg, "dpo", 256, 8, 16, 4, 16, 0.0001)["fits"] is False


def test_learning_rate_auto_is_small_for_real_models_and_given_wins():
    cfg = modelsource.load_config("embedded")
    assert preference.learning_rate("auto", cfg)[0] == preference.LR_TINY
    assert preference.learning_rate("1e-5", cfg) == (1e-5, "given")


def test_check_reference_refuses_a_reference_that_differs_or_trains(tmp_path):
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import save_file

    from nbutils.train import modeling

    model = get_peft_model(modeling.load_base("embedded"), LoraConfig(r=4, target_modules=["q_proj"]))
    saved = {k.replace(".default", ""): v.detach().clone() for k, v in model.named_parameters() if ".default." in k}
    save_file(saved, str(tmp_path / "adapter_model.safetensors"))
    model.add_adapter("ref", model.peft_config["default"])
    for name, p in model.named_parameters():
        if ".ref." in name:
            p.data.copy_(model.get_parameter(name.replace(".ref.", ".default.")).data)
    assert "tensors equal" in preference.check_reference(model, tmp_path)
    next(p for n, p in model.named_parameters() if ".ref." in n and "lora_B" in n).data += 1.0
    with pytest.raises(AssertionError, match="differs"):
        preference.check_reference(model, tmp_path)


def _sft_adapter(prepared_data, root):
    """02's adapter after 5 steps on the embedded data, in root/train_qlora: what 05 starts from."""
    from nbutils.harness import notebook_recipe

    sft = root / "train_qlora"
    model, tok, session = notebook_recipe.train(prepared_data, sft, max_steps=5, eval_steps=5, save_steps=5)
    notebook_recipe.finish(session, model, tok)
    return sft


def test_dpo_and_grpo_plan_trls_fused_lm_head_not_whole_logits():
    from transformers import Qwen2Config

    cfg = Qwen2Config(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                      num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True)  # Qwen2.5-1.5B's shape
    dpo = memory.plan_preference(cfg, "dpo", 1024, 4, 16, 4, 64, 15.0)
    orpo = memory.plan_preference(cfg, "orpo", 1024, 4, 16, 4, 64, 15.0)
    rows, cols = memory.trl_tile()
    tokens = 8 * 1024  # 4 pairs: 8 sequences
    assert dpo["parts_gb"]["logits"] == pytest.approx(
        (rows * cols * 2 + tokens * (1536 * 6 + 48)) / memory.GB, abs=1e-3)  # one fp16 tile, not 8k x 152k logits
    assert orpo["parts_gb"]["logits"] > 10 * dpo["parts_gb"]["logits"]  # ORPO (trl.experimental) builds them whole
    assert dpo["fits"] and not orpo["fits"]


@pytest.mark.parametrize("method", ["dpo", "kto", "grpo"])
def test_05s_trainer_keeps_the_adapter_fp32_on_a_4bit_base(method, tmp_path):
    """trl casts a quantized model's trainable weights to bf16, which a T4's fp16 gradient scaler cannot unscale
    (`make gpu-proof` met it on a GPU): 05's trainer leaves every trainable weight in fp32, and exactly 02's values
    (a cast back alone starts the policy from a bf16-rounded copy while trl's reference stays exact)."""
    from types import SimpleNamespace

    import torch

    from nbutils.data import chatformat
    from nbutils.harness import notebook_recipe
    from nbutils.runtime.preflight import inspect
    from nbutils.train import modeling, training

    row = {"dpo": {"prompt": "a", "chosen": " b", "rejected": " c"},
           "kto": {"prompt": "a", "completion": " b", "label": True},
           "grpo": {"prompt": "a", "answer": "b"}}[method]
    env, _ = inspect(load_in_4bit=True)
    plan = SimpleNamespace(out=tmp_path, max_steps=1, learning_rate=1e-4, precision="fp32", save_steps=10, env=env,
                           max_length=32, max_completion_length=4, train_rows=[row] * 4, eval_rows=[row] * 4, method=method,
                           held_out_rows=lambda: [row] * 4)
    ns = notebook_recipe.namespace(plan, notebook=notebook_recipe.PREFERENCE, method=method, per_device_batch_size=2,
                                   num_generations=2, max_completion_length=4,
                                   reward_functions="nbutils.eval.rewards:well_formed")
    bnb, lora = notebook_recipe.configs("fp32")
    model = modeling.attach_lora(modeling.load_base("embedded", "fp32", bnb), lora)
    assert getattr(modeling.unwrap(model), "is_loaded_in_4bit", False) or model.base_model.model.is_loaded_in_4bit
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    assert any((w.to(torch.bfloat16).float() != w).any() for w in before.values())  # bf16 would round them
    trainer = ns["make_trainer"](model, chatformat.load_tokenizer("embedded"), training.Run(tmp_path, {}, time_budget_min=60))
    after = {n: p for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert {p.dtype for p in after.values()} == {torch.float32}
    assert after.keys() == before.keys() and all(torch.equal(after[n], before[n]) for n in before)


@pytest.mark.integration  # trains 02's adapter for 5 steps first
def test_05s_steps_default_to_the_methods_own(prepared_data, tmp_path):
    """max_steps="auto" (05's default) is the method's: GRPO learns from its own rollouts and needs 40 on the embedded
    task where 16 left its held-out reward where it was; a value given is kept, smoke stays 4."""
    from nbutils.train import preference

    sft = _sft_adapter(prepared_data, tmp_path)
    out = tmp_path / "preference"
    out.mkdir()

    def plan(method, **kw):
        return preference.plan_preference(method=method, data_dir=prepared_data, adapter_dir=sft, out=out, show=False,
                                          **kw)

    def steps(method, **kw):
        return plan(method, **kw).max_steps

    assert (steps("grpo"), steps("dpo"), steps("grpo", max_steps=12), steps("grpo", smoke=True)) == (40, 16, 12, 4)
    grpo = plan("grpo")  # the embedded task's one-word answers keep GRPO's rollouts at 16 tokens: as fast as before
    assert grpo.max_completion_length == 16 and "auto: longest reference answer" in grpo.max_completion_length_why
    assert "epochs of" in grpo.table()
    # 02's data hash travels into 05's checkpoints: 03 and 04 refuse 05's adapter with another 01 output
    from nbutils.train import checkpoints, recipe

    sft_hash = recipe.read_run_config(checkpoints.for_eval(sft)[0])["data_manifest_hash"]
    assert sft_hash and plan("dpo").record()["data_manifest_hash"] == sft_hash


def _kto_file(prepared_data, path):
    """KTO rows (prompt, completion, label) from the embedded task's pairs: every pair as two rows."""
    import json

    from nbutils.data import pairs, splits

    rows = []
    for r in pairs.embedded_records(splits.load_split(prepared_data, "train")):
        rows += [{"prompt": r["prompt"], "completion": r["chosen"], "label": True},
                 {"prompt": r["prompt"], "completion": r["rejected"], "label": False}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_kto_held_out_rows_stay_unpaired_and_the_table_names_each_input(prepared_data, tmp_path, tok):
    data = _kto_file(prepared_data, tmp_path / "k.jsonl")
    train, held, counts = preferencedata.read_data("kto", prepared_data, tmp_path, tok, data, "", 0.1, 0, 256,
                                               {"train": 40, "held_out": 8})
    assert held and all("completion" in r and "label" in r for r in train + held)  # the report judges them by label
    assert set(counts["shapes"]) == {"kto"} and counts["inputs"][data] == "jsonl (extension .jsonl)"


@pytest.mark.integration  # trains 02's adapter for 5 steps, then runs 05 (smoke) as a script twice: about 2 minutes
def test_05_with_kto_rows_refuses_dpo_in_the_plan_and_runs_kto_to_its_report(prepared_data, tmp_path):
    import json
    import os
    import re
    import subprocess
    import sys

    from nbutils.harness import notebook_recipe

    sft = _sft_adapter(prepared_data, tmp_path)
    data = _kto_file(prepared_data, tmp_path / "kto.jsonl")
    env = {**os.environ, "NBUTILS_WORKING_ROOT": str(tmp_path), "OMP_NUM_THREADS": "1"}

    def run(method):
        cmd = [sys.executable, "-m", "nbutils.train.launch", str(notebook_recipe.PREFERENCE), "--smoke", "True",
               "--data_dir", str(prepared_data), "--adapter_dir", str(sft), "--output_dir", str(tmp_path / method),
               "--eval_samples", "4", "--method", method, "--preference_data", data]
        return subprocess.run(cmd, env=env, capture_output=True, text=True)

    dpo = run("dpo")
    assert dpo.returncode != 0 and "PreferencePlanError: 05's plan found problems, before anything loaded" in dpo.stderr
    assert "unpaired KTO rows" in dpo.stderr and "set method='kto'" in dpo.stderr
    assert re.search(r"^problems +1$", dpo.stdout, re.M) and "[model] LoRA:" not in dpo.stdout  # nothing loaded
    kto = run("kto")
    assert kto.returncode == 0, kto.stdout[-2000:] + kto.stderr[-2000:]
    summary = json.loads((tmp_path / "kto" / "preference_summary.json").read_text())
    unpaired = summary["unpaired"]
    assert "preference" not in summary and unpaired["n_rows"] > 0 and 0 <= unpaired["label_accuracy"] <= 1
    assert "label accuracy 0.5 (SFT) ->" in kto.stdout and "held-out unpaired rows" in kto.stdout


@pytest.mark.parametrize("method, embedded", [("grpo", False), ("dpo", True)])
def test_05s_summary_lists_only_the_files_this_run_wrote(tmp_path, method, embedded):
    """Every method writes quarantine.jsonl; GRPO builds no embedded pairs, so it lists none an earlier run left. Every
    file listed is there with its SHA-256; the report and the summary name the checkpoint."""
    import json
    from types import SimpleNamespace

    from nbutils.chain import MARKERS
    from nbutils.train import checkpoints, reports

    (ckpt := tmp_path / "checkpoint").mkdir()
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        (ckpt / name).write_text(name)
    checkpoints.mark_complete(ckpt, 4)
    (tmp_path / "quarantine.jsonl").write_text("")  # the plan's; the pairs: DPO's, or an earlier run's for GRPO
    (tmp_path / "embedded_pairs.train.jsonl").write_text("")

    def write_summary(checkpoint, memory, release=True):
        assert not release  # 05 releases the lock after its own summary
        for name in ("learning_curves.png", "log_history.json", MARKERS["train_qlora"]):
            (tmp_path / name).write_text("{}")
        return {"global_step": 4, "stopped_reason": "max_steps", "seconds": 1.0, "train_loss": 1.0, "diagnosis": "",
                "checkpoint_dir": "checkpoint", "checkpoint_complete": True, "checkpoint": reports.identity(checkpoint),
                "measured_peak_gb": None}

    plan = SimpleNamespace(out=tmp_path, method=method, sft_checkpoint=tmp_path, counts={}, memory={})
    run = SimpleNamespace(write_summary=write_summary, result=SimpleNamespace(trainer=None))
    block = {"task_metric": 0.5, "degenerate_rate": 0.0}
    summary = preference.finish(plan, run, ckpt, {"base": block, "tuned": block})
    assert ("embedded_pairs.train.jsonl" in summary["files"]) is embedded and "quarantine.jsonl" in summary["files"]
    assert reports.problems(tmp_path, MARKERS["preference"]) == [] and summary["checkpoint"]["step"] == 4
    assert json.loads((tmp_path / MARKERS["eval"]).read_text())["checkpoint"] == reports.identity(ckpt)


def test_05s_plan_checks_the_disk_for_keep_checkpoints_as_02s_does(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from nbutils.train import diskspace

    asked = []
    monkeypatch.setattr(diskspace, "check", lambda out, need, keep: asked.append((need, keep)))
    plan = SimpleNamespace(method="dpo", train_rows=[{}], eval_rows=[{}], out=tmp_path, memory={"checkpoint_mb": 10.0},
                           counts={})
    for keep in (2, 5):
        assert preference._checks(plan, 8, keep) == []
    assert asked == [(diskspace.needed_mb(10.0, 2), 2), (diskspace.needed_mb(10.0, 5), 5)] and asked[1][0] == 70.0


GEMMA2_2B = dict(hidden_size=2304, intermediate_size=9216, num_hidden_layers=26, num_attention_heads=8,
                 num_key_value_heads=4, head_dim=256, vocab_size=256000)


def test_05s_judge_pass_plans_gemma2s_whole_logits_and_scores_batches_that_fit_a_t4():
    """Gemma-2's soft-capped logits are scored whole (loss.unsupported), as 03 plans them: 16,384 positions of a
    256k vocabulary are about 40 GB, so the judge scores the fewest batches that fit the T4 beside the trained model."""
    from transformers import Gemma2Config

    from nbutils.train import evalmemory

    gemma = Gemma2Config(**GEMMA2_2B, final_logit_softcapping=30.0)
    assert preference.judge_pass(gemma, "dpo", 16, 256)["loss"] == "plain"
    assert preference.judge_pass(gemma, "dpo", 16, 256)["bytes"] > 30 * memory.GB
    mem = preference.plan_memory(gemma, "dpo", 256, 2, 16, 4, 16, 15.0)
    tokens = mem["judge_batch_tokens"]
    assert mem["judge_fits"] and 256 <= tokens < evalmemory.BATCH_TOKENS and tokens % 256 == 0
    assert f"{tokens:,} scored at once (plain logits)" in mem["what"]
    unbounded = preference.plan_memory(Gemma2Config(**GEMMA2_2B, final_logit_softcapping=None), "dpo", 256, 2, 16, 4,
                                       16, 15.0)
    assert unbounded["judge_batch_tokens"] == evalmemory.BATCH_TOKENS and "(chunked logits)" in unbounded["what"]


def test_an_empty_training_set_is_a_plan_problem_not_trls_stop_iteration(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from nbutils.data import pairs
    from nbutils.train import diskspace

    monkeypatch.setattr(diskspace, "check", lambda out, need, keep: None)
    rows = [{"prompt": "one prompt", "chosen": f"a{i}", "rejected": "b"} for i in range(5)]
    train, held = pairs.split(rows, 0.1, seed=0)  # held out by prompt: the one prompt goes, with every row
    assert (len(train), len(held)) == (0, 5)
    plan = SimpleNamespace(method="dpo", train_rows=train, eval_rows=held, out=tmp_path, memory={"checkpoint_mb": 1.0},
                           counts={})
    [problem] = preference._checks(plan, 8)
    assert "no training rows: the held-out side took all 5" in problem and "share 1 prompt)" in problem
    assert "give preference_eval" in problem and "lower eval_fraction" in problem


def _record(rows, method="dpo", **extra):
    from types import SimpleNamespace

    plan = SimpleNamespace(recipe=SimpleNamespace(base_model="embedded"), precision="fp32", method=method,
                           sft_settings_hash="h", counts={"records": len(rows)}, train_rows=rows,
                           env=SimpleNamespace(versions={}), data_manifest_hash=extra.pop("data_hash", "d1"))
    return preference.PreferencePlan.record(plan, beta=0.1, **extra)


def test_a_resume_on_other_data_of_the_same_size_or_other_grpo_settings_is_refused_naming_it():
    """The record holds the training rows' content and GRPO's rollout settings: a file fixed with the same number of
    records (chosen and rejected swapped), or another reward, group or length, is a difference the resume names."""
    from trl import GRPOConfig

    from nbutils.eval import rollouts
    from nbutils.train import runsettings

    rows = [{"prompt": "p", "chosen": "a", "rejected": "b", "source": "x.jsonl", "line": 1}]
    swapped = [{**rows[0], "chosen": "b", "rejected": "a"}]
    moved = [{**rows[0], "source": "elsewhere/x.jsonl"}]
    same = runsettings.settings(_record(rows))
    assert runsettings.differences(same, runsettings.settings(_record(moved))) == []
    [line] = runsettings.differences(same, runsettings.settings(_record(swapped)))
    assert line.startswith("preference_data_hash: checkpoint has")

    def grpo(reward="nbutils.eval.rewards:correct", guard="flag", **kw):
        args = GRPOConfig(output_dir="unused", num_generations=4, max_completion_length=16, use_cpu=True, **kw)
        return runsettings.settings(_record(rows, "grpo", **rollouts.settings(args, reward, guard)))

    assert runsettings.differences(grpo(), grpo()) == []
    changed = {line.split(":")[0] for line in runsettings.differences(grpo(), grpo(
        "nbutils.eval.rewards:well_formed", "off", temperature=0.7))}
    assert changed == {"grpo.reward_functions", "grpo.guard", "grpo.temperature"}
    assert rollouts.settings(object(), "x:y", "flag") == {}  # DPO, ORPO and KTO configs: nothing of GRPO's


def test_after_a_nan_stop_the_judge_scores_the_checkpoints_adapter_not_the_weights_in_memory(tmp_path):
    from types import SimpleNamespace

    import torch
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import save_file

    from nbutils.train import modeling

    model = get_peft_model(modeling.load_base("embedded"), LoraConfig(r=4, target_modules=["q_proj"]))
    good = {k.replace(".default", ""): torch.full_like(v, 0.25) for k, v in model.named_parameters() if ".default." in k}
    save_file(good, str(tmp_path / "adapter_model.safetensors"))  # the last good checkpoint save_final copied
    for name, p in model.named_parameters():
        if ".default." in name:
            p.data.fill_(float("nan"))  # the step that stopped
    assert preference.judged_policy(model, SimpleNamespace(result=SimpleNamespace(stopped_reason="max_steps")),
                                    tmp_path) == ""
    assert next(p for n, p in model.named_parameters() if ".default." in n).isnan().all()  # saved from memory: as is
    line = preference.judged_policy(model, SimpleNamespace(result=SimpleNamespace(stopped_reason="nan")), tmp_path)
    assert f"reloaded from {tmp_path} ({len(good)} tensors)" in line
    live = {n: p for n, p in model.named_parameters() if ".default." in n}
    assert len(live) == len(good) and all(bool((p == 0.25).all()) and p.requires_grad for p in live.values())


def test_05s_checkpoint_carries_02s_data_hash_so_another_01_output_is_refused(tmp_path, prepared_data):
    """recipe.from_checkpoint (03, 04) compares run_config.json's data_manifest_hash with the 01 output given: 05's
    checkpoint records 02's, so 05's adapter with another run of 01 is refused as 02's is."""
    import json

    from nbutils.chain import MARKERS
    from nbutils.data import splits
    from nbutils.train import recipe

    ours = splits.load_manifest(prepared_data)["content_hash"]
    ckpt, other = tmp_path / "checkpoint", tmp_path / "other_data_prep"
    ckpt.mkdir()
    other.mkdir()
    (ckpt / "run_config.json").write_text(json.dumps(_record([{"prompt": "p", "chosen": "a", "rejected": "b"}],
                                                             data_hash=ours)))
    (other / MARKERS["data_prep"]).write_text(json.dumps({"content_hash": "another"}))
    assert recipe.from_checkpoint(ckpt, data_dir=prepared_data).base_model == "embedded"
    with pytest.raises(recipe.UpstreamMismatch, match="holds other data"):
        recipe.from_checkpoint(ckpt, data_dir=other)


def test_05s_plan_counts_eager_attention_and_fp32_as_02s_does(tmp_path, monkeypatch):
    """05 loads Gemma-2 eagerly and computes in fp32 where 02 trained with precision="fp32" (05's "auto" keeps it):
    plan_preference hands the memory plan the attention and 4-byte activations, which count the layer backward's
    scores, GRPO's prompt scores and the judge's, as 02's plan does."""
    from dataclasses import replace
    from types import SimpleNamespace

    from transformers import Gemma2Config

    from nbutils.runtime.preflight import inspect
    from nbutils.train import evalmemory
    from nbutils.train.recipe import Recipe

    gemma, shape = Gemma2Config(**GEMMA2_2B), memory.Shape.from_config(Gemma2Config(**GEMMA2_2B))
    full = preference.plan_memory(gemma, "grpo", 256, 4, 16, 4, 64, 14.7, 4, "eager")
    assert (full["compute_bytes"], full["attention"]) == (4, "eager") and "attention_masks" in full["parts_gb"]
    want = memory.estimate(shape, 320, 4, 16, "trl", 4, True, "eager")["layer_backward"]
    assert full["parts_gb"]["layer_backward"] == pytest.approx(want / memory.GB, abs=1e-3)
    kv = 26 * 2 * 4 * 320 * shape.kv_width * 4 + memory.eager_scores(shape, 4, 256, 4)
    assert full["parts_gb"]["kv_cache"] == pytest.approx(kv / memory.GB, abs=1e-3)  # fp32 keys and values, scores
    assert preference.judge_pass(gemma, "dpo", 16, 256, 4, 4096, 2, "eager")["bytes"] - preference.judge_pass(
        gemma, "dpo", 16, 256, 4, 4096)["bytes"] >= evalmemory.eager_scores(shape, 16, 256)
    t4, fp32 = SimpleNamespace(gpu_count=1), Recipe("gemma", {"load_in_4bit": True}, "fp32", "fp32", {"r": 16})
    assert preference.compute_bytes(fp32, "auto", t4) == 4 and preference.compute_bytes(replace(
        fp32, precision="fp16", trained_precision="fp16"), "auto", t4) == 2
    cpu, fp16 = SimpleNamespace(gpu_count=0), replace(fp32, trained_precision="fp16")  # the recipe's fp32 is the CPU's
    assert (preference.compute_bytes(fp16, "auto", cpu), preference.compute_bytes(fp16, "fp32", cpu)) == (2, 4)
    # plan_preference's wiring: what reaches plan_memory
    env, seen = replace(inspect()[0], gpu_count=1, gpu_memory_gb=14.7, gpu_capability=(7, 5), attention="sdpa"), {}
    monkeypatch.setattr(preference, "inspect", lambda *a: (env, []))
    monkeypatch.setattr(preference.checkpoints, "for_eval", lambda d: (tmp_path, {}))
    monkeypatch.setattr(preference.recipe, "from_checkpoint", lambda *a: fp32)
    monkeypatch.setattr(preference.recipe, "trained_tokenizer", lambda *a: None)
    monkeypatch.setattr(preference.modelsource, "check", lambda name: None)
    monkeypatch.setattr(preference.modelsource, "load_config", lambda name: gemma)
    monkeypatch.setattr(preferencedata, "read_data", lambda *a: ([], [], {}))
    monkeypatch.setattr(preference, "plan_memory", lambda *a: seen.setdefault("args", a) and 1 / 0)
    with pytest.raises(ZeroDivisionError):
        preference.plan_preference(method="dpo", data_dir=tmp_path, adapter_dir=tmp_path, out=tmp_path, show=False)
    assert seen["args"][-2:] == (4, "eager")
