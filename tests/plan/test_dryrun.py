"""The dry run's verdict and report; the run itself on real tokenizers is measured in the note (minutes)."""

from nbutils.plan import dryrun


def test_a_model_that_cannot_be_built_fails_naming_why(tmp_path):
    run = dryrun.dry_run(str(tmp_path / "no-such-model"), tmp_path / "out")
    assert not run.ok and run.error
    assert "FAILED" in run.report() and "problem:" in run.report()


def test_slug():
    assert dryrun.slug("Qwen/Qwen2.5-1.5B-Instruct") == "qwen-qwen2.5-1.5b-instruct"
