"""03's plan before the model loads: Qwen2.5-1.5B's published config on a T4, the eval loss by chunks against the
whole logits (the path 03 took before), and what it names when a setting does not fit."""

import json
import re
from types import SimpleNamespace

import pytest

from bench import real_models
from nbutils.eval import evalplan
from nbutils.train.recipe import Recipe

T4 = SimpleNamespace(gpu_memory_gb=15.0, attention="sdpa", rows=lambda: {"gpus": "Tesla T4"})


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    """Qwen2.5-1.5B-Instruct's config.json as published (bench/real_models.py), no weights, no tokenizer."""
    folder = tmp_path_factory.mktemp("qwen")
    (folder / "config.json").write_text(json.dumps(real_models.MODELS["qwen2.5-1.5b-instruct"]["config"]))
    return Recipe(str(folder), {"load_in_4bit": True}, "fp16", "fp16", {"r": 16})


def test_32_rows_of_512_tokens_with_the_whole_logits_are_refused_on_a_t4_and_fit_by_chunks(qwen, capsys):
    with pytest.raises(evalplan.EvalPlanError, match=r"eval_batch_tokens=16,384 does not fit the 15 GB GPU \(plan 2\d"):
        evalplan.plan_eval(qwen, T4, [200] * 64, [512] * 200, 32, eval_batch_tokens=32 * 512, loss="plain")
    before = capsys.readouterr().out
    assert "DOES NOT FIT" in before and "largest scoring batch" in before
    plan = evalplan.plan_eval(qwen, T4, [200] * 64, [512] * 200, 32, eval_batch_tokens=32 * 512)
    assert plan.memory["fits"] and plan.memory["loss"] == "chunked" and plan.eval_batch_tokens == 32 * 512
    scoring = plan.memory["parts_gb"]["scoring"]
    assert scoring < 1.5 < 20 < 32 * 512 * 151_936 * 10 / 2**30  # one layer and one chunk, not 23 GiB of logits
    assert "Tesla T4" in capsys.readouterr().out  # preflight's rows head the table


def test_the_message_names_the_largest_value_that_fits(qwen):
    with pytest.raises(evalplan.EvalPlanError) as e:
        evalplan.plan_eval(qwen, T4, [200] * 64, [512] * 200, 32, eval_batch_tokens=32 * 512, loss="plain", show=False)
    largest = int(str(e.value).split("the largest that fits is ")[1].split()[0].replace(",", ""))
    ok = evalplan.plan_eval(qwen, T4, [200] * 64, [512] * 200, 32, eval_batch_tokens=largest, loss="plain", show=False)
    assert ok.memory["fits"] and 512 <= largest < 32 * 512
    with pytest.raises(evalplan.EvalPlanError, match="generate_batch_size=100000 does not fit .* largest that fits is"):
        evalplan.plan_eval(qwen, T4, [200] * 64, [512] * 200, 32, generate_batch_size=100_000, show=False)


def test_auto_scores_at_most_16384_tokens_and_never_less_than_the_longest_row(qwen):
    plan = evalplan.plan_eval(qwen, T4, [200], [300] * 10, 32, show=False)
    assert plan.eval_batch_tokens == 16_200 and plan.eval_batch_tokens_why.startswith("auto")  # 54 rows of 300
    long_rows = evalplan.plan_eval(qwen, T4, [200], [30_000], 32, show=False)
    assert long_rows.eval_batch_tokens == 30_000  # one row alone
    no_gpu = evalplan.plan_eval(qwen, SimpleNamespace(gpu_memory_gb=None, attention="sdpa", rows=dict), [200], [300], 32, show=False)
    assert "fits" not in no_gpu.memory and no_gpu.eval_batch_tokens == 16_200


def test_the_plan_checks_a_t4_without_a_gpu_when_the_dry_run_names_one(qwen, monkeypatch):
    monkeypatch.setenv("NBUTILS_PLAN_GPU_GB", "15")
    cpu = SimpleNamespace(gpu_memory_gb=None, attention="sdpa", rows=dict)
    with pytest.raises(evalplan.EvalPlanError, match="15 GB GPU"):
        evalplan.plan_eval(qwen, cpu, [200], [512] * 100, 32, eval_batch_tokens=32 * 512, loss="plain", show=False)



def test_gemma_2_is_planned_with_its_eager_attention_scores(tmp_path):
    """03 loads Gemma-2 eagerly (attn_implementation="auto": its class refuses sdpa): the plan counts the scores, so
    it names a smaller generation batch than an sdpa plan would."""
    from tests.train.test_memory import published

    (tmp_path / "config.json").write_text(published("gemma-2-2b").to_json_string())
    gemma = Recipe(str(tmp_path), {"load_in_4bit": True}, "fp16", "fp16", {"r": 16})
    auto = evalplan.plan_eval(gemma, T4, [1024] * 16, [512] * 100, 64, show=False)
    sdpa = evalplan.plan_eval(gemma, T4, [1024] * 16, [512] * 100, 64, show=False, attn_implementation="sdpa")
    assert auto.memory["attention"] == "eager" and sdpa.memory["attention"] == "sdpa"
    assert auto.memory["parts_gb"]["generation"] - sdpa.memory["parts_gb"]["generation"] > 1.3
    assert auto.memory["largest_generate_rows"] < sdpa.memory["largest_generate_rows"]


def test_gemma_computing_in_fp16_is_warned_in_03s_table_as_in_02s(tmp_path, capsys):
    """03 evaluates a Gemma-2 adapter trained on a T4 in fp16, which its activations overflow (inf logits): the plan's
    table warns, naming precision="fp32" there (no bf16 on a T4); in fp32, or for Qwen, no warning."""
    from tests.train.test_memory import published

    (tmp_path / "config.json").write_text(published("gemma-2-2b").to_json_string())
    t4 = SimpleNamespace(gpu_memory_gb=15.0, attention="sdpa", rows=dict, gpu_capability=(7, 5))
    gemma = Recipe(str(tmp_path), {"load_in_4bit": True}, "fp16", "fp16", {"r": 16})
    plan = evalplan.plan_eval(gemma, t4, [256] * 16, [256] * 100, 64)
    assert len(plan.warnings) == 1 and 'precision="fp32"' in plan.warnings[0]
    assert re.search(r"^WARNING +gemma2 computes in fp16", capsys.readouterr().out, re.M)
    fp32 = Recipe(str(tmp_path), {"load_in_4bit": True}, "fp32", "fp32", {"r": 16})
    assert evalplan.plan_eval(fp32, t4, [256] * 16, [256] * 100, 64, show=False).warnings == []
    qwen = Recipe(str(_qwen_folder(tmp_path / "qwen")), {"load_in_4bit": True}, "fp16", "fp16", {"r": 16})
    assert evalplan.plan_eval(qwen, t4, [256] * 16, [256] * 100, 64, show=False).warnings == []


def _qwen_folder(folder):
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(real_models.MODELS["qwen2.5-1.5b-instruct"]["config"]))
    return folder
