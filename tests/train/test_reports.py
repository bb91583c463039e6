"""Reports that describe the files beside them: the checkpoint they name, the files they list, retracted first."""

import json
import subprocess
import sys

import pytest

from nbutils.chain import MARKERS
from nbutils.train import checkpoints, reports, runlock


def _adapter(folder, weights="w", step=4):
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text("{}")
    (folder / "adapter_model.safetensors").write_text(weights)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    checkpoints.mark_complete(folder, step)
    return folder


def test_the_content_hash_is_the_adapters_and_changes_with_it(tmp_path):
    a, b = _adapter(tmp_path / "checkpoint"), _adapter(tmp_path / "trainer" / "checkpoint-4")
    (b / "optimizer.pt").write_text("resume files do not change the model")
    assert reports.content_hash(a) == reports.content_hash(b)
    assert reports.identity(a) == {"dir": str(a), "step": 4, "content_hash": reports.content_hash(a)}
    assert reports.content_hash(_adapter(tmp_path / "other", "w2", 8)) != reports.content_hash(a)


def test_a_report_of_another_checkpoint_or_of_none_is_refused_naming_what_to_rerun(tmp_path):
    old, new = _adapter(tmp_path / "old", "w", 16), _adapter(tmp_path / "new", "w2", 24)
    report = {"checkpoint": reports.identity(old)}
    assert reports.check_describes(report, "eval_report.json", old, "03_eval")["step"] == 16
    with pytest.raises(reports.ReportMismatchError, match=r"eval_report.json describes another checkpoint \(step 16, "
                       r"content \w{12}\) than the one beside it, .*new \(step 24, content \w{12}\).*Rerun 05_preference"):
        reports.check_describes(report, "eval_report.json", new, "05_preference")
    with pytest.raises(reports.ReportMismatchError, match="does not say which checkpoint.*rerun 03_eval"):
        reports.check_describes({"n_samples": 3}, "eval_report.json", new, "03_eval")


def test_a_summary_lists_only_files_that_are_there_with_their_checksums(tmp_path):
    (tmp_path / "adapter").mkdir()
    (tmp_path / "adapter" / "weights").write_bytes(b"12345")
    (tmp_path / "adapter" / "weights.tmp-1-ab").write_bytes(b"12")  # a killed writer's: never listed
    (tmp_path / "eval_report.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="quarantine.jsonl is listed in the summary but not there"):
        reports.write_summary(tmp_path, "summary.json", {"a": 1}, ["adapter", "quarantine.jsonl"])
    assert not (tmp_path / "summary.json").exists()
    data = reports.write_summary(tmp_path, "summary.json", {"a": 1}, ["adapter", "eval_report.json"])
    assert data["files"] == ["adapter/", "eval_report.json"] and list(data["checksums"]) == ["adapter/weights",
                                                                                            "eval_report.json"]
    assert json.loads((tmp_path / "summary.json").read_text()) == data and reports.problems(tmp_path, "summary.json") == []
    (tmp_path / "adapter" / "weights").write_bytes(b"123")
    (tmp_path / "eval_report.json").unlink()
    assert reports.problems(tmp_path, "summary.json") == ["adapter/weights is 3 bytes, summary.json says 5",
                                                          "eval_report.json missing"]
    (tmp_path / "summary.json").write_text('{"a": ')
    assert reports.problems(tmp_path, "summary.json")[0].startswith("summary.json is not valid JSON")


HOLD = ("import sys, time; from nbutils.train import reports; reports.begin(sys.argv[1], 'export'); print('held', "
        "flush=True); time.sleep(60)")


def test_begin_takes_the_lock_retracts_the_summary_and_cleans_what_kills_left(tmp_path, capsys):
    (tmp_path / MARKERS["export"]).write_text("{}")
    (tmp_path / "export_summary.tmp-9-ab.json").write_text("{")
    (tmp_path / ".trash-merged-12345678").mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().startswith("[export] removed the earlier export_summary.json")
        assert holder.stdout.readline().strip() == "held"
        assert sorted(p.name for p in tmp_path.iterdir()) == [runlock.LOCK, runlock.HOLDER]
        with pytest.raises(runlock.RunLockedError, match=rf"in use by another run \(host .*, pid {holder.pid}, started"):
            reports.begin(tmp_path, "export")
    finally:
        holder.kill()
        holder.wait()
    assert reports.begin(tmp_path, "export") == tmp_path  # a dead holder's lock is taken over
    runlock.release(tmp_path)
    assert reports.retract(tmp_path, ["nothing.json"]) == []
