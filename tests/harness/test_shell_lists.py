"""Shell lines read for what runs on a platform: `||`, `&&`, if/then/else/fi, tests the facts decide, %%bash."""

import pytest

from nbutils.harness.conditions import Evaluator
from nbutils.harness.install_lines import install_commands
from nbutils.harness.platforms import platform
from nbutils.harness.shell_lists import ShellReader, tokens


def reaches(text: str, on: str = "kaggle"):
    """(first word after the install, reach) per install command of one shell line."""
    cmds = install_commands(text, evaluator=Evaluator(platform(on)))
    return [(c.packages[0].spec if c.packages else "", c.reach) for c in cmds]


@pytest.mark.parametrize("line, runs", [
    ("!pip show unsloth || pip install unsloth", True),  # not on the image: show fails, the install runs
    ("!pip show torch || pip install torch", False),  # on the image: never
    ("!python -c 'import timm' || pip install timm", False),
    ("!python -c 'import unsloth' && pip install x || pip install unsloth", True),
    ("!pip show unsloth && pip install --upgrade unsloth", False),
    ('!if [ -n "$KAGGLE_KERNEL_RUN_TYPE" ]; then pip install a; fi', True),
    ('!if [ -z "$COLAB_RELEASE_TAG" ]; then pip install a; else pip install b; fi', False),
    ('![ -d /kaggle/input ] && pip install a', True),
    ('![ "$KAGGLE_KERNEL_RUN_TYPE" = Interactive ] && pip install a', False),
])
def test_tests_the_facts_decide(line, runs):
    spec, reach = reaches(line)[-1] if runs is not False else reaches(line)[0]
    assert bool(reach.never) is (runs is False), (line, reach)


def test_the_else_branch_of_a_shell_if():
    (_, a), (_, b) = reaches('!if [ -z "$COLAB_RELEASE_TAG" ]; then pip install a; else pip install b; fi')
    assert a.never and not b.never and "succeeds on Kaggle" not in b.never and b.because
    (_, a), (_, b) = reaches('!if [ -z "$COLAB_RELEASE_TAG" ]; then pip install a; else pip install b; fi', "colab")
    assert a.never and b.because


def test_what_follows_an_action_or_an_unknown_test():
    [(spec, reach)] = reaches("!command -v zstd >/dev/null 2>&1 || (apt-get -qq update && pip install zstandard)")
    assert spec == "zstandard" and reach.unless == ("`command -v zstd` fails",)
    [(_, first), (_, second)] = reaches("!pip install a==1 && pip install b==2")
    assert first == second and not second.unless  # an install is taken to succeed
    [_, (_, after_or)] = reaches("!pip install a==1 || pip install b==2")
    assert after_or.unless == ("`pip install a==1` fails",)


def test_a_bash_cell_is_one_script_across_lines():
    src = '%%bash\nif [ -n "$COLAB_GPU" ]; then\n  pip install a\nelse\n  pip install b\nfi\npip install c'
    cmds = install_commands(src, evaluator=Evaluator(platform("colab")))
    assert [(c.line, bool(c.reach.never)) for c in cmds] == [(2, False), (4, True), (6, False)]


def test_loops_are_stepped_through_not_lost():
    toks = tokens([(0, "for p in a b; do pip install $p; done; pip install c")])
    words = [w for w, _, _ in ShellReader(Evaluator(platform("kaggle")), toks).read()]
    assert ["pip", "install", "$p"] in words and ["pip", "install", "c"] in words
