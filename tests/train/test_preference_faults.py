"""05 under faults: kills at each write, two runs at once, a full disk mid-write, a rerun that changes the checkpoint.

05 runs as a script (its own cells, smoke DPO on the embedded default, from 02's adapter after 5 steps) in children
forked from a server that imported torch and trl once (tests/faultkit.py). After every kill nothing under a final
name is partial (each file is the uninterrupted run's, whole) and a preference_summary.json, when there is one,
lists only files that are there and whole. The one rerun then ends as the uninterrupted run: the final adapter bit
for bit, the reports naming the same checkpoint, every file its summary lists the same but what records the run's
own times (the training summary, the log history and its plot, the checkpoint's trainer state).

Run alone: pytest -m faults tests/train/test_preference_faults.py
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from nbutils.chain import MARKERS
from nbutils.train import reports, runlock
from tests import faultkit

pytestmark = [pytest.mark.faults, pytest.mark.integration]
NOTEBOOK = "notebooks/05_preference.py"
SUMMARY = MARKERS["preference"]
# Written per run (times, the trainer's log), checked by their own checksums (the Trainer checkpoints), or naming the
# checkpoint by its path (eval_report.json: compared without it).
VOLATILE = ("training_summary.json", "log_history.json", "learning_curves.png", "checkpoint/trainer_state.json",
            "checkpoint/checksums.json", "trainer/", MARKERS["eval"])
# "file" passes of one run: 1 the lock's holder file, 2-4 the embedded pairs and quarantine.jsonl, 5 eval_report.json,
# 6 log_history.json, 7 training_summary.json, 8 preference_summary.json.
KILLS = {"file:2": "half of the embedded train pairs written", "save:2": "the second Trainer checkpoint, before its "
         "marker", "final_save:1": "the final checkpoint half written", "file:5": "half of eval_report.json written",
         "file:8": "half of preference_summary.json written"}


@pytest.fixture(scope="module")
def ctx():
    return faultkit.context("trl", "nbutils.train.preference", "nbutils.eval.judge")


@pytest.fixture(scope="module")
def params(ctx, prepared_data, tmp_path_factory):
    """02's adapter after 5 steps (what 05 starts from) and 05's parameters: smoke DPO, 4 prompts judged."""
    sft = tmp_path_factory.mktemp("sft05") / "train_qlora"
    faultkit.call(ctx, faultkit.train_sft, str(prepared_data), str(sft), 5, 5)
    return {"smoke": True, "data_dir": str(prepared_data), "adapter_dir": str(sft), "eval_samples": 4}


def _env(tmp: Path) -> dict:
    return {"NBUTILS_WORKING_ROOT": str(tmp / "working"), "NBUTILS_TEMP_ROOT": str(tmp / "temp"),
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def prefer(ctx, params: dict, out: Path, tmp: Path, **kw) -> int:
    return faultkit.run(ctx, NOTEBOOK, {**params, "output_dir": str(out)}, _env(tmp), **kw)


def _done(out: Path) -> dict:
    summary = json.loads((out / SUMMARY).read_text())
    assert faultkit.consistent(out, SUMMARY, summary["checksums"], volatile=VOLATILE) == summary
    assert summary["global_step"] == 4 and summary["checkpoint"] == reports.identity(out / "checkpoint")
    for name in (MARKERS["eval"], MARKERS["train_qlora"]):  # both name the checkpoint beside them
        assert json.loads((out / name).read_text())["checkpoint"] == summary["checkpoint"]
    return summary


@pytest.fixture(scope="module")
def reference(ctx, params, tmp_path_factory):
    """An uninterrupted smoke DPO run: what every rerun must end as."""
    tmp = tmp_path_factory.mktemp("reference05")
    log = tmp / "reference.log"
    assert prefer(ctx, params, tmp / "preference", tmp, log=str(log)) == 0, faultkit.tail(log)
    summary = _done(tmp / "preference")
    assert summary["files"] == ["checkpoint/", "embedded_pairs.eval.jsonl", "embedded_pairs.train.jsonl",
                                "eval_report.json", "learning_curves.png", "log_history.json", "quarantine.jsonl",
                                "training_summary.json"]
    return tmp / "preference", summary


def _stable(summary: dict) -> dict:
    """The summary's checksums that two runs share."""
    return {k: v for k, v in summary["checksums"].items() if not k.startswith(VOLATILE)}


def _report(out: Path) -> dict:
    report = json.loads((out / MARKERS["eval"]).read_text())
    return {**report, "checkpoint": {k: v for k, v in report["checkpoint"].items() if k != "dir"}}


def _matches(out: Path, ref: tuple[Path, dict]) -> None:
    """Ends as the reference: the same files (the final adapter's safetensors byte for byte: bit-identical weights),
    the same report on the same checkpoint."""
    summary = _done(out)
    assert _stable(summary) == _stable(ref[1]) and _report(out) == _report(ref[0])
    assert summary["checkpoint"]["content_hash"] == ref[1]["checkpoint"]["content_hash"]
    assert "checkpoint/adapter_model.safetensors" in _stable(summary)
    assert not [p for p in out.rglob("*") if ".tmp-" in p.name or p.name.startswith(".trash-")]


def test_kills_at_each_write_then_one_rerun_ends_as_the_uninterrupted_run(ctx, params, reference, tmp_path):
    """Each kill lands on a rerun of the run killed before it, so the next run gets past the state each kill left:
    the one after the kill at the last Trainer save resumes from step 2. After every kill the folder holds only whole
    files of the uninterrupted run, and no summary; the last rerun ends as that run, the final adapter bit for bit."""
    out = tmp_path / "preference"
    logs = []
    for kill_at, where in KILLS.items():
        logs.append(tmp_path / f"kill-{kill_at}.log")
        code = prefer(ctx, params, out, tmp_path, kill_at=kill_at, log=str(logs[-1]))
        assert code == -9, f"no kill at {kill_at} ({where}), exit {code}: {faultkit.tail(logs[-1])}"
        assert faultkit.consistent(out, SUMMARY, reference[1]["checksums"], volatile=VOLATILE) == {}, kill_at
        assert not (out / MARKERS["eval"]).exists() or _report(out) == _report(reference[0])  # whole, or not there
    after_save = logs[list(KILLS).index("save:2") + 1].read_text()
    assert "resuming from" in after_save and "checkpoint-2 (step 2, verified)" in after_save, after_save[-3000:]
    log = tmp_path / "rerun.log"
    assert prefer(ctx, params, out, tmp_path, log=str(log)) == 0, faultkit.tail(log)
    _matches(out, reference)


def test_a_second_run_is_refused_in_seconds_before_it_reads_or_writes_anything(ctx, params, tmp_path):
    out, first_log, second_log = tmp_path / "preference", tmp_path / "first.log", tmp_path / "second.log"
    first = faultkit.start(ctx, NOTEBOOK, {**params, "output_dir": str(out)}, _env(tmp_path), log=str(first_log),
                           hold=("nbutils.train.preference", "plan_preference", 120))
    try:
        assert faultkit.holder_written(out, alive=first.is_alive), faultkit.tail(first_log)
        t0 = time.time()
        assert prefer(ctx, params, out, tmp_path, log=str(second_log)) == 1
        took = time.time() - t0
        text = second_log.read_text()
        assert "RunLockedError" in text and f"pid {first.pid}" in text and "another output_dir" in text, text[-2000:]
        assert "Loading weights" not in text and took < 30, f"refused after {took:.0f} s"
        assert faultkit.final_files(out) == {}  # no pairs, no quarantine: the plan never ran
        print(f"second 05 refused after {took:.1f} s")
    finally:
        first.kill()
        first.join()
    runlock.acquire(out)  # the killed holder's lock is taken over (04's test and 02's rerun after it)
    runlock.release(out)


def test_a_full_disk_while_the_report_is_written_is_one_clear_error(ctx, params, reference, tmp_path):
    out, log = tmp_path / "preference", tmp_path / "full.log"
    assert prefer(ctx, params, out, tmp_path, log=str(log), full_at="file:5") == 1
    text = log.read_text()
    assert f"disk full at {out} writing eval_report.json: needs ~" in text and " MB, " in text, text[-3000:]
    assert "nothing was left half-written under eval_report.json" in text
    assert faultkit.consistent(out, SUMMARY, reference[1]["checksums"], volatile=VOLATILE) == {}
    assert not (out / MARKERS["eval"]).exists() and not (out / MARKERS["train_qlora"]).exists()
    assert prefer(ctx, params, out, tmp_path, log=str(log)) == 0, faultkit.tail(log)
    _matches(out, reference)


def test_a_rerun_that_changes_the_checkpoint_removes_the_reports_first_and_04_refuses_old_ones(
        ctx, params, reference, tmp_path):
    """A finished run rerun from scratch with another seed, killed once its new checkpoint is saved: the reports
    about the old checkpoint are gone; put back (copied from elsewhere, say), 04 refuses them naming 05."""
    out = tmp_path / "preference"
    shutil.copytree(reference[0], out)
    again = {**params, "seed": 1, "resume": False}
    assert prefer(ctx, again, out, tmp_path, kill_at="verify:1") == -9
    assert reports.identity(out / "checkpoint")["content_hash"] != reference[1]["checkpoint"]["content_hash"]
    assert not [name for name in (SUMMARY, MARKERS["eval"], MARKERS["train_qlora"]) if (out / name).exists()]
    export = {"data_dir": params["data_dir"], "adapter_dir": str(out), "eval_dir": str(out), "force": True,
              "output_dir": str(tmp_path / "export")}
    log = tmp_path / "export.log"
    assert faultkit.run(ctx, "notebooks/04_export.py", export, _env(tmp_path), log=str(log)) == 1
    assert f"{out} has no training_summary.json" in log.read_text(), faultkit.tail(log)
    for name in (MARKERS["eval"], MARKERS["train_qlora"]):
        shutil.copy(reference[0] / name, out / name)
    log = tmp_path / "export-again.log"
    assert faultkit.run(ctx, "notebooks/04_export.py", export, _env(tmp_path), log=str(log)) == 1
    text = log.read_text()
    assert "ReportMismatchError" in text and "describes another checkpoint (step 4, content" in text, text[-3000:]
    assert "Rerun 05_preference" in text and "Loading weights" not in text
