"""The dry run fetches a model's light files only: config, tokenizer, generation config, never the weights."""

from nbutils.plan import fetch


def test_only_the_light_files_are_wanted():
    names = ["config.json", "tokenizer.json", "model.safetensors", "generation_config.json", "README.md"]
    assert fetch.wanted(names) == ["config.json", "generation_config.json", "tokenizer.json"]


def test_a_folder_is_copied_without_its_weights(tmp_path):
    src = tmp_path / "model"
    src.mkdir()
    for name in ("config.json", "tokenizer_config.json", "model.safetensors"):
        (src / name).write_text("{}")
    out = fetch.fetch(str(src), tmp_path / "light")
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "tokenizer_config.json"]
