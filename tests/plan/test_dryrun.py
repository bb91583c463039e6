"""The dry run's verdict and report; the run itself on real-shaped models is `python -m bench dryrun_bench` (minutes)."""

from nbutils.plan import dryrun


def test_a_model_that_cannot_be_built_fails_naming_why(tmp_path):
    run = dryrun.dry_run(str(tmp_path / "no-such-model"), tmp_path / "out")
    assert not run.ok and run.error
    assert "FAILED" in run.report() and "problem:" in run.report()


def test_slug():
    assert dryrun.slug("Qwen/Qwen2.5-1.5B-Instruct") == "qwen-qwen2.5-1.5b-instruct"


def test_the_chain_runs_01_to_04_unless_05_is_asked_for():
    assert [p.split("/")[-1] for p in dryrun.notebooks_through("export")] == \
        ["01_data_prep.ipynb", "02_train_qlora.ipynb", "03_eval.ipynb", "04_export.ipynb"]
    assert dryrun.notebooks_through("preference")[-1].endswith("05_preference.ipynb")
