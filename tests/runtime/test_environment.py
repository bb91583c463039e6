"""Where we run and the path helper that finds upstream outputs."""

import dataclasses
import sys
import time
from pathlib import Path

import pytest

from nbutils.chain import MARKERS
from nbutils.runtime import environment
from nbutils.runtime.environment import detect_platform, find_upstream, process_start_time, stage_dir
from nbutils.runtime.limits import session_start


def test_kaggle_batch_and_interactive():
    batch = detect_platform({"KAGGLE_KERNEL_RUN_TYPE": "Batch"})
    assert (batch.name, batch.run_type, batch.is_batch) == ("kaggle", "batch", True)
    assert batch.input_root == Path("/kaggle/input") and batch.working_root == Path("/kaggle/working")
    inter = detect_platform({"KAGGLE_KERNEL_RUN_TYPE": "Interactive"})
    assert (inter.name, inter.run_type) == ("kaggle", "interactive")


def test_colab_and_local():
    colab = detect_platform({"COLAB_RELEASE_TAG": "release-colab-2026"})
    assert colab.name == "colab" and colab.working_root == Path("/content")
    local = detect_platform({})
    assert local.name == "local" and local.working_root.name == "runs"


def test_roots_overridable_for_the_harness(tmp_path):
    env = {"KAGGLE_KERNEL_RUN_TYPE": "Batch", "NBUTILS_INPUT_ROOT": str(tmp_path / "i"),
           "NBUTILS_WORKING_ROOT": str(tmp_path / "w"), "NBUTILS_TEMP_ROOT": str(tmp_path / "t")}
    p = detect_platform(env)
    assert (p.name, p.input_root, p.working_root, p.temp_root) == (
        "kaggle", tmp_path / "i", tmp_path / "w", tmp_path / "t")


def test_find_upstream_in_working_then_inputs(tmp_path, monkeypatch):
    monkeypatch.setenv("NBUTILS_WORKING_ROOT", str(tmp_path / "work"))
    monkeypatch.setenv("NBUTILS_INPUT_ROOT", str(tmp_path / "input"))
    mounted = tmp_path / "input" / "qlora-01-data-prep" / "data_prep"
    mounted.mkdir(parents=True)
    (mounted / "manifest.json").write_text("{}")
    assert find_upstream("data_prep") == mounted
    local = stage_dir("data_prep")
    (local / "manifest.json").write_text("{}")
    assert find_upstream("data_prep") == local  # the working dir wins (same session)


def test_find_upstream_explains_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("NBUTILS_WORKING_ROOT", str(tmp_path / "work"))
    monkeypatch.setenv("NBUTILS_INPUT_ROOT", str(tmp_path / "input"))
    with pytest.raises(FileNotFoundError, match="Run the 'train_qlora' notebook first"):
        find_upstream("train_qlora")
    with pytest.raises(FileNotFoundError, match="has no manifest.json"):
        find_upstream("data_prep", tmp_path)


def test_time_budget_counts_from_the_kaggle_session_start(monkeypatch):
    kaggle = detect_platform({"KAGGLE_KERNEL_RUN_TYPE": "Batch"})
    local = detect_platform({})
    started = process_start_time()
    assert started <= time.time() and session_start(kaggle) == pytest.approx(started, abs=1)
    assert session_start(local) == pytest.approx(time.time(), abs=1)
    monkeypatch.setitem(sys.modules, "psutil", None)  # no psutil: read /proc
    assert process_start_time() == pytest.approx(started, abs=1)
    monkeypatch.setenv("NBUTILS_SESSION_START", "1234.5")  # set by the notebook launcher for the processes it forks
    assert session_start(kaggle) == session_start(local) == 1234.5


def test_on_colab_the_time_budget_counts_from_the_kernel_start_as_on_kaggle(monkeypatch):
    """Colab's 12 hours run from its runtime's start: not from the cell that builds the Run, nor from its rerun."""
    monkeypatch.delenv("NBUTILS_SESSION_START", raising=False)
    monkeypatch.setattr(environment, "process_start_time", lambda: 1000.0)
    colab = detect_platform({"COLAB_RELEASE_TAG": "release-colab-2026"})
    assert session_start(colab) == session_start(detect_platform({"KAGGLE_KERNEL_RUN_TYPE": "Batch"})) == 1000.0
    assert session_start(detect_platform({})) > 1000.0  # a local kernel: no session limit, now


def test_on_colab_with_drive_mounted_every_notebook_writes_to_and_finds_upstream_on_drive(tmp_path, monkeypatch):
    env = {"COLAB_RELEASE_TAG": "release-colab-2026"}
    runtime = dataclasses.replace(detect_platform(env), input_root=tmp_path / "content", working_root=tmp_path / "content")
    with pytest.raises(FileNotFoundError, match=r"own: mount Google Drive .* in every notebook"):
        find_upstream("data_prep", platform=runtime)  # 01 ran in another runtime, whose /content is not this one's
    monkeypatch.setattr(environment, "COLAB_DRIVE", tmp_path / "drive" / "MyDrive")
    (tmp_path / "drive" / "MyDrive").mkdir(parents=True)
    colab = detect_platform(env)
    assert colab.working_root == tmp_path / "drive" / "MyDrive" / environment.COLAB_DRIVE_FOLDER
    written = stage_dir("data_prep", platform=colab)  # 01, in its runtime
    (written / MARKERS["data_prep"]).write_text("{}")
    assert find_upstream("data_prep", platform=detect_platform(env)) == written  # 02, in another
