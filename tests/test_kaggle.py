"""Kaggle bundles accepted by the kaggle client's own push validation; badges point at real notebooks."""

import json
import re
from pathlib import Path

import pytest

from nbutils import install, kaggle

ROOT = Path(__file__).resolve().parent.parent


class FakeKernelsClient:
    """Stands in for the HTTP client only: kernels_push's own validation runs unchanged."""

    def __init__(self):
        self.requests = []

    def save_kernel(self, request):
        self.requests.append(request)

        class Response:
            error, url, versionNumber = "", "https://www.kaggle.com/code/x", 1
            invalidTags = invalidDatasetSources = invalidCompetitionSources = invalidKernelSources = []

        return Response()


@pytest.fixture()
def api(monkeypatch):
    from contextlib import contextmanager

    from kaggle.api.kaggle_api_extended import KaggleApi

    client = FakeKernelsClient()

    @contextmanager
    def fake_client(self):
        yield type("K", (), {"kernels": type("KK", (), {"kernels_api_client": client})()})()

    monkeypatch.setattr(KaggleApi, "build_kaggle_client", fake_client)
    return KaggleApi(), client


def test_committed_metadata_is_generated(tmp_path):
    kaggle.write_metadata(tmp_path)
    for stem, slug, *_ in kaggle.NOTEBOOKS:
        committed = json.loads((ROOT / "kaggle-metadata" / slug / "kernel-metadata.json").read_text())
        assert committed == json.loads((tmp_path / "kaggle-metadata" / slug / "kernel-metadata.json").read_text())
        assert (ROOT / "kaggle-metadata" / slug / committed["code_file"]).resolve() == ROOT / "notebooks" / f"{stem}.ipynb"


def test_metadata_fields_and_chain():
    m = {stem: kaggle.kernel_metadata(stem, f"{stem}.ipynb", "me") for stem, *_ in kaggle.NOTEBOOKS}
    assert m["02_train_qlora"]["kernel_sources"] == ["me/qlora-01-data-prep"]
    assert m["03_eval"]["kernel_sources"] == ["me/qlora-01-data-prep", "me/qlora-02-train-qlora"]
    for stem in ("02_train_qlora", "03_eval"):
        assert m[stem]["enable_gpu"] is True and m[stem]["machine_shape"] == "NvidiaTeslaT4"
    assert all("enable_internet" in v and v["kernel_type"] == "notebook" for v in m.values())


def test_every_bundle_is_accepted_by_kernels_push(api, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KAGGLE_USERNAME", "someone")
    client_api, client = api
    for folder in kaggle.bundle(tmp_path):
        client_api.kernels_push(str(folder))
    out = capsys.readouterr().out
    assert "does not resolve to the specified id" not in out  # titles slugify to the ids
    assert [r.slug for r in client.requests] == [f"someone/{slug}" for _, slug, *_ in kaggle.NOTEBOOKS]
    for request in client.requests:
        body = json.loads(request.text)
        assert all(not c.get("outputs") for c in body["cells"] if c["cell_type"] == "code")
        assert request.kernel_type == "notebook" and request.language == "python"


@pytest.mark.parametrize("field, value, message", [
    ("title", "QL", "at least five characters"),
    ("kernel_type", "notebok", "valid kernel type"),
    ("language", "java", "valid language"),
    ("code_file", "missing.ipynb", "Source file not found"),
    ("kernel_sources", ["not a valid source"], ""),
])
def test_broken_bundle_is_rejected(api, tmp_path, field, value, message):
    client_api, _ = api
    folder = kaggle.bundle(tmp_path)[0]
    meta = json.loads((folder / "kernel-metadata.json").read_text())
    meta[field] = value
    (folder / "kernel-metadata.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=message):
        client_api.kernels_push(str(folder))


def test_push_without_credentials_says_what_is_missing(tmp_path, monkeypatch, capsys):
    for var in ("KAGGLE_USERNAME", "KAGGLE_KEY", "KAGGLE_API_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("KAGGLE_CONFIG_DIR", str(tmp_path))
    assert kaggle.push([tmp_path]) == 1
    assert "No Kaggle credentials: set KAGGLE_USERNAME and KAGGLE_KEY" in capsys.readouterr().err


def _badge_targets(text: str) -> list[str]:
    return re.findall(r"\]\((https://(?:colab\.research\.google\.com|kaggle\.com)[^)\s]+)\)", text)


def test_badges_point_at_notebooks_that_exist():
    sources = [ROOT / "README.md"] + sorted((ROOT / "notebooks").glob("*.py"))
    found = 0
    for path in sources:
        for url in _badge_targets(path.read_text()):
            if "assets/colab-badge" in url or url.endswith(".svg"):
                continue
            m = re.search(r"/blob/[\w.-]+/(notebooks/[\w.-]+\.ipynb)$", url)
            assert m, f"{path.name}: badge {url} does not point at a notebook"
            assert (ROOT / m.group(1)).exists(), f"{path.name}: {m.group(1)} does not exist"
            assert kaggle.repository() in url
            found += 1
    assert found >= 12  # 2 badges per notebook, in the notebooks and in README
    for stem, *_ in kaggle.NOTEBOOKS:
        assert kaggle.badges_markdown(stem) in (ROOT / "notebooks" / f"{stem}.py").read_text()


def test_requirements_agree_with_install_pins():
    pins = dict(line.split("==") for line in (ROOT / "requirements.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    for name, version in install.PINS.items():
        assert pins.get(name) == version, name
    assert "torch" not in install.PINS
