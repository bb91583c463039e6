"""The dry run's verdict and report; the run itself on real-shaped models is `python -m bench dryrun_bench` (minutes)."""

import pytest

from bench import real_models, real_vocab
from nbutils.plan import dryrun


def test_a_model_that_cannot_be_built_fails_naming_why(tmp_path):
    run = dryrun.dry_run(str(tmp_path / "no-such-model"), tmp_path / "out")
    assert not run.ok and run.error
    assert "FAILED" in run.report() and "problem:" in run.report()


def test_a_config_without_a_language_models_fields_fails_naming_why(tmp_path):
    from transformers import ViTConfig

    ViTConfig().save_pretrained(tmp_path / "vit")  # an image model: no vocabulary
    run = dryrun.dry_run(str(tmp_path / "vit"), tmp_path / "out")
    assert not run.ok and "vocab_size" in run.error and "causal language models" in run.error


def test_slug():
    assert dryrun.slug("Qwen/Qwen2.5-1.5B-Instruct") == "qwen-qwen2.5-1.5b-instruct"


def test_the_chain_runs_01_to_04_unless_05_is_asked_for():
    assert [p.split("/")[-1] for p in dryrun.notebooks_through("export")] == \
        ["01_data_prep.ipynb", "02_train_qlora.ipynb", "03_eval.ipynb", "04_export.ipynb"]
    assert dryrun.notebooks_through("preference")[-1].endswith("05_preference.ipynb")


@pytest.mark.integration  # real tokenizers (llama-cpp-python's sdist, cached); each run stops in 01, in seconds
@pytest.mark.parametrize("name", sorted(real_models.BROKEN))
def test_a_broken_real_shaped_model_fails_naming_its_problem(name, tmp_path):
    try:
        folder = real_models.folder(name)
    except real_vocab.Unavailable as e:  # no route to PyPI: the one reason to skip
        pytest.skip(str(e))
    run = dryrun.dry_run(str(folder), tmp_path / "run")
    assert not run.ok and real_models.BROKEN[name][2] in run.report(), run.report()[-2000:]
