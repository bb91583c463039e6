"""Kaggle metadata and bundles checked by the kaggle client's own push code (network replaced at the HTTP
send only), push in chain order, the dataset's metadata, the make fragment, and badges that lead somewhere."""

import importlib.metadata
import json
import re
import socket
import subprocess
from pathlib import Path

import pytest
import requests

from nbutils import chain
from nbutils.kaggle import badges, dataset, kernels
from nbutils.platform import install, settings

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS_PRESENT = all((ROOT / "notebooks" / f"{nb.notebook}.ipynb").exists() for nb in chain.STAGES)
needs_notebooks = pytest.mark.skipif(not NOTEBOOKS_PRESENT, reason="notebooks/*.ipynb not written yet (make sync)")


class FakeKaggle:
    """Stands in for api.kaggle.com at requests.Session.send: everything above it (validation, the request
    object, its JSON, the response parsing) is the real client's code."""

    def __init__(self):
        self.calls, self.error, self.statuses = [], "", {}

    def send(self, session, request, **kwargs):
        name = request.url.rsplit("/", 1)[-1]
        body = json.loads(request.body) if request.body else {}
        self.calls.append((name, body))
        if name == "SaveKernel":
            payload = {"ref": body["slug"], "url": f"https://www.kaggle.com/code/{body['slug']}", "versionNumber": 1,
                       "error": self.error}
        elif name == "GetKernelSessionStatus":
            payload = {"status": self.statuses.get(body["kernelSlug"], "COMPLETE")}
        else:
            raise AssertionError(f"unexpected Kaggle call {name}")
        response = requests.Response()
        response.status_code, response.url, response.request = 200, request.url, request
        response.headers["Content-Type"] = "application/json"
        response._content = json.dumps(payload).encode()
        return response


@pytest.fixture()
def fake_kaggle(monkeypatch, tmp_path):
    def no_network(*args, **kwargs):
        raise AssertionError("a test tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    for var in ("KAGGLE_API_TOKEN", "KAGGLE_USERNAME", "KAGGLE_KEY", "KAGGLE_CONFIG_DIR", "KAGGLE_PUSH_WAIT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no real ~/.kaggle credentials are read
    from kaggle.api.kaggle_api_extended import KaggleApi  # noqa: F401 -- imported with the network blocked

    server = FakeKaggle()
    monkeypatch.setattr(requests.Session, "send", lambda session, request, **kw: server.send(session, request, **kw))
    return server


@pytest.fixture()
def api(fake_kaggle):
    from kaggle.api.kaggle_api_extended import KaggleApi

    return KaggleApi()


# --- metadata -----------------------------------------------------------------------------------

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


def test_owner_comes_from_env_then_kaggle_json_then_settings(monkeypatch, tmp_path):
    monkeypatch.delenv("KAGGLE_USERNAME", raising=False)
    monkeypatch.setenv("KAGGLE_CONFIG_DIR", str(tmp_path))
    assert settings.kaggle_owner() == settings.KAGGLE_OWNER
    (tmp_path / "kaggle.json").write_text('{"username": "from-json", "key": "k"}')
    assert settings.kaggle_owner() == "from-json"
    monkeypatch.setenv("KAGGLE_USERNAME", "from-env")
    assert settings.kaggle_owner() == "from-env"


# --- bundles through the real kernels_push --------------------------------------------------------

@needs_notebooks
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


@needs_notebooks
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


@needs_notebooks
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


@needs_notebooks
def test_push_goes_in_chain_order_and_waits_for_each_run(fake_kaggle, tmp_path, monkeypatch):
    monkeypatch.setenv("KAGGLE_USERNAME", "someone")
    monkeypatch.setenv("KAGGLE_KEY", "0" * 32)
    assert kernels.push(tmp_path, wait=True, poll_s=0) == 0
    names = [(name, body.get("slug") or body.get("kernelSlug")) for name, body in fake_kaggle.calls]
    assert names == [("SaveKernel", "someone/qlora-01-data-prep"), ("GetKernelSessionStatus", "qlora-01-data-prep"),
                     ("SaveKernel", "someone/qlora-02-train-qlora"), ("GetKernelSessionStatus", "qlora-02-train-qlora"),
                     ("SaveKernel", "someone/qlora-03-eval"), ("GetKernelSessionStatus", "qlora-03-eval"),
                     ("SaveKernel", "someone/qlora-04-export")]


@needs_notebooks
def test_push_stops_the_chain_when_a_run_fails(fake_kaggle, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KAGGLE_USERNAME", "someone")
    monkeypatch.setenv("KAGGLE_KEY", "0" * 32)
    fake_kaggle.statuses["qlora-01-data-prep"] = "ERROR"
    assert kernels.push(tmp_path, wait=True, poll_s=0) == 1
    assert [n for n, _ in fake_kaggle.calls].count("SaveKernel") == 1
    assert "ended ERROR" in capsys.readouterr().err


@needs_notebooks
def test_push_reports_a_server_side_rejection(fake_kaggle, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KAGGLE_USERNAME", "someone")
    monkeypatch.setenv("KAGGLE_KEY", "0" * 32)
    fake_kaggle.error = "Notebook not found"
    assert kernels.push(tmp_path, wait=False) == 1
    assert "push of someone/qlora-01-data-prep failed: Notebook not found" in capsys.readouterr().err


# --- dataset ----------------------------------------------------------------------------------------

def test_dataset_metadata_passes_the_clients_create_checks():
    meta = dataset.dataset_metadata("someone")
    owner, slug = meta["id"].split("/")
    assert owner == "someone" and slug == settings.DATASET_SLUG
    assert 6 <= len(slug) <= 50 and 6 <= len(meta["title"]) <= 50 and 20 <= len(meta["subtitle"]) <= 80
    assert len(meta["licenses"]) == 1


def test_the_wheelhouse_assumes_the_torch_of_requirements():
    # the closure is resolved against the torch this venv runs (requirements.txt's pin, a CPU build here)
    assert dataset.assumed_torch() == importlib.metadata.version("torch").split("+")[0]


def test_assumed_torch_without_a_pin_is_an_error(tmp_path):
    (tmp_path / "requirements.txt").write_text("transformers==5.23.0\n")
    with pytest.raises(ValueError, match="pins no torch"):
        dataset.assumed_torch(tmp_path)


# --- make fragment ----------------------------------------------------------------------------------

def test_make_fragment_targets(tmp_path):
    makefile = tmp_path / "Makefile"
    makefile.write_text(f"PY := .venv/bin/python\nsetup:\n\t@true\ninclude {ROOT / 'mk' / 'kaggle.mk'}\n")
    expected = {"kaggle-bundle": "nbutils.kaggle bundle", "kaggle-push": "nbutils.kaggle push",
                "kaggle-dataset": "nbutils.kaggle dataset", "kaggle-metadata": "nbutils.kaggle metadata",
                "kaggle-wheelhouse-check": "nbutils.kaggle wheelhouse-check"}
    for target, command in expected.items():
        out = subprocess.run(["make", "-n", "-f", str(makefile), target], capture_output=True, text=True, check=True)
        assert f".venv/bin/python -m {command}" in out.stdout, out.stdout + out.stderr


# --- badges, docs and the notebooks' generated parts -----------------------------------------------

BADGE_LINK = re.compile(r"\]\((https://(?:colab\.research\.google\.com|(?:www\.)?kaggle\.com)/[^)\s]+)\)")


def _notebook_targets(text: str) -> list[str]:
    return [u for u in BADGE_LINK.findall(text) if not u.endswith(".svg")]


def test_badge_urls_are_built_from_the_one_setting(monkeypatch):
    monkeypatch.setenv("NBUTILS_REPOSITORY", "fork/suite")
    monkeypatch.setenv("NBUTILS_BRANCH", "dev")
    md = badges.badges_markdown("02_train_qlora.ipynb")
    assert _notebook_targets(md) == [
        "https://colab.research.google.com/github/fork/suite/blob/dev/notebooks/02_train_qlora.ipynb",
        "https://kaggle.com/kernels/welcome?src=https://github.com/fork/suite/blob/dev/notebooks/02_train_qlora.ipynb"]
    assert "colab-badge.svg" in md and "open-in-kaggle.svg" in md
    assert "fork/suite@dev" in install.bootstrap_cell_source()


def test_docs_carry_the_generated_notebooks_table():
    assert badges.notebooks_table_markdown() in (ROOT / "docs" / "kaggle-colab.md").read_text(), \
        "docs/kaggle-colab.md is stale: paste `python -m nbutils.kaggle table`"


@pytest.mark.parametrize("source", ["README.md", "docs/kaggle-colab.md", "notebooks/*.py"])
def test_every_badge_points_at_a_notebook_that_exists(source):
    paths = sorted(ROOT.glob(source))
    if source == "notebooks/*.py" and not paths:
        pytest.skip("notebooks/*.py not written yet")
    targets = [(p, u) for p in paths for u in _notebook_targets(p.read_text())]
    assert targets, f"no Colab/Kaggle badge found in {source}: paste badges.badges_markdown / notebooks_table_markdown"
    for path, url in targets:
        m = re.search(r"github(?:\.com)?/([\w.-]+/[\w.-]+)/blob/([\w.-]+)/(notebooks/[\w.-]+\.ipynb)$", url)
        assert m, f"{path.name}: badge {url} does not point at a notebook in the repository"
        assert m.group(1) == settings.repository(), f"{path.name}: {url} is not {settings.repository()}"
        assert m.group(2) == settings.branch(), f"{path.name}: {url} is not on {settings.branch()}"
        assert (ROOT / m.group(3)).exists(), f"{path.name}: {m.group(3)} does not exist"


@needs_notebooks
def test_notebooks_carry_their_badges_and_the_bootstrap_cell():
    for nb in chain.STAGES:
        text = (ROOT / "notebooks" / f"{nb.notebook}.py").read_text()
        assert badges.badges_markdown(nb.notebook) in text, f"{nb.notebook}.py: badges differ; run python -m nbutils.kaggle sync"
        assert install.bootstrap_cell_source() in text, \
            f"{nb.notebook}.py: install cell differs from bootstrap_cell_source(); run python -m nbutils.kaggle sync"


def test_sync_rewrites_badges_and_the_install_cell(tmp_path, monkeypatch):
    (tmp_path / "notebooks").mkdir()
    old = ("# %% [markdown]\n# # Title\n#\n# [![Open in Colab](old)](old) [![Open in Kaggle](old)](old)\n\n# %%\n"
           "# Bootstrap nbutils (old)\nimport sys\nfrom nbutils.platform.install import ensure_packages\n\n"
           "ensure_packages()  # old\n\n# %%\nx = 1\n")
    for nb in chain.STAGES:
        (tmp_path / "notebooks" / f"{nb.notebook}.py").write_text(old)
    assert len(badges.sync_notebooks(tmp_path)) == len(chain.STAGES)
    text = (tmp_path / "notebooks" / "03_eval.py").read_text()
    assert badges.badges_markdown("03_eval") in text and install.bootstrap_cell_source() in text
    assert text.endswith("# %%\nx = 1\n") and "(old)" not in text
    assert badges.sync_notebooks(tmp_path) == []  # idempotent
