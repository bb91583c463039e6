"""After pip: conflicts as one judged line each, imports checked in a fresh interpreter, errors that say what to do."""

import sys

import pytest

from nbutils.runtime import install_verify as iv

PIP_TAIL = """ERROR: pip's dependency resolver does not currently take into account all the packages that are installed.
sentence-transformers 4.1.0 requires transformers<5.0.0,>=4.41.0, but you have transformers 5.23.0 which is incompatible.
datasets 5.2.0 requires pyarrow>=24.0.0, but you have pyarrow 19.0.1 which is incompatible.
gallerypkg 1.0 requires nonexistent-dep, which is not installed.
Successfully installed transformers-5.23.0
"""


def test_each_conflict_is_one_line_judged_against_what_the_chain_uses():
    found = iv.conflicts(PIP_TAIL, ["datasets"])  # datasets is installed here: its requirements are walked
    assert [(c.who, c.matters) for c in found] == [("sentence-transformers", False), ("datasets", True),
                                                   ("gallerypkg", False)]
    assert str(found[0]).endswith("(does not matter to the chain: the notebooks never import it)")
    assert "matters: the chain uses it" in str(found[1])


def test_requirement_closure_follows_installed_metadata():
    closure = iv.requirement_closure(["transformers"])
    assert {"transformers", "huggingface-hub", "tokenizers", "numpy"} <= closure


def test_the_import_check_runs_torch_users_and_the_rest_in_two_interpreters_side_by_side(tmp_path, monkeypatch):
    groups = iv.probe_groups({"peft": "peft", "bitsandbytes": "bitsandbytes", "datasets": "datasets", "pip": "pip"})
    assert groups == [{"peft": "peft", "bitsandbytes": "bitsandbytes"}, {"datasets": "datasets", "pip": "pip"}]
    assert iv.probe_groups({"pip": "pip"}) == [{"pip": "pip"}]  # one interpreter when one half is empty
    pkg = tmp_path / "dies"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("import os\nos._exit(3)\n")  # kills its interpreter: only its half is lost
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setattr(iv, "probe_groups", lambda wanted: [{"dies": "dies"}, {"pip": "pip"}])
    res = iv.probe_imports(["dies", "pip"], {"dies": ["dies"], "pip": ["pip"]})
    assert res["dies"] == {"ok": False, "error": "the import check itself died: no output"} and res["pip"]["ok"]


def test_a_hung_import_check_stops_every_interpreter_and_names_the_packages():
    import subprocess

    import pytest

    procs = [(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True), group) for group in ({"slowpkg": "slowpkg"}, {"pip": "pip"})]
    with pytest.raises(RuntimeError, match=r"importing slowpkg in a fresh interpreter took over 1 s"):
        iv._run_probe(procs, timeout=1)
    assert [proc.poll() is not None for proc, _ in procs] == [True, True]  # the second one too, not left running


def test_closures_taken_together_read_each_packages_metadata_once(monkeypatch):
    reads = []
    real = iv._requires
    monkeypatch.setattr(iv, "_requires", lambda name: reads.append(name) or real(name))
    memo = {}
    assert "torch" in iv.requirement_closure(["peft"], memo)
    first = len(reads)
    assert "torch" in iv.requirement_closure(["accelerate"], memo)
    assert "torch" not in iv.requirement_closure(["pip"], memo)
    assert len(reads) < first + 3 and len(reads) == len(set(reads))  # accelerate's torch & co were read for peft


def test_a_module_that_no_longer_imports_is_named_with_its_error(tmp_path, monkeypatch):
    pkg = tmp_path / "brokenpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise ImportError('brokenpkg requires NumPy 2.0 or newer, found 1.26.4')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    res = iv.probe_imports(["brokenpkg", "pip"], {"brokenpkg": ["brokenpkg"], "pip": ["pip"]})
    assert res["brokenpkg"] == {"ok": False, "error": "ImportError: brokenpkg requires NumPy 2.0 or newer, found 1.26.4"}
    assert res["pip"]["ok"] and res["pip"]["version"] == res["pip"]["installed"]
    # Kept for the harness's post-cell hook, with the distribution and the version that was checked.
    assert iv.PROBED["brokenpkg"]["dist"] == "brokenpkg" and iv.PROBED["brokenpkg"]["at"] is None
    assert iv.PROBED["pip"] == {**res["pip"], "dist": "pip", "at": res["pip"]["installed"]}


def test_stale_modules_are_every_loaded_module_pip_replaced(monkeypatch):
    monkeypatch.setitem(sys.modules, "fakearrow", object())
    moved = {"fakearrow": ("19.0.1", "25.0.1"), "newpkg": (None, "1.0")}
    assert iv.stale_modules(moved, {"fakearrow": ["fakearrow"], "newpkg": ["newpkg"]}) == {"fakearrow": "fakearrow"}


def test_a_module_every_interpreter_loads_at_startup_is_never_stale(monkeypatch):
    # Found in a twin whose setuptools pip moved: setuptools' .pth loads _distutils_hack before any cell runs, so the
    # install cell said "restart the session and run this cell first", which cannot help.
    monkeypatch.setitem(sys.modules, "_distutils_hack", object())
    monkeypatch.setitem(sys.modules, "fakearrow", object())
    moved = {"setuptools": ("75.2.0", "84.2.1"), "fakearrow": ("19.0.1", "25.0.1")}
    tops = {"setuptools": ["_distutils_hack", "pkg_resources", "setuptools"], "fakearrow": ["fakearrow"]}
    assert iv.stale_modules(moved, tops) == {"fakearrow": "fakearrow"}


def test_errors_say_which_package_and_what_to_do():
    verdict = iv.Verdict(moved={"pyarrow": ("19.0.1", "25.0.1")}, stale={"pyarrow": "pyarrow"},
                         broken={"datasets": "ImportError: pyarrow requires NumPy 2.0 or newer, found 1.26.4"})
    text = "\n".join(verdict.errors("kaggle"))
    assert "datasets does not import in a fresh process" in text and "make kaggle-dataset" in text
    assert "pyarrow (19.0.1 -> 25.0.1) were loaded before this cell" in text and "restart the session" in text


@pytest.mark.parametrize("platform, menu", [("colab", "Runtime > Restart session"), ("kaggle", "Run > Restart"),
                                            ("local", "Kernel > Restart Kernel")])
def test_the_restart_advice_names_the_platforms_own_menu(platform, menu):
    """Colab has no Run > Restart: its menu is Runtime > Restart session."""
    verdict = iv.Verdict(moved={"pyarrow": ("19.0.1", "25.0.1")}, stale={"pyarrow": "pyarrow"},
                         mismatched={"peft": "imports 0.18 but 0.21.2 is installed"})
    errors = verdict.errors(platform)
    assert len(errors) == 2 and all(f"({menu})" in e for e in errors)


def test_modules_of_groups_import_names_by_canonical_distribution():
    given = {"yaml": ["PyYAML"], "_yaml": ["PyYAML"], "bs4": ["beautifulsoup4"], "google": ["protobuf", "Google_Auth"]}
    assert iv.modules_of(given) == {"pyyaml": ["yaml", "_yaml"], "beautifulsoup4": ["bs4"], "protobuf": ["google"],
                                    "google-auth": ["google"]}
    assert "pip" in iv.modules_of()["pip"]  # without an argument: this interpreter's installed distributions


def test_primary_module_of_a_distribution():
    tops = {"scikit-learn": ["sklearn"], "pyarrow": ["pyarrow", "_pyarrow_hidden"], "odd": ["a", "b"]}
    assert iv.primary_module("pyarrow", tops) == "pyarrow"
    assert iv.primary_module("scikit-learn", tops) == "sklearn"
    assert iv.primary_module("odd", tops) is None


def test_versions_read_from_metadata_folder_names_match_the_metadata(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for folder, name in (("a", "huggingface_hub-0.31.1.dist-info"), ("a", "notes.txt"), ("b", "huggingface_hub-2.4.0.dist-info"),
                         ("b", "Foo.Bar-1.0-py3.11.egg-info")):
        (tmp_path / folder / name).mkdir()
    names = iv.metadata_folders([str(tmp_path / "a"), str(tmp_path / "missing"), str(tmp_path / "b")])
    assert sorted(names) == ["Foo.Bar-1.0-py3.11.egg-info", "huggingface_hub-0.31.1.dist-info", "huggingface_hub-2.4.0.dist-info"]
    assert iv.versions_of_folders(names) == {"huggingface-hub": "0.31.1", "foo-bar": "1.0"}  # the first on the path wins
    # On this interpreter's own path the listing gives what the metadata says, for every distribution pip installed
    # (a source tree's own `name.egg-info`, as an editable install leaves it, carries no version in its name).
    listed = {n: v for n, v in iv.versions_of_folders(iv.metadata_folders()).items() if v}
    metadata = iv.distribution_versions()  # once: it reads every distribution's METADATA
    assert {n: v for n, v in metadata.items() if n in listed} == {n: v for n, v in listed.items() if n in metadata}
    assert {"torch", "transformers", "peft", "pip"} <= listed.keys()
