"""The install cell's decisions per platform, without running pip."""

from pathlib import Path

import pytest

from nbutils.install import PINS, plan_install

OLD_KAGGLE = {**{n: v for n, v in PINS.items()}, "transformers": "4.51.0", "peft": None, "bitsandbytes": None}
CURRENT = dict(PINS)


def test_local_installs_nothing():
    assert plan_install("local", True, None, {}).source == "none"


def test_kaggle_with_dataset_installs_offline_from_it():
    plan = plan_install("kaggle", False, Path("/kaggle/input/qlora-nbutils/wheels"), OLD_KAGGLE)
    assert plan.source == "wheelhouse" and plan.pip_args[:1] == ["--no-index"]
    assert sorted(plan.packages) == sorted([f"transformers=={PINS['transformers']}", f"peft=={PINS['peft']}",
                                            f"bitsandbytes=={PINS['bitsandbytes']}"])


def test_kaggle_with_internet_and_no_dataset_uses_the_index():
    plan = plan_install("kaggle", True, None, OLD_KAGGLE)
    assert plan.source == "index" and not plan.pip_args and all("==" in p for p in plan.packages)


def test_kaggle_without_internet_or_dataset_says_what_to_do():
    with pytest.raises(RuntimeError, match="attach the 'qlora-nbutils' dataset .* or turn Internet on"):
        plan_install("kaggle", False, None, OLD_KAGGLE)


def test_colab_installs_only_what_is_missing_and_never_torch():
    plan = plan_install("colab", True, None, {**CURRENT, "bitsandbytes": None, "torch": "2.1.0"})
    assert plan.packages == [f"bitsandbytes=={PINS['bitsandbytes']}"]
    assert not any(p.startswith("torch") for p in plan.packages)


def test_up_to_date_image_installs_nothing():
    assert plan_install("kaggle", False, None, CURRENT).source == "none"
