"""export_summary.json: the chain's marker, secrets scrubbed, every file it lists there and checksummed, nothing an
earlier export left that it does not describe, no GGUF path for a GGUF step that was skipped."""

import json
from pathlib import Path

from nbutils.chain import MARKERS
from nbutils.export import diskplan, summary
from nbutils.train import reports


def test_summary_is_the_export_marker_and_holds_no_secret(tmp_path, hf_token):
    path = summary.write_summary(tmp_path, {"gate": {"passed": True}, "hub_token": "plain-value",
                                            "pushed": [f"https://hub/me/model?t={hf_token}"], "folder": Path("/x/y")})
    assert path == tmp_path / MARKERS["export"]
    data = json.loads(path.read_text())
    assert data["gate"] == {"passed": True} and data["folder"] == "/x/y"  # paths written as text
    assert data["hub_token"] == "***" and hf_token not in path.read_text() and "***" in data["pushed"][0]
    assert data["files"] == [] and data["checksums"] == {}


def _plan(tmp_path):
    return diskplan.make_plan(tmp_path / "out", tmp_path / "temp", {"adapter": 10, "adapter_gguf": 5, "gguf": 20,
                                                                    "merged": 30})


def test_a_skipped_gguf_step_is_not_written_in_the_plan_nor_listed(tmp_path):
    disk = _plan(tmp_path)
    skipped = {"file": None, "reason": "the embedded default's tokenizer ..."}
    assert summary.written(disk, {"ok": True}, {"dir": "x"}, skipped) == ["adapter", "merged"]
    plan = summary.disk_plan(disk, skipped)["artifacts"]
    assert plan["gguf"]["path"] is None and plan["gguf"]["where"] == "none" and "embedded default" in plan["gguf"]["why"]
    assert plan["adapter_gguf"]["path"] is None and plan["merged"]["path"] == str(tmp_path / "out" / "merged")
    made = {"file": "m.gguf", "lora": {"file": None, "reason": "the LoRA converter refused it"}}
    assert summary.written(disk, {"ok": True}, None, made) == ["gguf", "merged"]
    assert "LoRA converter refused" in summary.disk_plan(disk, made)["artifacts"]["adapter_gguf"]["why"]


def test_an_earlier_exports_folder_not_written_now_goes_before_the_summary(tmp_path):
    for name in ("adapter", "merged"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "README.md").write_text(name)
    summary.write_summary(tmp_path, {"gate": {}}, ["adapter"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapter", MARKERS["export"]]
    data = json.loads((tmp_path / MARKERS["export"]).read_text())
    assert data["files"] == ["adapter/"] and list(data["checksums"]) == ["adapter/README.md"]
    assert reports.problems(tmp_path, MARKERS["export"]) == []
