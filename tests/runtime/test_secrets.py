"""get_secret: the platform's store first, then the environment; never echoed; says where to add a missing one."""

import sys
import types

import pytest

from nbutils.runtime import secrets

PLATFORM_VARS = ("KAGGLE_KERNEL_RUN_TYPE", "KAGGLE_URL_BASE", "KAGGLE_DATA_PROXY_TOKEN", "COLAB_RELEASE_TAG")


@pytest.fixture(autouse=True)
def clean(monkeypatch):
    for var in (*PLATFORM_VARS, "HF_TOKEN", "WANDB_API_KEY", "NOPE_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.setattr(secrets, "_SEEN", set())


class NotAttached(Exception):
    pass


@pytest.fixture()
def on_kaggle(monkeypatch):
    monkeypatch.setenv("KAGGLE_KERNEL_RUN_TYPE", "Batch")
    module = types.ModuleType("kaggle_secrets")

    class UserSecretsClient:
        def get_secret(self, name):
            if name == "HF_TOKEN":
                return "kaggle-store-value"
            raise NotAttached(f"secret {name} is not attached")

    module.UserSecretsClient = UserSecretsClient
    monkeypatch.setitem(sys.modules, "kaggle_secrets", module)


@pytest.fixture()
def on_colab(monkeypatch):
    monkeypatch.setenv("COLAB_RELEASE_TAG", "release-colab-test")
    google, colab = types.ModuleType("google"), types.ModuleType("google.colab")

    class SecretNotFoundError(Exception):
        pass

    def get(name):
        if name == "WANDB_API_KEY":
            return "colab-store-value"
        raise SecretNotFoundError(name)

    colab.userdata = types.SimpleNamespace(get=get)
    google.colab = colab
    monkeypatch.setitem(sys.modules, "google", google)
    monkeypatch.setitem(sys.modules, "google.colab", colab)


def test_kaggle_store_wins_over_the_environment(on_kaggle, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "env-value")
    assert secrets.get_secret("HF_TOKEN") == "kaggle-store-value"


def test_kaggle_falls_back_to_the_environment(on_kaggle, monkeypatch):
    monkeypatch.setenv("NOPE_TOKEN", "env-value")
    assert secrets.get_secret("NOPE_TOKEN") == "env-value"


def test_colab_userdata_then_the_environment(on_colab, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "env-value")
    assert secrets.get_secret("WANDB_API_KEY") == "colab-store-value"
    monkeypatch.setenv("HF_TOKEN", "from-env-value")
    assert secrets.get_secret("HF_TOKEN") == "from-env-value"


def test_local_reads_only_the_environment(monkeypatch):
    monkeypatch.setitem(sys.modules, "kaggle_secrets", None)  # importing it would fail, as locally
    monkeypatch.setenv("HF_TOKEN", "local-value")
    assert secrets.get_secret("HF_TOKEN") == "local-value"


@pytest.mark.parametrize("platform, where", [
    ("kaggle", r"Add-ons > Secrets, add NOPE_TOKEN, and tick it for this notebook"),
    ("colab", r"key icon in the left sidebar, add NOPE_TOKEN, and enable 'Notebook access'"),
    ("local", r"export NOPE_TOKEN=\.\.\."),
])
def test_missing_secret_says_where_to_add_it(platform, where, request):
    if platform != "local":
        request.getfixturevalue(f"on_{platform}")
    with pytest.raises(secrets.SecretMissing, match=where):
        secrets.get_secret("NOPE_TOKEN")
    assert secrets.get_secret("NOPE_TOKEN", required=False) is None


def test_messages_and_output_never_contain_values(on_kaggle, monkeypatch, capsys):
    monkeypatch.setenv("OTHER", "x")
    value = secrets.get_secret("HF_TOKEN")
    with pytest.raises(secrets.SecretMissing) as err:
        secrets.get_secret("NOPE_TOKEN")
    assert "NotAttached" in str(err.value)  # the store's answer, by type only
    captured = capsys.readouterr()
    assert value not in captured.out + captured.err + str(err.value)


def test_redact_scrubs_fetched_values_token_shapes_and_secret_keys(on_kaggle):
    value = secrets.get_secret("HF_TOKEN")
    fake_hf = "hf_" + "x1" * 17
    fake_gh = "ghp_" + "a" * 36
    config = {"note": f"used {value}", "hub_token": "abc", "wandb_api_key": "k" * 40,
              "nested": [f"token {fake_hf}", (f"Authorization: Bearer {'z' * 30}", fake_gh)],
              "max_new_tokens": 128, "pad_token": "<pad>", "eos_token": "</s>", "tokenizer": "gpt2"}
    clean = secrets.redact(config)
    text = str(clean)
    assert value not in text and fake_hf not in text and fake_gh not in text and "z" * 30 not in text
    assert clean["hub_token"] == "***" and clean["wandb_api_key"] == "***"
    # what a run config must keep
    assert clean["max_new_tokens"] == 128 and clean["pad_token"] == "<pad>" and clean["eos_token"] == "</s>"
    assert clean["tokenizer"] == "gpt2" and isinstance(clean["nested"][1], tuple)
    assert config["hub_token"] == "abc"  # a copy, the input is untouched
