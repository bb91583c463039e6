"""get_secret: platform stores first, then the environment; never echoed; clear message when missing."""

import sys
import types

import pytest

from nbutils import secrets


@pytest.fixture()
def kaggle_env(monkeypatch):
    monkeypatch.setenv("KAGGLE_KERNEL_RUN_TYPE", "Interactive")
    module = types.ModuleType("kaggle_secrets")

    class UserSecretsClient:
        def get_secret(self, name):
            if name == "HF_TOKEN":
                return "kaggle-store-value"
            raise KeyError(name)

    module.UserSecretsClient = UserSecretsClient
    monkeypatch.setitem(sys.modules, "kaggle_secrets", module)


def test_kaggle_store_wins_over_environment(kaggle_env, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "env-value")
    assert secrets.get_secret("HF_TOKEN") == "kaggle-store-value"


def test_colab_userdata_then_environment(monkeypatch):
    monkeypatch.delenv("KAGGLE_KERNEL_RUN_TYPE", raising=False)
    monkeypatch.setenv("COLAB_RELEASE_TAG", "release")
    google = types.ModuleType("google")
    colab = types.ModuleType("google.colab")
    colab.userdata = types.SimpleNamespace(get=lambda name: {"WANDB_API_KEY": "colab-value"}.get(name))
    google.colab = colab
    monkeypatch.setitem(sys.modules, "google", google)
    monkeypatch.setitem(sys.modules, "google.colab", colab)
    assert secrets.get_secret("WANDB_API_KEY") == "colab-value"
    monkeypatch.setenv("OTHER_TOKEN", "from-env")
    assert secrets.get_secret("OTHER_TOKEN") == "from-env"


def test_missing_secret_says_where_to_add_it_and_never_shows_values(kaggle_env, monkeypatch, capsys):
    monkeypatch.delenv("NOPE_TOKEN", raising=False)
    with pytest.raises(secrets.SecretMissing, match="Add-ons > Secrets"):
        secrets.get_secret("NOPE_TOKEN")
    value = secrets.get_secret("HF_TOKEN")
    assert value not in capsys.readouterr().out


def test_redact_scrubs_fetched_values_and_token_shapes(kaggle_env):
    value = secrets.get_secret("HF_TOKEN")
    fake_hf = "hf_" + "x1" * 17
    config = {"note": f"used {value}", "hub_token": "abc", "nested": [f"token {fake_hf}"]}
    clean = secrets.redact(config)
    assert value not in str(clean) and fake_hf not in str(clean) and clean["hub_token"] == "***"
