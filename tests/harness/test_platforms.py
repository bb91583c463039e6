"""The platforms' facts: read from the images' own freezes (one source with the twin), torch's GPU stack on top,
modules found through their distributions, bad freeze lines named."""

import pytest

from nbutils.harness import platforms
from nbutils.harness.platforms import admits, module_of, platform, read_freeze
from nbutils.harness.twin import SNAPSHOTS, requirements


def test_the_kaggle_twin_is_the_kaggle_freeze_filtered():
    kaggle = platform("kaggle")
    for line in requirements(SNAPSHOTS / "numpy2-2026.txt"):
        name, version = line.split("==")
        assert kaggle.version(name) == version, f"numpy2-2026.txt {line} vs kaggle-image/freezes/kaggle.txt"


def test_what_the_hand_list_missed_is_known_timm_triton_torchao():
    kaggle = platform("kaggle")
    assert kaggle.version("timm") and kaggle.version("torchao") == "0.10.0"
    assert kaggle.version("triton") == ""  # the GPU image's, with its torch: known by name only
    assert kaggle.version("torch") == "2.10.0"  # the CPU freeze's 2.10.0+cpu, read as the GPU image's torch
    assert kaggle.version("huggingface_hub") == kaggle.version("Huggingface-Hub") == "1.10.1"
    assert kaggle.version("unsloth") is None and kaggle.version("bitsandbytes") is None
    assert platform("colab").version("peft") and platform("kaggle").python == (3, 12)


def test_modules_are_found_through_their_distributions():
    kaggle = platform("kaggle")
    assert kaggle.has_module("PIL") and kaggle.has_module("sklearn") and kaggle.has_module("google.colab")
    assert kaggle.has_module("json") and kaggle.has_module("torch")
    assert not kaggle.has_module("unsloth") and not kaggle.has_module("vllm")
    assert module_of("scikit-learn") == "sklearn" and module_of("sentence-transformers") == "sentence_transformers"


def test_a_freeze_line_that_is_not_a_package_is_named(tmp_path):
    freeze = tmp_path / "x.txt"
    freeze.write_text("# python: 3.12\nnumpy==2.0.0\nfoo @ git+https://x/foo\n-e ./local\n")
    with pytest.raises(ValueError, match=r"x.txt:4: '-e ./local'"):
        read_freeze(freeze)
    freeze.write_text("numpy==2.0.0\n")
    with pytest.raises(ValueError, match="no `# python: X.Y` line"):
        read_freeze(freeze)
    with pytest.raises(KeyError, match="known: kaggle, colab"):
        platforms.platform("paperspace")


def test_admits_reads_specifiers_and_local_versions():
    assert admits(">=0.34.0", "1.10.1") and admits("", "1.0") and admits(">=2.8", "2.10.0+cpu")
    assert admits(">=3.4.1,<4.0.0", "4.8.5") is False and admits("not a spec", "1.0") is None
