"""One problem on one line: where (cell, line), a condition the lint could not decide, the allowance tag."""

from nbutils.harness.problems import Problem


def test_a_problem_reads_as_one_line_with_its_place_and_condition():
    p = Problem("unpinned-install", "nb.ipynb", 4, "`!pip install -U timm` upgrades timm", "pin timm==1.0.26", line=7,
                condition="`is_t4`")
    assert str(p) == ("unpinned-install nb.ipynb cell 4 line 7 [conditional: runs only if `is_t4`]: "
                      "`!pip install -U timm` upgrades timm -- pin timm==1.0.26")
    p.happens_if, p.condition = "it needs another numpy", None
    assert " line 7 [conditional: happens only if it needs another numpy]: " in str(p)
    assert str(Problem("missing-kernelspec", "nb.ipynb", None, "w", "f", line=3)) == "missing-kernelspec nb.ipynb: w -- f"
    assert str(Problem("absolute-path", "nb.ipynb", 2, "w", "f", allowed=True)).endswith("cell 2: w -- f [allowed]")
