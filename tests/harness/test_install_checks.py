"""The install checks judged by what each line does on the image: moved or left alone, the message naming the line,
quoting it as written, saying what a background run does and the fix for that line."""

import pytest

from nbutils.harness import install_checks as ic
from nbutils.harness.install_lines import install_commands
from nbutils.harness.nbchecks import check_cells
from nbutils.harness.platforms import platform

KAGGLE = platform("kaggle")


def how(line: str, drift: str = "") -> dict:
    [cmd] = install_commands(line)
    return {m.pkg.name: m.how for m in ic.moved(cmd, KAGGLE, drift)}


@pytest.mark.parametrize("line, expected", [
    ("!pip install --no-deps --upgrade timm", {"timm": "upgrade"}),
    ('!pip install --no-deps --upgrade "torchao>=0.16.0"', {"torchao": "excluded"}),  # Kaggle has 0.10.0
    ('!pip install "datasets>=3.4.1,<4.0.0" jiwer', {"datasets": "excluded"}),
    ("!pip install torch torchvision xformers --index-url https://download.pytorch.org/whl/cu128",
     {"torch": "open", "torchvision": "open"}),  # xformers is new: pip resolves torch again
    ('!pip install "triton>=3.4.0" torchvision unsloth', {"triton": "open", "torchvision": "open"}),  # unsloth: too
    ('!pip install triton "huggingface_hub>=0.34.0" "datasets==4.3.0"', {}),  # nothing there needs another torch
    ('!pip install sentencepiece protobuf "datasets==4.3.0" hf_transfer', {}),  # left open: only requirements tell
    ("!pip install langid", {}),  # on the image, nothing else asked for: pip leaves it alone
    ("!pip install --no-deps accelerate peft unsloth", {}),  # --no-deps: what is there stays
    ('!pip install --no-deps transformers==5.10.1 "tokenizers>=0.22.0,<=0.23.0"', {}),  # Kaggle's 0.22.2 fits
    ("!pip install protobuf==5.29.5 unsloth", {}),  # pinned: one version, moved on purpose
    ("!pip install bitsandbytes unsloth", {}),  # not on the image
])
def test_what_an_install_moves_on_kaggle(line, expected):
    assert how(line) == expected


def test_the_message_names_the_line_quotes_it_and_pins_to_the_images_version():
    src = '%%capture\nimport os\n!pip install -U sentencepiece "datasets>=3.4.1,<4.0.0" "huggingface_hub>=0.34.0"'
    [p] = [p for p in check_cells("nb", [{"cell_type": "code", "source": src}]) if p.check == "unpinned-install"]
    assert (p.cell, p.line, p.condition) == (0, 3, None)
    assert p.what.startswith('`!pip install -U sentencepiece "datasets>=3.4.1,<4.0.0" "huggingface_hub>=0.34.0"` installs')
    assert "huggingface_hub>=0.34.0 (upgraded past Kaggle's 1.10.1 to the newest release it allows" in p.what
    assert "datasets>=3.4.1,<4.0.0 (Kaggle's 4.8.5 is outside it" in p.what and "huggingface-hub" not in str(p)
    assert "on a background run the version depends on the day" in p.what
    assert p.fix.startswith("pin sentencepiece==0.2.1 huggingface_hub==1.10.1 (Kaggle's versions")
    assert "pin datasets to the one version you tested: Kaggle's 4.8.5 is outside >=3.4.1,<4.0.0" in p.fix


def test_a_torch_reinstall_is_to_be_dropped_and_a_range_outside_the_image_pinned_to_what_was_tested():
    src = ("!pip install -U torch torchvision torchaudio --index-url https://download.pytorch.org/whl/cu128\n"
           "!pip install torch xformers\n!pip install --no-deps --upgrade 'torchao>=0.16.0'\n"
           "!pip install torch torchvision xformers --index-url https://download.pytorch.org/whl/cu128")
    problems = [p for p in check_cells("nb", [{"cell_type": "code", "source": src}]) if p.check == "unpinned-install"]
    assert [p.line for p in problems] == [1, 2, 3, 4]
    assert problems[0].fix == "drop this line"
    assert problems[3].fix == "drop this line; install xformers on its own, pinned to the build for the image's torch 2.10.0"
    assert problems[1].fix.startswith("drop torch from this line") and "torch 2.10.0" in problems[1].fix
    assert problems[2].fix == "pin torchao to the one version you tested: Kaggle's 0.10.0 is outside >=0.16.0"


def test_a_conditional_install_carries_its_condition_and_a_decided_one_says_why_it_runs():
    src = ('import os\nif is_t4:\n    !pip install -U timm\nif "COLAB_" in "".join(os.environ.keys()):\n'
           '    !pip install -U einops\nif "KAGGLE_URL_BASE" not in os.environ:\n    !pip install -U omegaconf')
    problems = [p for p in check_cells("nb", [{"cell_type": "code", "source": src}]) if p.check == "unpinned-install"]
    assert [(p.line, p.condition) for p in problems] == [(3, "`is_t4`"), (5, None)]  # omegaconf: never on Kaggle
    assert "[conditional: runs only if `is_t4`]" in str(problems[0])
    assert "this line runs on Kaggle" in problems[1].what and "COLAB_RELEASE_TAG" in problems[1].what


def test_a_continued_command_is_reported_on_the_line_of_the_package():
    src = '!uv pip install -qqq \\\n    unsloth bitsandbytes \\\n    "triton>=3.4.0" torchvision'
    [p] = check_cells("nb", [{"cell_type": "code", "source": src}])
    assert p.line == 3 and p.what.startswith('`"triton>=3.4.0" torchvision`')


def test_after_an_eager_upgrade_a_range_can_have_moved_and_a_bare_name_cannot():
    assert how('!pip install --no-deps "tokenizers>=0.22.0,<=0.23.0" accelerate', "x") == {"tokenizers": "drift"}
    src = '!uv pip install --upgrade unsloth\n!pip install "huggingface_hub>=1.5.0,<2.0" langid'
    first, second = check_cells("nb", [{"cell_type": "code", "source": src}])
    assert first.line == 1 and "uv's `--upgrade` is eager" in first.what and first.fix.startswith("drop --upgrade")
    assert second.line == 2 and "but the install in cell 0 line 1 upgraded everything under it" in second.what
    assert "langid (" not in second.what
    plain = src.replace("uv pip install --upgrade", "pip install")  # pip resolves what unsloth needs, no more
    assert check_cells("nb", [{"cell_type": "code", "source": plain}]) == []


@pytest.mark.parametrize("line, eager", [
    ("!uv pip install --upgrade unsloth", True), ("!pip install -U --upgrade-strategy eager unsloth", True),
    ("!pip install -U unsloth", False), ("!uv pip install --upgrade --no-deps unsloth", False),
    ("!VAR=1 uv pip install -U unsloth", True), ("!uv pip install unsloth", False)])
def test_which_upgrades_are_eager(line, eager):
    [cmd] = install_commands(line)
    assert ic.eager(cmd) is eager


def test_stale_import_names_both_cells_and_lines():
    cells = [{"cell_type": "code", "source": s} for s in ("import os\nimport peft", "x = 1\n!pip install -U peft==0.21.2")]
    [p] = check_cells("nb", cells)
    assert (p.check, p.cell, p.line) == ("stale-import", 1, 2) and "after cell 0 imported peft (line 2)" in p.what


def test_stale_import_above_an_install_in_the_same_cell():
    """Imports were recorded only after a cell's install checks, so one above the install in its own cell went unseen."""
    [p] = check_cells("nb", [{"cell_type": "code", "source": "import os\nimport peft\n!pip install -U peft==0.21.2"}])
    assert (p.check, p.cell, p.line) == ("stale-import", 0, 3) and "after this cell imported peft (line 2)" in p.what
    assert check_cells("nb", [{"cell_type": "code", "source": "!pip install -U peft==0.21.2\nimport peft"}]) == []
    nested = "if flag:\n    import peft\n!pip install -U peft==0.21.2\nimport peft"  # the first import by line counts
    assert [(p.check, p.line, p.condition) for p in check_cells("nb", [{"cell_type": "code", "source": nested}])] == [
        ("stale-import", 3, None)]


def test_a_no_deps_install_from_git_changes_that_package_alone():
    cells = [{"cell_type": "code", "source": s} for s in
             ("import numpy", "!uv pip install --force-reinstall --no-deps git+https://github.com/unslothai/unsloth-zoo")]
    assert check_cells("nb", cells) == []


def test_changeable_modules_is_everything_unless_no_deps_and_known():
    pinned = install_commands("!pip install --no-deps scikit-learn==1.5.0 pyyaml==6.0")
    assert ic.changeable_modules(pinned, calls_installer=False) == {"sklearn", "yaml"}
    assert ic.changeable_modules(pinned, calls_installer=True) is None  # the install step brings anything
    assert ic.changeable_modules(install_commands("!pip install scikit-learn==1.5.0"), False) is None


def test_captured_installs_are_listed_by_line():
    src = "%%capture\n!pip install a==1\nif False:\n    x = 1\n!pip install b==2"
    [p] = check_cells("nb", [{"cell_type": "code", "source": src}])
    assert (p.check, p.line) == ("hidden-install-output", 1) and "lines 2, 5 print" in p.what


def test_a_range_after_an_install_of_the_same_package_is_judged_against_what_that_left():
    fits = '!pip install --no-deps -U "torchao>=0.16.0,<0.18.0"\n!pip install --no-deps "torchao<0.18.0" einx'
    assert [p.line for p in check_cells("nb", [{"cell_type": "code", "source": fits}])] == [1]  # line 2 keeps it
    kept = '!pip install protobuf "datasets==4.3.0" "huggingface_hub>=0.34.0"\n!pip install "huggingface_hub>=1.5.0,<2.0"'
    assert check_cells("nb", [{"cell_type": "code", "source": kept}]) == []  # Kaggle's 1.10.1 fits both: it stays
    moves = '!pip install -U "huggingface_hub>=0.34.0"\n!pip install "huggingface_hub>=1.5.0,<2.0"'
    second = [p for p in check_cells("nb", [{"cell_type": "code", "source": moves}]) if p.line == 2]
    assert second and "the install in cell 0 line 1 installs it too" in second[0].what
    assert second[0].fix == "pin huggingface_hub to the version you tested (the install in cell 0 line 1 installs it too)"
    assert ic.narrower(">=0.16.0,<0.18.0", "<0.18.0") and not ic.narrower(">=0.34.0", ">=1.5.0,<2.0")


def test_percent_pip_inside_a_branch_on_the_python_version():
    src = "import sys\nif sys.version_info < (3, 11):\n    %pip install -U timm\nelse:\n    %pip install -U einops"
    [p] = check_cells("nb", [{"cell_type": "code", "source": src}])  # Kaggle runs Python 3.12: only the else
    assert (p.line, p.condition) == (5, None) and "Kaggle runs Python 3.12" in p.what
