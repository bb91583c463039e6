"""The dry run's memory check: what it re-runs for each notebook's recorded plan and its verdict against a T4."""

import json
from types import SimpleNamespace

import pytest

from bench import real_models
from nbutils.harness import runner
from nbutils.plan import memcheck
from nbutils.train import memory

NOTEBOOKS = {nb: runner.ROOT / "notebooks" / f"{nb}.ipynb" for nb in memcheck.PLAN_CALLS}


def test_each_notebooks_plan_cell_is_found_where_the_harness_numbers_cells():
    import nbformat

    for name, path in NOTEBOOKS.items():
        cell = memcheck.plan_cell(path)
        assert cell is not None and memcheck.PLAN_CALLS[name][0] in nbformat.read(path, 4).cells[cell].source


def test_the_second_twin_is_about_half_the_models_depth():
    qwen = SimpleNamespace(**real_models.MODELS["qwen2.5-1.5b-instruct"]["config"])
    from transformers import AutoConfig

    assert memcheck.deeper_times(AutoConfig.for_model(**vars(qwen))) == 7  # 2 x 7 = 14 of 28 layers


def _plan(**over):
    return {"estimate_gb": 3.0, "fits": True, "batch_size": 4, "seq_len": 512, "loss": "chunked",
            "largest_batch_that_fits": 40, **over}


def test_a_plan_that_fits_passes_and_one_the_twin_shows_too_small_fails_naming_notebook_cell_and_parameter():
    nb = NOTEBOOKS["02_train_qlora"]
    ok = memcheck._verdict(nb, _plan(), {"batch": 4}, 0.5 * 2**30, 0.45 * 2**30, "2 and 14 layers")
    assert not ok.problem and ok.ratio == pytest.approx(0.5 / 0.45)
    near = memcheck._verdict(nb, _plan(estimate_gb=13.5), {"batch": 4}, 0.9 * 2**30, 0.4 * 2**30, "2 and 14 layers")
    cell = memcheck.plan_cell(nb)
    assert f"02_train_qlora.ipynb cell {cell}" in near.problem and "lower per_device_batch_size" in near.problem
    assert "+ 0.50 GB the twin measured above its own plan: 14.00 GB" in near.problem and "largest that fits: 40" in near.problem
    refused = memcheck._verdict(nb, _plan(fits=False), {}, 1.0, 1.0, "")
    assert refused.problem  # a plan that did not fit the T4 fails whatever the twin measured
    merge = memcheck._verdict(NOTEBOOKS["04_export"], {"estimate_gb": 20.0, "fits": True}, {}, 1.0, 1.0, "")
    assert not merge.problem  # 04 merges in a free Kaggle session's RAM where the T4 cannot hold it
    assert "memory" in memcheck.table([ok, near]) and near.problem in memcheck.table([ok, near])


def test_a_plan_that_fits_15_gb_but_not_what_a_t4_reports_fails():
    """torch reports 14.74 GiB on a Kaggle/Colab T4 (preflight: 14.7), what 02 plans against there: a 13.7 GB plan
    fits 92% of 15 GB but not of 14.7, and fails the dry run as 02 would refuse it on the T4."""
    from nbutils import defaults
    from nbutils.plan import dryrun
    from nbutils.train import memory

    near = memcheck._verdict(NOTEBOOKS["02_train_qlora"], _plan(estimate_gb=13.7), {"batch": 4}, 1.0, 1.0, "")
    assert near.problem and "would not fit a 14.7 GB T4" in near.problem
    assert memcheck.T4_GB == defaults.T4_MEMORY_GB == round(14.741, 1)  # one figure for 01, the dry run and 02
    with dryrun.planning_for_a_t4():
        assert memory.planning_gpu(None)[0] == 14.7


def test_each_notebooks_recorded_plan_says_what_to_re_run(tmp_path):
    chain_out = tmp_path / "chain"
    marker = chain_out / "sandbox" / "03_eval" / "working" / "eval" / "eval_report.json"
    marker.parent.mkdir(parents=True)
    plan = {"generate_rows": 16, "prompt": 40, "new_tokens": 16, "tokens": 16384, "loss": "chunked",
            "longest_row": 43, "split_tokens": 43 * 20}
    marker.write_text(json.dumps({"memory_plan": plan}))
    assert memcheck.recorded(chain_out, "03_eval") == plan and memcheck.recorded(chain_out, "02_train_qlora") is None
    probe, settings = memcheck.tasks("03_eval", plan)
    assert probe == "infer" and settings["tokens"] == 860  # the eval split's rows, not more than the notebook scored
    assert memcheck.tasks("02_train_qlora", _plan()) == ("train", {"batch": 4, "seq": 512, "loss": "chunked",
                                                                   "attention": "sdpa"})
    # the attention the plan counted (Gemma-2's eager scores) is the one the twin's figure is planned with
    eager = memcheck.tasks("02_train_qlora", {**_plan(), "attention": "eager"})[1]
    shape = memory.Shape(vocab=256, hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, tied=True)
    assert memcheck.twin_plan_bytes("train", shape, eager) > memcheck.twin_plan_bytes("train", shape, {**eager,
                                                                                                     "attention": "sdpa"})
    assert memcheck.tasks("04_export", {"prompt_tokens": 44}) == ("merge", {"prompt": 44})

