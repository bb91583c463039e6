"""Hub dataset ids: `owner/name[:config][@split]`, the split chosen when there is no train, and what each failure
says (the hub is not reached: load_dataset is replaced by what it raises)."""

import pytest

from nbutils.data import hubdata, readers

ULTRACHAT = ["train_sft", "test_sft", "train_gen", "test_gen"]


@pytest.fixture
def hub(monkeypatch):
    """A fake load_dataset: gsm8k needs a config (main, socratic), ultrachat has the ULTRACHAT splits."""
    import datasets

    calls = []

    def load_dataset(path, name=None, split=None, **_):
        calls.append((path, name, split))
        if path == "openai/gsm8k" and name is None:
            raise ValueError("Config name is missing.\nPlease pick one among the available configs: ['main', "
                             "'socratic']\nExample of usage:\n\t`load_dataset('openai/gsm8k', 'main')`")
        names = ULTRACHAT if path.endswith("ultrachat_200k") else ["train", "test"]
        if split not in names:
            raise ValueError(f'Unknown split "{split}". Should be one of {names}.')
        return [{"prompt": f"{path} {name} {split}", "response": "a"}]

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    monkeypatch.setattr(hubdata, "unreachable", lambda timeout=3.0: None)
    return calls


def test_an_id_names_its_config_and_split():
    assert hubdata.parse("openai/gsm8k:main@test") == ("openai/gsm8k", "main", "test")
    assert hubdata.parse("openai/gsm8k") == ("openai/gsm8k", None, None)
    assert hubdata.parse("./data/x.jsonl") is None and hubdata.parse("a/b/c") is None
    assert readers.sniff_why("openai/gsm8k:main@test") == (
        "hf_hub", "no such file; looks like a hub dataset id (openai/gsm8k, config 'main', split 'test')")


def test_config_and_split_reach_load_dataset(hub):
    rows = list(readers.read("openai/gsm8k:main@test"))
    assert hub == [("openai/gsm8k", "main", "test")] and rows[0][2]["prompt"] == "openai/gsm8k main test"


def test_without_a_train_split_the_first_train_split_is_read(hub, capsys):
    rows = list(readers.read("HuggingFaceH4/ultrachat_200k"))
    assert rows[0][2]["prompt"].endswith("train_sft") and "read 'train_sft'" in capsys.readouterr().out


def test_a_missing_config_or_split_says_what_there_is_not_internet(hub):
    with pytest.raises(ValueError, match=r"several configs \(main, socratic\): name one, as openai/gsm8k:main") as e:
        list(readers.read("openai/gsm8k"))
    assert "internet" not in str(e.value)
    with pytest.raises(ValueError, match=r"no such split; it has train, test: name one, as openai/gsm8k:main@train"):
        list(readers.read("openai/gsm8k:main@validation"))


def test_only_a_connection_failure_gets_the_offline_advice(hub, monkeypatch):
    import datasets

    def unreachable(path, **_):
        raise ConnectionError(f"Couldn't reach '{path}' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", unreachable)
    with pytest.raises(ValueError, match="could not reach the Hugging Face Hub .*Without internet"):
        list(readers.read("someone/data"))
