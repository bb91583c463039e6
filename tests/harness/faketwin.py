"""A cached Kaggle image twin in miniature, for the twin and shared-install tests."""

from nbutils.harness import twin


def fake_twin(tmp_path, monkeypatch):
    """A cached twin with one module and one script that names its interpreter by path: (twin, its venv)."""
    monkeypatch.setenv("NBUTILS_TWIN_CACHE", str(tmp_path / "cache"))
    t = twin.Twin("fake", tmp_path / "fake.txt", "k")
    venv = t.folder / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "lib").mkdir()
    (venv / "lib" / "mod.py").write_text("old")
    (venv / "bin" / "pip").write_text(f"#!{venv}/bin/python\n")
    return t, venv
