"""Install lines read as a shell reads them, and the static checks judged by what an install can change."""

import pytest

from nbutils.harness.install_lines import install_commands, shell_lines
from nbutils.harness.nbchecks import check_cells


def packages(source, base=None):
    return [(p.name, p.pinned) for c in install_commands(source, base) for p in c.packages]


def checks(*sources):
    return [(p.check, p.cell) for p in check_cells("nb", [{"cell_type": "code", "source": s} for s in sources])]


def test_continued_lines_are_one_command_with_every_package():
    src = "%%capture\n!uv pip install -qqq \\\n    torch>=2.4 'transformers>=4.50,<5' \\\n    peft==0.21.2\nimport os"
    assert packages(src) == [("torch", False), ("transformers", False), ("peft", True)]
    assert shell_lines(src) == {0, 1, 2, 3}  # the continuations are shell too, not Python


def test_a_comment_after_the_packages_is_not_read_as_packages():
    [cmd] = install_commands("!pip install --no-deps --upgrade timm # Only for Gemma 3N")
    assert [p.name for p in cmd.packages] == ["timm"] and cmd.no_deps and cmd.upgrade


def test_quoting_keeps_a_spec_whole_and_a_hash_inside_quotes_is_not_a_comment():
    src = """!pip install "nbutils @ git+https://github.com/a/b@main#egg=nbutils" 'pandas>=2, <3'"""
    assert packages(src) == [("nbutils", True), ("pandas", False)]


@pytest.mark.parametrize("line", ["%pip install -q peft==0.21.2", "!pip3 install -q peft==0.21.2",
                                  "!python -m pip install -q peft==0.21.2", "!{sys.executable} -m pip install peft==0.21.2",
                                  "!uv pip install --system peft==0.21.2", "!PIP_NO_INDEX=1 pip -q install peft==0.21.2",
                                  "!pip install -q peft==0.21.2 2>&1 | tail -n 1"])
def test_every_way_of_calling_pip(line):
    assert packages(line) == [("peft", True)]


def test_commands_joined_by_separators_are_read_separately():
    cmds = install_commands("!pip install -q peft==0.21.2 && pip install -U datasets; echo done")
    assert [(c.names, c.upgrade) for c in cmds] == [({"peft"}, False), ({"datasets"}, True)]


def test_options_with_values_are_not_packages():
    src = "!pip install --index-url https://x/simple -f ./wheels --target=site --no-deps peft==0.21.2"
    assert packages(src) == [("peft", True)]


def test_requirement_files_are_read_from_the_notebook_folder(tmp_path):
    (tmp_path / "requirements.txt").write_text("# pins\ntransformers==5.23.0\ndatasets>=4  # loose\n-e .\n")
    [cmd] = install_commands("!pip install -r requirements.txt", tmp_path)
    assert [(p.name, p.pinned) for p in cmd.packages] == [("transformers", True), ("datasets", False)]
    assert not cmd.unknown
    [missing] = install_commands("!pip install -r other.txt", tmp_path)
    assert missing.unknown and missing.requirement_files == ["other.txt"]


def test_wheels_variables_and_subprocess_calls():
    assert packages("!pip install ./dist/nbutils-0.1.0-py3-none-any.whl $w") == [("nbutils", True), (None, False)]
    [cmd] = install_commands('subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", *args])')
    assert cmd.no_deps and cmd.unknown


def test_python_lines_are_not_installs():
    assert install_commands("x = 'pip install torch'\n# !pip install torch\nprint('!pip install x')") == []


# --- the checks, judged by what an install can change -------------------------------------------

def test_no_deps_install_of_a_package_never_imported_is_not_stale():
    # Not stale (nothing imported timm), and not an import-before-install (--no-deps moves timm alone); but the
    # Kaggle image ships timm, and the upgrade moves it: unpinned.
    assert checks("import torch", "!pip install --no-deps --upgrade timm # Only for Gemma 3N") == [("unpinned-install", 1)]


def test_no_deps_install_of_an_imported_package_is_stale():
    assert checks("import timm", "!pip install --no-deps -U timm==1.0.0") == [("stale-import", 1)]


def test_install_with_dependencies_after_heavy_imports_flags_the_import_cell():
    cells = ("import numpy as np\nimport pandas as pd", "x = 1", "!pip install -q datasets==5.2.0")
    assert checks(*cells) == [("import-before-install", 0)]
    # Whether datasets 5.2.0 brings another numpy or pyarrow only its requirements tell: said, not asserted.
    [p] = check_cells("nb", [{"cell_type": "code", "source": s} for s in cells])
    assert p.happens_if.startswith("what that install brings requires another numpy, pandas or a library under it")
    assert "[conditional: happens only if" in str(p) and p.condition is None


def test_the_notebooks_install_call_counts_as_an_install():
    assert checks("import pandas as pd", "from nbutils.runtime.install import ensure_packages\nensure_packages()") == [
        ("import-before-install", 0)]


def test_imports_after_the_install_are_fine():
    assert checks("!pip install -q datasets==5.2.0", "import numpy as np\nimport pandas as pd") == []


def test_unpinned_torch_range_on_a_continued_line_is_found_with_its_capture():
    src = "%%capture\n!uv pip install -qqq \\\n    'torch>=2.4' xformers==0.0.33 peft==0.21.2"  # xformers: one torch
    assert sorted(checks(src)) == [("hidden-install-output", 0), ("unpinned-install", 0)]
    assert checks(src.replace(" xformers==0.0.33", "")) == [("hidden-install-output", 0)]  # peft takes any torch>=1.13
