"""export_summary.json: written under the chain's marker name, JSON on disk, secrets scrubbed."""

import json
from pathlib import Path

from nbutils.chain import MARKERS
from nbutils.export import summary


def test_summary_is_the_export_marker_and_holds_no_secret(tmp_path, hf_token):
    path = summary.write_summary(tmp_path, {"gate": {"passed": True}, "hub_token": "plain-value",
                                            "pushed": [f"https://hub/me/model?t={hf_token}"], "folder": Path("/x/y")})
    assert path == tmp_path / MARKERS["export"]
    data = json.loads(path.read_text())
    assert data["gate"] == {"passed": True} and data["folder"] == "/x/y"  # paths written as text
    assert data["hub_token"] == "***" and hf_token not in path.read_text() and "***" in data["pushed"][0]
