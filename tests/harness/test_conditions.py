"""Conditions decided from a platform's facts: each form of environment-variable check, find_spec, sys.version_info,
paths, followed variables; what the facts cannot decide stays undecided."""

import ast

import pytest

from nbutils.harness.conditions import Evaluator, Reach
from nbutils.harness.platforms import platform


def truth(expr: str, on: str = "kaggle", **scope):
    ev = Evaluator(platform(on))
    for name, value in scope.items():
        ev.scope[name] = ev.value(ast.parse(repr(value), mode="eval").body)
    return ev.truth(ast.parse(expr, mode="eval").body)[0]


@pytest.mark.parametrize("expr, kaggle, colab", [
    # Kaggle's image is Colab's underneath: a COLAB_ variable is set on both.
    ('"COLAB_" in "".join(os.environ.keys())', True, True),
    ('"COLAB_" not in "".join(os.environ.keys())', False, False),
    ('any(k.startswith("COLAB_") for k in os.environ)', True, True),
    ('"KAGGLE_KERNEL_RUN_TYPE" in os.environ', True, False),
    ('os.environ.get("KAGGLE_KERNEL_RUN_TYPE") == "Batch"', True, False),
    ('os.getenv("KAGGLE_KERNEL_RUN_TYPE", "") == "Interactive"', False, False),
    ('"KAGGLE_URL_BASE" in os.environ.keys()', True, False),
    ('bool(os.environ.get("KAGGLE_DATA_PROXY_TOKEN"))', None, None),  # a call not followed: undecided
    ('os.environ.get("KAGGLE_DATA_PROXY_TOKEN") is not None', True, False),
    ('"COLAB_GPU" in os.environ', None, True),  # not known on Kaggle
    ('"MY_FLAG" in os.environ', None, None),
])
def test_environment_variable_checks(expr, kaggle, colab):
    assert (truth(expr), truth(expr, "colab")) == (kaggle, colab)


@pytest.mark.parametrize("expr, expected", [
    ('importlib.util.find_spec("torch") is None', False),
    ('importlib.util.find_spec("unsloth") is None', True),
    ('find_spec("google.colab") is not None', True),
    ('importlib.util.find_spec("torch") is None or "COLAB_" in "".join(os.environ.keys())', True),
    ('importlib.util.find_spec("unsloth") is None and is_t4', None),
    ('sys.version_info >= (3, 11)', True),
    ('sys.version_info[:2] == (3, 12)', True),
    ('sys.version_info.minor < 12', False),
    ('sys.version_info >= (3, 12, 4)', None),  # the image's micro version is not known
    ('os.path.exists("/kaggle/input")', True),
    ('Path("/content").exists()', None),
    ('not IN_COLAB', False),
    ('mode == "lora"', None),
])
def test_find_spec_version_paths_and_variables(expr, expected):
    assert truth(expr, IN_COLAB=True) == expected


def test_a_decision_keeps_the_fact_that_made_it():
    ev = Evaluator(platform("kaggle"))
    value, facts = ev.truth(ast.parse('"COLAB_" in "".join(os.environ.keys())', mode="eval").body)
    assert value is True and "COLAB_RELEASE_TAG" in facts[0]
    _, facts = ev.truth(ast.parse('importlib.util.find_spec("unsloth") is None', mode="eval").body)
    assert facts == ("unsloth is not on Kaggle's image",)


def test_reach_under_a_branch():
    assert Reach().under("`x`", "x true", "x false", None, ()).unless == ("`x`",)
    assert Reach().under("`x`", "x true", "x false", False, ("fact",)).never == "x false, since fact"
    assert Reach().under("`x`", "x true", "x false", True, ("fact",)).because == ("x true, since fact",)
    inner = Reach(unless=("`a`",)).within(Reach(because=("b",)))
    assert inner == Reach(unless=("`a`",), because=("b",))
    assert Reach().within(Reach(never="no")).never == "no"
