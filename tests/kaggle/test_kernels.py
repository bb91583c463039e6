"""Kaggle kernel metadata and bundles checked by the kaggle client's own push code (network replaced at the HTTP
send only, tests/kaggle/conftest.py), and the push in chain order."""

import json
from pathlib import Path

import pytest

from nbutils import chain
from nbutils.kaggle import kernels
from nbutils.runtime import settings

ROOT = Path(__file__).resolve().parents[2]


def test_committed_metadata_is_what_the_generator_writes(tmp_path):
    kernels.write_metadata(tmp_path)
    for nb in chain.STAGES:
        committed = ROOT / "kaggle-metadata" / nb.slug / kernels.METADATA_FILE
        assert committed.read_text() == (tmp_path / "kaggle-metadata" / nb.slug / kernels.METADATA_FILE).read_text(), \
            f"{committed} is stale: run `make kaggle-metadata`"
        meta = json.loads(committed.read_text())
        assert (committed.parent / meta["code_file"]).resolve() == ROOT / "notebooks" / f"{nb.notebook}.ipynb"


def test_titles_slugify_to_the_ids_with_the_clients_slugify():
    from slugify import slugify  # what kernels_push compares the title with

    for nb in chain.STAGES:
        assert slugify(nb.title) == nb.slug and len(nb.title) >= 5


def test_metadata_fields_and_chain():
    m = {nb.notebook: kernels.kernel_metadata(nb.notebook, f"{nb.notebook}.ipynb", "me") for nb in chain.STAGES}
    assert m["01_data_prep"]["kernel_sources"] == [] and m["01_data_prep"]["enable_gpu"] is False
    assert "machine_shape" not in m["01_data_prep"]
    assert m["02_train_qlora"]["kernel_sources"] == ["me/qlora-01-data-prep"]
    assert m["03_eval"]["kernel_sources"] == ["me/qlora-01-data-prep", "me/qlora-02-train-qlora"]
    # 04 runs after 02 and 03 (and reads 01's eval prompts and manifest for the verification and the card).
    assert m["04_export"]["kernel_sources"] == ["me/qlora-01-data-prep", "me/qlora-02-train-qlora", "me/qlora-03-eval"]
    for stem in ("02_train_qlora", "03_eval", "04_export"):
        assert m[stem]["enable_gpu"] is True and m[stem]["machine_shape"] == "NvidiaTeslaT4"
    for meta in m.values():
        assert meta["enable_internet"] is True and meta["is_private"] is True  # explicit, never the client's default
        assert meta["kernel_type"] == "notebook" and meta["language"] == "python"
        assert meta["dataset_sources"] == [f"me/{settings.DATASET_SLUG}"] and meta["code_file"].endswith(".ipynb")


# --- bundles through the real kernels_push --------------------------------------------------------

def test_every_bundle_is_accepted_by_kernels_push(api, fake_kaggle, tmp_path, capsys):
    folders = kernels.bundle(tmp_path, owner="someone")
    assert [f.name for f in folders] == [nb.slug for nb in chain.STAGES]
    for folder, nb in zip(folders, chain.STAGES):
        assert sorted(p.name for p in folder.iterdir()) == sorted([f"{nb.notebook}.ipynb", kernels.METADATA_FILE])
        assert api.kernels_push(str(folder)).error in ("", None)
    assert "does not resolve to the specified id" not in capsys.readouterr().out
    bodies = [body for name, body in fake_kaggle.calls if name == "SaveKernel"]
    assert [b["slug"] for b in bodies] == [f"someone/{nb.slug}" for nb in chain.STAGES]
    for body, nb in zip(bodies, chain.STAGES):
        cells = json.loads(body["text"])["cells"]
        assert all(not c.get("outputs") and c.get("execution_count") is None for c in cells if c["cell_type"] == "code")
        assert body["kernelType"] == "notebook" and body["language"] == "python" and body["enableInternet"] is True
        assert body.get("machineShape") == ("NvidiaTeslaT4" if nb.gpu else None)
        assert body.get("kernelDataSources", []) == [f"someone/{chain.by_stage(s).slug}" for s in nb.upstream]


@pytest.mark.parametrize("field, value, message", [
    ("title", "QL", "at least five characters"),
    ("kernel_type", "notebok", "valid kernel type"),
    ("language", "julia", "valid language"),
    ("code_file", "missing.ipynb", "Source file not found"),
    ("id", "someone/qlora-01-data-prep/3", "cannot contain a version"),
    ("kernel_sources", ["qlora-01-data-prep"], "Kernel must be specified in the form"),
    ("dataset_sources", ["qlora-nbutils"], "Dataset must be specified in the form"),
])
def test_broken_bundle_is_rejected_before_anything_is_sent(api, fake_kaggle, tmp_path, field, value, message):
    folder = kernels.bundle(tmp_path, owner="someone")[0]
    meta = json.loads((folder / kernels.METADATA_FILE).read_text())
    meta[field] = value
    (folder / kernels.METADATA_FILE).write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=message):
        api.kernels_push(str(folder))
    assert fake_kaggle.calls == []


def test_a_title_that_does_not_slugify_to_the_id_is_flagged(api, tmp_path, capsys):
    folder = kernels.bundle(tmp_path, owner="someone")[0]
    meta = json.loads((folder / kernels.METADATA_FILE).read_text())
    (folder / kernels.METADATA_FILE).write_text(json.dumps({**meta, "title": "QLoRA Data Preparation"}))
    api.kernels_push(str(folder))
    assert "does not resolve to the specified id" in capsys.readouterr().out


# --- push -----------------------------------------------------------------------------------------

def test_push_without_credentials_says_what_is_missing(fake_kaggle, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KAGGLE_CONFIG_DIR", str(tmp_path / "config"))
    assert kernels.push(tmp_path / "bundles") == 1
    err = capsys.readouterr().err
    assert "No Kaggle credentials, nothing was pushed" in err and "KAGGLE_API_TOKEN" in err and "kaggle.json" in err
    assert fake_kaggle.calls == [] and not (tmp_path / "bundles").exists()


def test_push_goes_in_chain_order_and_waits_for_each_run(fake_kaggle, tmp_path, monkeypatch):
    monkeypatch.setenv("KAGGLE_USERNAME", "someone")
    monkeypatch.setenv("KAGGLE_KEY", "0" * 32)
    assert kernels.push(tmp_path, wait=True, poll_s=0) == 0
    names = [(name, body.get("slug") or body.get("kernelSlug")) for name, body in fake_kaggle.calls]
    status = "GetKernelSessionStatus"
    assert names == [("SaveKernel", "someone/qlora-01-data-prep"), *[(status, "qlora-01-data-prep")] * 2,
                     ("SaveKernel", "someone/qlora-02-train-qlora"), *[(status, "qlora-02-train-qlora")] * 2,
                     ("SaveKernel", "someone/qlora-03-eval"), *[(status, "qlora-03-eval")] * 2,
                     ("SaveKernel", "someone/qlora-04-export"), *[(status, "qlora-04-export")] * 2,
                     ("SaveKernel", "someone/qlora-05-preference")]


def test_push_stops_the_chain_when_a_run_fails(fake_kaggle, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KAGGLE_USERNAME", "someone")
    monkeypatch.setenv("KAGGLE_KEY", "0" * 32)
    fake_kaggle.statuses["qlora-01-data-prep"] = ["QUEUED", "ERROR"]
    assert kernels.push(tmp_path, wait=True, poll_s=0) == 1
    assert [n for n, _ in fake_kaggle.calls].count("SaveKernel") == 1
    assert "ended ERROR" in capsys.readouterr().err


class FakeClock:
    """time.monotonic and time.sleep for _wait: sleeping advances the clock, nothing waits."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def _fake_api(statuses):
    """A kaggle client whose kernels_status walks through `statuses` (the last one repeats)."""
    from types import SimpleNamespace

    seen = []

    def kernels_status(kernel_id):
        seen.append(statuses.pop(0) if len(statuses) > 1 else statuses[0])
        return SimpleNamespace(status=seen[-1], failure_message="")

    return SimpleNamespace(kernels_status=kernels_status), seen


def test_wait_does_not_take_the_previous_versions_status_for_this_runs(monkeypatch, capsys):
    """Right after the push the status can still be the last version's COMPLETE: the chain went on to the next
    notebook, which read the old run's output."""
    clock = FakeClock()
    monkeypatch.setattr(kernels, "time", clock)
    api, seen = _fake_api(["COMPLETE", "COMPLETE", "QUEUED", "RUNNING", "ERROR"])
    assert kernels._wait(api, "someone/k", poll_s=60) == "ERROR"
    assert seen == ["COMPLETE", "COMPLETE", "QUEUED", "RUNNING", "ERROR"]


def test_wait_takes_a_terminal_status_after_the_grace_period_when_the_run_was_never_seen_running(monkeypatch, capsys):
    clock = FakeClock()
    monkeypatch.setattr(kernels, "time", clock)
    api, seen = _fake_api(["COMPLETE"])  # it ran and ended between two polls
    assert kernels._wait(api, "someone/k", poll_s=60, grace_s=300) == "COMPLETE"
    assert len(seen) == 6 and clock.now == 300
    assert "not seen queued or running in 300 s; taking COMPLETE" in capsys.readouterr().out


def test_push_reports_a_server_side_rejection(fake_kaggle, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KAGGLE_USERNAME", "someone")
    monkeypatch.setenv("KAGGLE_KEY", "0" * 32)
    fake_kaggle.error = "Notebook not found"
    assert kernels.push(tmp_path, wait=False) == 1
    assert "push of someone/qlora-01-data-prep failed: Notebook not found" in capsys.readouterr().err
