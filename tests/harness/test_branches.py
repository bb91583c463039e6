"""Which lines of a Python cell run on a platform: if/elif/else by their conditions, except by what the try
imports, function bodies when called, variables followed across cells and handed to the shell lines."""

from nbutils.harness.branches import CellWalker, python_source
from nbutils.harness.conditions import Evaluator
from nbutils.harness.platforms import platform


def walk(*cells, on="kaggle"):
    walker = CellWalker(Evaluator(platform(on)))
    return [walker.walk(c) for c in cells]


def test_shell_lines_become_placeholders_on_the_same_lines():
    src = "%%capture\nif x:\n    !pip install \\\n        a b\n    y = 1\nz = !ls"
    assert python_source(src).splitlines() == ["", "if x:", "    __nbshell__(2)", "", "    y = 1",
                                               "z = __nbshell__(5)"]
    assert python_source("%%bash\nif true; then pip install a; fi") is None  # not Python: read as shell


def test_an_environment_check_and_its_else_branch():
    [cell] = walk('import os\nif "COLAB_" not in "".join(os.environ.keys()):\n    !pip install unsloth\n'
                  'else:\n    !pip install protobuf\n!pip install x')
    assert "is false on Kaggle" in cell.at(2).never  # the non-Colab branch: Kaggle's image sets COLAB_RELEASE_TAG
    assert not cell.at(4).never and "COLAB_RELEASE_TAG" in cell.at(4).because[0]
    assert cell.at(5) == cell.at(0) and not cell.at(5).because


def test_find_spec_chains_with_elif():
    [cell] = walk('if importlib.util.find_spec("unsloth") is not None:\n    !pip install a\n'
                  'elif importlib.util.find_spec("torch") is None:\n    !pip install b\nelse:\n    !pip install c')
    assert cell.at(1).never and cell.at(3).never and not cell.at(5).never and len(cell.at(5).because) == 2


def test_an_undecided_condition_is_kept_as_written():
    [cell] = walk("if _cc >= 10:\n    !pip install a\nelse:\n    !pip install b")
    assert cell.at(1).unless == ("`_cc >= 10`",) and cell.at(3).unless == ("`_cc >= 10` is false",)


def test_except_runs_only_when_the_try_can_raise_there():
    [cell] = walk("try:\n    import numpy\n    v = f'numpy=={numpy.__version__}'\nexcept ImportError:\n"
                  "    !pip install numpy\ntry:\n    import unsloth\nexcept ImportError:\n    !pip install unsloth\n"
                  "try:\n    check()\nexcept Exception:\n    !pip install c")
    assert "cannot raise on Kaggle" in cell.at(4).never
    assert "raises on Kaggle" in cell.at(8).because[0]
    assert cell.at(12).unless == ("the `try` at line 10 raises",)


def test_function_bodies_run_when_called_and_keep_their_variables():
    [cell] = walk("def setup():\n    mode = 'x'\n    !pip install a\nmode = 'lora'\n!pip install {mode}")
    assert cell.at(2).unless == ("`setup()` is called",)
    assert cell.variables[4] == {"mode": "lora"}


def test_variables_are_followed_across_cells_and_through_undecided_branches():
    first, second = walk("_vllm, _triton = ('vllm==0.11.2', 'triton') if is_t4 else ('vllm==0.15.1', 'triton')\n"
                         "IN_COLAB = 'COLAB_' in ''.join(os.environ.keys())",
                         "if not IN_COLAB:\n    !pip install a\n!uv pip install {_triton} {_vllm}")
    assert second.at(1).never  # IN_COLAB is True on Kaggle too
    assert second.variables[2] == {"_triton": "triton", "IN_COLAB": "True"}  # _vllm has two values: not expanded


def test_a_cell_that_does_not_parse_runs_every_line():
    [cell] = walk("if x\n    !pip install a")
    assert not cell.at(1).never and not cell.at(1).unless
