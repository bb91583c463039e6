"""The papermill-check runner on its gallery: every run-time check id caught with the right id and cell, the
command line, the report and JUnit files, nothing written outside the sandbox.

The run-time cases start one kernel each, once per module (the static checks: tests/harness/test_nbchecks.py).
"""

import os
import tempfile
from pathlib import Path

import nbformat
import pytest

from nbutils import chain, embedded
from nbutils.harness import runner
from tests.harness_gallery import make_gallery

ROOT = Path(__file__).resolve().parents[2]
GALLERY = Path(make_gallery.__file__).parent
EXPECTED = make_gallery.expected()
TOKEN = "tok_" + "abcdefgh12345"
# These start a Jupyter kernel (notebook execution): the full gate, not `make test-fast`.
kernel = pytest.mark.integration


def _failing(result):
    return {(p.check, p.cell) for p in result.problems if not p.allowed}


def test_committed_gallery_matches_its_generator(tmp_path):
    fresh = tmp_path / "gallery"
    make_gallery.build(fresh)
    for path in fresh.rglob("*.*"):
        committed = GALLERY / path.relative_to(fresh)
        assert committed.exists() and committed.read_text() == path.read_text(), \
            f"{committed} is stale: run python -m tests.harness_gallery.make_gallery"


def _outputs_check(tmp_path, *streams):
    from nbutils.harness import sandbox

    nb = make_gallery.notebook(["pass"])
    nb.cells[2].outputs = [nbformat.v4.new_output("stream", name=n, text=t) for n, t in streams]
    return [p.check for p in runner.runtime_checks("nb", nb, nb, sandbox.create(tmp_path, "nb"), None)]


def test_benign_warnings_and_progress_bars_are_not_tracebacks(tmp_path):
    bnb = ("Failed to load CPU gemm_4bit_forward from kernels-community: No module named 'kernels'. "
           "Please make sure you already `pip install kernels` and the kernels >= 0.11.1\n")
    bar = "\r 50%|#####     | 5/10 [00:01<00:01,  4.8it/s]\r100%|##########| 10/10 [00:02<00:00,  4.9it/s]\n"
    warn = "modeling_utils.py:3195: FutureWarning: `gradient_checkpointing_enable` is deprecated\n  warnings.warn(\n"
    assert _outputs_check(tmp_path, ("stderr", bnb), ("stderr", bar), ("stderr", warn)) == []


def test_fatal_signature_without_traceback_is_caught(tmp_path):
    text = "AttributeError: 'MessageFactory' object has no attribute 'GetPrototype'\n"
    assert _outputs_check(tmp_path, ("stderr", text)) == ["stderr-traceback"]


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    """Every run-time gallery notebook, run once under the simulation with the internet off."""
    upstream = tmp_path_factory.mktemp("upstream")
    (upstream / "manifest.json").write_text("{}")
    results = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NBUTILS_GALLERY_TOKEN", TOKEN)  # a secret the secret_in_output notebook prints
        for name in sorted(make_gallery.RUNTIME):
            mounts = [(upstream, "upstream")] if name == "read_only_input" else []
            budget = 3 if name == "time_budget" else None
            out = tmp_path_factory.mktemp(name)
            results[name], _ = runner.run_notebook(GALLERY / f"{name}.ipynb", out, {}, internet=False,
                                                    time_budget=budget, mounts=mounts)
    return results


@kernel
@pytest.mark.parametrize("name", sorted(make_gallery.RUNTIME))
def test_runtime_check_caught(runtime, name):
    result = runtime[name]
    assert _failing(result) == {EXPECTED[name]}, [str(p) for p in result.problems]
    assert result.status == "failed"


@kernel
def test_cell_error_names_cell_line_and_exception(runtime):
    [problem] = runtime["cell_error"].problems
    assert str(problem).startswith("cell-error cell_error.ipynb cell 2: ValueError: boom (at `raise ValueError('boom')`)")
    assert os.path.exists(runtime["cell_error"].executed)


@kernel
def test_network_attempt_is_refused_and_named(runtime):
    [problem] = runtime["network_access"].problems
    assert "0.0.0.1" in problem.what


@kernel
def test_secret_value_is_not_echoed_in_the_report(runtime):
    assert TOKEN not in str(runtime["secret_in_output"].problems[0])


def _tree(root: Path, recursive: bool = True) -> set[str]:
    if not root.exists():
        return set()
    paths = root.rglob("*") if recursive else root.iterdir()
    return {str(p) for p in paths if not {"__pycache__", ".pytest_cache", ".ruff_cache"} & set(p.parts)}


@kernel
def test_clean_notebooks_pass_and_nothing_escapes_the_sandbox(tmp_path, monkeypatch):
    # A fresh HOME and TMPDIR for this process: whatever the harness or a kernel writes outside --out lands
    # there (other work on this machine writes to the real /tmp and home at the same time).
    monkeypatch.setenv("NBUTILS_CACHE", os.environ.get("NBUTILS_CACHE") or str(embedded.cache_dir().parent))
    home, tmp, out = tmp_path / "home", tmp_path / "tmp", tmp_path / "out"
    home.mkdir(), tmp.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)
    watched = [(home, True), (tmp, True), (GALLERY, True), (ROOT / "runs", True), (ROOT / "notebooks", True),
               (ROOT, False)]
    before = set().union(*(_tree(p, r) for p, r in watched))
    results = runner.run([GALLERY / "clean_minimal.ipynb", GALLERY / "clean_files.ipynb"], out, {}, False, None)
    after = set().union(*(_tree(p, r) for p, r in watched))
    assert [r.status for r in results] == ["passed", "passed"], [str(p) for r in results for p in r.problems]
    assert not [p for r in results for p in r.problems]
    assert not after - before, sorted(after - before)[:10]
    box = out / "sandbox" / "clean_files"
    assert (box / "working" / "plot.png").exists() and list((box / "temp" / "tmpdir").iterdir())
    # The kernel's exit skips the final garbage collection but flushes what it would have: nothing lost.
    assert (box / "working" / "left_open.txt").read_text() == "line\n" * 500


@kernel
def test_a_twin_copy_goes_once_its_notebook_passed_and_stays_when_it_failed(tmp_path, monkeypatch):
    # A copy holds what the install cell put there (250-400 MB): eight kept copies filled CI's disk. The last
    # notebook's copy stays for the install cell's rerun (run_twins drops it after); a failed one stays for a look.
    def fake_twin_kernel(twin, box, ahead, shared=None, key=()):
        (box.root / "env" / "bin").mkdir(parents=True)
        return "python3", None, {}

    monkeypatch.setattr(runner, "_kernel", fake_twin_kernel)
    minimal, files, error = (GALLERY / f"{n}.ipynb" for n in ("clean_minimal", "clean_files", "cell_error"))
    runner.run([minimal, files], tmp_path / "a", {}, False, None, twin=object())
    assert [(tmp_path / "a" / "sandbox" / n / "env").exists() for n in ("clean_minimal", "clean_files")] == [False, True]
    assert (tmp_path / "a" / "sandbox" / "clean_minimal" / "working").exists()  # the outputs stay for the next one
    ran = runner.run([error, files], tmp_path / "b", {}, False, None, twin=object())
    assert len(ran) == 1 and ran[0].failing and (tmp_path / "b" / "sandbox" / "cell_error" / "env").exists()


@kernel
def test_missing_artifact(tmp_path):
    [result] = runner.run([GALLERY / f"{make_gallery.MISSING_ARTIFACT}.ipynb"], tmp_path, {}, False, None)
    assert _failing(result) == {EXPECTED[make_gallery.MISSING_ARTIFACT]}


def test_our_notebooks_pass_lint_without_allowances():
    results = runner.lint([ROOT / nb for nb in chain.notebook_paths()])
    assert all(not r.problems for r in results), [str(p) for r in results for p in r.problems]


def test_kernel_metadata_is_keyed_by_notebook_stem():
    meta = runner.kernel_metadata()
    assert list(meta) == sorted(nb.notebook for nb in chain.STAGES)
    assert all(meta[nb.notebook]["id"].endswith("/" + nb.slug) for nb in chain.STAGES)


def test_with_static_puts_static_problems_first_and_keeps_notebooks_that_did_not_run():
    from nbutils.harness.results import Result

    blocking, clean = GALLERY / "blocking_input.ipynb", GALLERY / "clean_minimal.ipynb"
    ran = runner.with_static([blocking, clean], lambda: [Result("blocking_input.ipynb [twin numpy1]", "passed")])
    assert [(r.notebook, r.status) for r in ran] == [("blocking_input.ipynb [twin numpy1]", "failed"),
                                                     ("clean_minimal.ipynb", "not run")]
    assert [p.check for p in ran[0].problems] == ["blocking-input"] and ran[1].problems == []


def test_cell_indexes_skip_the_cells_papermill_inserts():
    tagged = lambda *tags: {"metadata": {"tags": list(tags)}, "outputs": []}  # noqa: E731
    cells = [tagged("parameters"), tagged("injected-parameters"), tagged(), tagged()]
    cells[3]["outputs"] = [{"output_type": "error"}]
    assert runner._error_index(cells) == 3 and runner._original_index(cells, 3) == 2
    assert runner._original_index(cells, 1) is None and runner._original_index(cells, 9) is None


def test_an_internet_off_run_reports_network_tools_the_socket_guard_cannot_stop(tmp_path, monkeypatch):
    nb = make_gallery.notebook(["!wget -q https://example.org/weights.bin"])
    path = tmp_path / "fetch.ipynb"
    nbformat.write(nb, path)
    monkeypatch.setattr(runner, "_execute", lambda *a: None)  # the check is static: no kernel needed
    offline, _ = runner.run_notebook(path, tmp_path / "off", {}, False, None, [])
    assert [(p.check, p.cell, p.line) for p in offline.problems] == [("network-access", 2, 1)]
    online, _ = runner.run_notebook(path, tmp_path / "on", {}, True, None, [])
    assert online.problems == []



def test_chain_notebooks_find_their_inputs_by_auto_and_others_get_them_as_parameters(tmp_path, monkeypatch):
    """Every Kaggle run finds its upstream folders with "auto" (environment.find_upstream over the input root); the
    harness passed them as parameters, so the chain never went that way."""
    given = {}

    def fake_execute(path, executed, params, kernel, cwd, kwargs):  # a notebook that writes its stage's marker
        given[path.stem] = params
        if (stage := runner._stage(path.stem)) is not None:
            (cwd / stage.stage).mkdir()
            (cwd / stage.stage / stage.marker).write_text("{}")

    monkeypatch.setattr(runner, "_execute", fake_execute)
    paths = []
    for stem in ("01_data_prep", "02_train_qlora", "my_eval"):
        nb = make_gallery.notebook(['data_dir = "auto"'])
        nb.cells[-1].metadata["tags"] = ["parameters"]
        nbformat.write(nb, tmp_path / f"{stem}.ipynb")
        paths.append(tmp_path / f"{stem}.ipynb")
    results = runner.run(paths, tmp_path / "out", {}, False, None)
    assert [r.status for r in results] == ["passed"] * 3, [str(p) for r in results for p in r.problems]
    assert given["02_train_qlora"] == {}  # in the chain: its own search finds 01's mounted folder
    assert given["my_eval"] == {"data_dir": str(tmp_path / "out" / "sandbox" / "my_eval" / "input" / "qlora-01-data-prep"
                                                / "data_prep")}


def test_a_lookup_pip_retries_is_one_problem(tmp_path):
    box = runner.sandbox.create(tmp_path, "nb")
    nb = make_gallery.notebook(["import pip"])
    box.events.write_text('{"type": "network-access", "address": "pypi.org", "execution_count": null}\n' * 5)
    problems = runner.runtime_checks("nb.ipynb", nb, nb, box, None)
    assert [p.check for p in problems] == ["network-access"]
