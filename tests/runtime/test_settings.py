"""The project's addresses: the defaults, and each override in the order a fork or a Kaggle user relies on."""

import json

import pytest

from nbutils.runtime import settings

VARS = ("NBUTILS_REPOSITORY", "NBUTILS_REF", "KAGGLE_USERNAME", "KAGGLE_CONFIG_DIR", "XDG_CONFIG_HOME")


@pytest.fixture
def clean(monkeypatch, tmp_path):
    for name in VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return monkeypatch


def test_defaults_then_environment_overrides(clean):
    assert settings.repository() == settings.REPOSITORY
    clean.setenv("NBUTILS_REPOSITORY", "me/fork")
    assert settings.repository() == "me/fork"


def test_the_install_ref_is_the_tag_of_the_package_version_unless_overridden(clean):
    import importlib.metadata

    assert settings.ref() == f"v{importlib.metadata.version('nbutils')}"
    clean.setenv("NBUTILS_REF", "0123abc")  # a commit, for a notebook built from one
    assert settings.ref() == "0123abc"


def test_kaggle_owner_env_then_kaggle_json_then_default(clean, tmp_path):
    assert settings.kaggle_owner() == settings.KAGGLE_OWNER
    config = tmp_path / "cfg"
    config.mkdir()
    (config / "kaggle.json").write_text(json.dumps({"username": "from-json", "key": "x"}))
    clean.setenv("KAGGLE_CONFIG_DIR", str(config))
    assert settings.kaggle_owner() == "from-json"
    clean.setenv("KAGGLE_USERNAME", "from-env")
    assert settings.kaggle_owner() == "from-env"


def test_kaggle_config_dir_follows_the_clients_rules(clean, tmp_path):
    assert settings.kaggle_config_dir() == tmp_path / "home" / ".config" / "kaggle"
    clean.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert settings.kaggle_config_dir() == tmp_path / "xdg" / "kaggle"
    (tmp_path / "home" / ".kaggle").mkdir(parents=True)
    assert settings.kaggle_config_dir() == tmp_path / "home" / ".kaggle"
    clean.setenv("KAGGLE_CONFIG_DIR", str(tmp_path / "explicit"))
    assert settings.kaggle_config_dir() == tmp_path / "explicit"


def test_a_broken_kaggle_json_falls_back_to_the_default(clean, tmp_path):
    clean.setenv("KAGGLE_CONFIG_DIR", str(tmp_path))
    (tmp_path / "kaggle.json").write_text("{not json")
    assert settings.kaggle_owner() == settings.KAGGLE_OWNER
