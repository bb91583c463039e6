"""A checkpoint's checksums.json: every file hashed, a rewritten file, a wrong step, a missing marker found."""

import json

from nbutils.train import checksums


def test_write_then_problems_finds_a_rewritten_file_and_a_wrong_step(tmp_path):
    (tmp_path / "adapter.bin").write_bytes(b"weights")
    (tmp_path / "trainer_state.json").write_text(json.dumps({"global_step": 4}))
    data = checksums.write(tmp_path, 4, {"lr": 1})
    (tmp_path / checksums.MARKER).write_text("")
    assert set(data["files"]) == {"adapter.bin", "trainer_state.json"} and checksums.read(tmp_path)["settings"] == {"lr": 1}
    assert checksums.problems(tmp_path, ["adapter.bin"]) == [] and checksums.step(tmp_path) == 4
    (tmp_path / "adapter.bin").write_bytes(b"WEIGHTS")  # same size, other content
    assert checksums.problems(tmp_path) == ["adapter.bin content differs from its SHA-256 in checksums.json (altered)"]
    (tmp_path / "trainer_state.json").write_text(json.dumps({"global_step": 5}))
    assert "trainer_state.json says step 5, checksums.json 4" in checksums.problems(tmp_path)


def test_problems_without_marker_or_checksums(tmp_path):
    assert checksums.problems(tmp_path) == ["no COMPLETE marker (the save did not finish)"]
    (tmp_path / checksums.MARKER).write_text("")
    assert checksums.problems(tmp_path) == [f"{checksums.NAME} missing or unreadable"] and checksums.step(tmp_path) is None
