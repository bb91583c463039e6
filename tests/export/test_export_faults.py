"""04 under faults: kills at each write, two runs at once, a full disk mid-write, a re-export over an earlier export,
a report of another checkpoint.

04 runs as a script (its own cells) on the embedded default: 02's adapter after 6 steps (A) and the same run's step-3
checkpoint as another adapter (B), each with a report that names it. Every run is a child forked from a server that
imported torch once (tests/faultkit.py). The kills land on an earlier export of B in the output folder, so each one
is also a re-export: after every kill no file under a final name is partial or mixed (each is A's or B's whole),
and a summary, when there is one, lists only files that are there and whole. The rerun then ends identical to an
uninterrupted export of A: the same files with the same SHA-256.

Run alone: pytest -m faults tests/export/test_export_faults.py
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from nbutils.chain import MARKERS
from nbutils.train import reports
from tests import faultkit

pytestmark = [pytest.mark.faults, pytest.mark.integration]
NOTEBOOK = "notebooks/04_export.py"
SUMMARY = MARKERS["export"]
# Where the kills land, in the order of a run: half of the merged model's shard written; the merged folder complete
# but not yet in place; the earlier export's merged folder renamed aside and the new one not yet in; half of the
# adapter's files copied (its card, README.md, comes after them); the adapter's swap; half of the summary written
# ("file:1" is the lock's holder file). Cards are written inside their folders, before the folder's swap.
KILLS = ["shard:1", "folder:1", "swap:1", "adapter:3", "swap:2", "file:2"]


@pytest.fixture(scope="module")
def ctx():
    return faultkit.context("nbutils.export.adapter", "nbutils.export.ggufbuild")


def _prepare(data_dir: str, root: str, report: dict) -> None:
    """02's run (6 steps, checkpoints at 3 and 6), a copy of it whose final checkpoint is step 3 (another adapter),
    and a report on each that names its checkpoint. In a child process."""
    from nbutils.eval import evaluation
    from nbutils.train import atomic, checkpoints, reports

    root = Path(root)
    a, b = root / "train_qlora", root / "train_qlora_b"
    faultkit.train_sft(data_dir, str(a), 6, 3)
    shutil.copytree(a, b, ignore=shutil.ignore_patterns("checkpoint", ".run.lock*"))
    checkpoints.copy_complete(b / "trainer" / "checkpoint-3", b / "checkpoint")
    summary = json.loads((b / MARKERS["train_qlora"]).read_text())
    atomic.write_json(b / MARKERS["train_qlora"], {**summary, "global_step": 3,
                                                   "checkpoint": reports.identity(b / "checkpoint")})
    for name, train in (("eval", a), ("eval_b", b)):
        (root / name).mkdir()
        evaluation.write_report(root / name, report, train / "checkpoint")


@pytest.fixture(scope="module")
def upstream(ctx, prepared_data, tmp_path_factory, make_report):
    """04's inputs for two adapters: A (02's final checkpoint, step 6) and B (its step-3 checkpoint)."""
    root = tmp_path_factory.mktemp("upstream04")
    faultkit.call(ctx, _prepare, str(prepared_data), str(root), make_report())
    params = {"data_dir": str(prepared_data), "adapter_dir": str(root / "train_qlora"), "eval_dir": str(root / "eval")}
    return {"A": params, "B": {**params, "adapter_dir": str(root / "train_qlora_b"), "eval_dir": str(root / "eval_b")}}


def _env(tmp: Path) -> dict:
    return {"NBUTILS_WORKING_ROOT": str(tmp / "working"), "NBUTILS_TEMP_ROOT": str(tmp / "temp"),
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def export(ctx, params: dict, out: Path, tmp: Path, **kw) -> int:
    return faultkit.run(ctx, NOTEBOOK, {**params, "output_dir": str(out)}, _env(tmp), **kw)


def _done(out: Path) -> dict:
    summary = json.loads((out / SUMMARY).read_text())
    assert faultkit.consistent(out, SUMMARY, summary["checksums"]) == summary
    return summary


@pytest.fixture(scope="module")
def reference(ctx, upstream, tmp_path_factory):
    """Uninterrupted exports of A (what every rerun must end as) and of B (the earlier export the kills land on)."""
    tmp = tmp_path_factory.mktemp("reference04")
    runs = {}
    for name in ("A", "B"):
        log = tmp / f"{name}.log"
        assert export(ctx, upstream[name], tmp / name, tmp, log=str(log)) == 0, faultkit.tail(log)
        runs[name] = _done(tmp / name)
    assert runs["A"]["checkpoint"]["step"] == 6 and runs["B"]["checkpoint"]["step"] == 3
    assert runs["A"]["files"] == ["adapter/", "merged/"] and runs["A"]["checksums"] != runs["B"]["checksums"]
    gguf = runs["A"]["disk_plan"]["artifacts"]["gguf"]  # the embedded default has no GGUF: none listed, none planned
    assert gguf["where"] == "none" and gguf["path"] is None and "embedded default" in gguf["why"]
    return {name: (tmp / name, s) for name, s in runs.items()}


def _matches(out: Path, ref: tuple[Path, dict]) -> None:
    summary = _done(out)
    assert summary["checksums"] == ref[1]["checksums"] and summary["checkpoint"] == ref[1]["checkpoint"]
    assert sorted(faultkit.final_files(out)) == sorted(faultkit.final_files(ref[0]))
    assert not [p for p in out.rglob("*") if ".tmp-" in p.name or p.name.startswith(".trash-")]


def test_kills_at_each_write_of_a_reexport_then_one_rerun_matches_an_uninterrupted_export(
        ctx, upstream, reference, tmp_path):
    """Each kill lands on a rerun of the run killed before it (the first on an earlier export of B): the next run
    gets past the state each kill left. After every kill the folder holds only whole files of A or B, and no summary
    (B's went first); the last rerun ends as an uninterrupted export of A."""
    out = tmp_path / "export"
    shutil.copytree(reference["B"][0], out)  # the earlier export, of another checkpoint
    for kill_at in KILLS:
        log = tmp_path / f"kill-{kill_at}.log"
        code = export(ctx, upstream["A"], out, tmp_path, kill_at=kill_at, log=str(log))
        assert code == -9, f"the kill at {kill_at} did not happen (exit {code}): {faultkit.tail(log)}"
        left = faultkit.consistent(out, SUMMARY, reference["A"][1]["checksums"], reference["B"][1]["checksums"])
        assert left == {}, f"killed at {kill_at}, the folder holds a summary: {left.get('checkpoint')}"
    log = tmp_path / "rerun.log"
    assert export(ctx, upstream["A"], out, tmp_path, log=str(log)) == 0, faultkit.tail(log)
    _matches(out, reference["A"])


def test_a_second_run_into_the_folder_is_refused_in_seconds_naming_the_holder(ctx, upstream, reference, tmp_path):
    out, first_log, second_log = tmp_path / "export", tmp_path / "first.log", tmp_path / "second.log"
    first = faultkit.start(ctx, NOTEBOOK, {**upstream["A"], "output_dir": str(out)}, _env(tmp_path), log=str(first_log),
                           hold=("nbutils.export.merge", "export_merged", 120))
    try:
        assert faultkit.holder_written(out, alive=first.is_alive), faultkit.tail(first_log)
        t0 = time.time()
        assert export(ctx, upstream["A"], out, tmp_path, log=str(second_log)) == 1
        took = time.time() - t0
        text = second_log.read_text()
        assert "RunLockedError" in text and f"pid {first.pid}" in text and "another output_dir" in text, text[-2000:]
        assert "Loading weights" not in text and "[disk plan]" not in text  # refused before anything loaded
        assert took < 30, f"the second run was refused after {took:.0f} s"
        print(f"second 04 refused after {took:.1f} s")
    finally:
        first.kill()
        first.join()
    assert faultkit.consistent(out, SUMMARY, reference["A"][1]["checksums"]) == {}
    log = tmp_path / "rerun.log"  # the killed holder's lock is taken over
    assert export(ctx, upstream["A"], out, tmp_path, log=str(log)) == 0, faultkit.tail(log)
    _matches(out, reference["A"])


def test_a_kill_mid_merge_in_the_temp_folder_leaves_files_the_rerun_removes_before_its_disk_plan(ctx, upstream, tmp_path):
    """With export_merged=False the merged model the GGUF is converted from is written in the temp folder, where no
    later run writes over a killed run's temporary folder: the rerun removes it before its disk plan measures the
    temp folder (saying what and how much), and ends with no temporary name left there."""
    from nbutils.export import diskplan

    out, log = tmp_path / "export", tmp_path / "kill.log"
    params = {**upstream["A"], "export_merged": False, "gguf_type": "q8_0"}
    assert export(ctx, params, out, tmp_path, kill_at="shard:1", log=str(log)) == -9, faultkit.tail(log)
    area = diskplan.work_area(tmp_path / "temp", out)
    left = [p.name for p in area.iterdir() if p.name.startswith("merged.tmp-")]
    assert left and diskplan.folder_bytes(area / left[0]) > 0, sorted(p.name for p in area.iterdir())
    log = tmp_path / "rerun.log"
    assert export(ctx, params, out, tmp_path, log=str(log)) == 0, faultkit.tail(log)
    text = log.read_text()
    said = next((ln for ln in text.splitlines() if ln.startswith("[disk plan] removed")), faultkit.tail(log))
    assert f"export/{area.name}/{left[0]} (" in said and " in all" in said, said
    assert text.index("[disk plan] removed") < text.index("[disk plan] output")  # before the plan measured
    assert not [p for p in (tmp_path / "temp").rglob("*") if ".tmp-" in p.name or p.name.startswith(".trash-")]
    assert (area / "merged").is_dir() and _done(out)["disk_plan"]["artifacts"]["merged"]["where"] == "temp"


@pytest.fixture
def tmpfs(tmp_path):
    """A 1 MiB tmpfs (needs root: skipped where mounting is not allowed), and a function that grows it."""
    path = tmp_path / "tmpfs"
    path.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(path)], capture_output=True)
    if proc.returncode:
        pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.decode().strip()[:100]})")
    yield path, lambda size: subprocess.run(["mount", "-o", f"remount,size={size}", str(path)], check=True)
    subprocess.run(["umount", str(path)], check=False)


def test_a_full_disk_while_the_merged_model_is_written_is_one_clear_error_leaving_nothing_half_written(
        ctx, upstream, reference, tmp_path, tmpfs):
    """The disk plan is told there is room (as when another process fills the disk after it), so the merged model's
    shard (1.2 MB) is written into a 1 MiB disk and the kernel says ENOSPC mid-file."""
    out, grow = tmpfs
    log = tmp_path / "full.log"
    assert export(ctx, upstream["A"], out, tmp_path, log=str(log), disk_free=2**30) == 1
    text = log.read_text()
    line = next((ln for ln in text.splitlines() if "DiskFullError: disk full at" in ln), text[-3000:])
    assert f"disk full at {out} writing the merged model: needs ~1." in line and " MB free; free space and run it " \
        "again; nothing was left half-written under merged" in line, line
    assert {p.name for p in out.iterdir()} <= set(reports.LOCK_FILES)  # nothing else: no partial merged/
    grow("8m")
    assert export(ctx, upstream["A"], out, tmp_path, log=str(log)) == 0, faultkit.tail(log)
    _matches(out, reference["A"])


def test_a_full_disk_while_the_summary_is_written_leaves_no_summary_and_a_rerun_writes_it(
        ctx, upstream, reference, tmp_path):
    out, log = tmp_path / "export", tmp_path / "full.log"
    assert export(ctx, upstream["A"], out, tmp_path, log=str(log), full_at="file:2") == 1
    text = log.read_text()
    assert f"disk full at {out} writing the export summary: needs ~" in text and "No space left on device" in text
    assert faultkit.consistent(out, SUMMARY, reference["A"][1]["checksums"]) == {}
    assert export(ctx, upstream["A"], out, tmp_path, log=str(log)) == 0, faultkit.tail(log)
    _matches(out, reference["A"])


def test_a_report_of_another_checkpoint_is_refused_naming_the_notebook_to_rerun(ctx, upstream, tmp_path):
    log, out = tmp_path / "mismatch.log", tmp_path / "export"
    params = {**upstream["A"], "eval_dir": upstream["B"]["eval_dir"], "force": True}  # B's report, A's checkpoint
    assert export(ctx, params, out, tmp_path, log=str(log)) == 1
    text = log.read_text()
    assert "ReportMismatchError" in text and "describes another checkpoint (step 3, content" in text, text[-3000:]
    assert "(step 6, content" in text and "Rerun 03_eval" in text and "Loading weights" not in text
    assert faultkit.final_files(out) == {}
