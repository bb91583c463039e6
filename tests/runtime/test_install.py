"""The install cell's decisions per platform (no pip runs), run_install's checks, and where ensure_packages installs from
(the bootstrap cell itself: test_install_bootstrap.py)."""

import subprocess
import sys
import types
from pathlib import Path

import pytest

from nbutils.runtime import install, settings
from nbutils.runtime.install import plan_install
from nbutils.runtime.packages import PINS

# A Kaggle image as it tends to be: torch, older transformers, no peft/bitsandbytes; nbutils bootstrapped.
OLD_KAGGLE = {**PINS, "transformers": "4.51.0", "datasets": "3.6.0", "peft": None, "bitsandbytes": None,
              "torch": "2.6.0+cu124", "nbutils": "0.1.0"}
CURRENT = {**PINS, "torch": "2.13.0", "nbutils": "0.1.0"}
DATASET = Path("/kaggle/input/qlora-nbutils")


def expected(*names):
    return [f"{n}=={PINS[n]}" for n in names]


def test_local_installs_nothing_even_with_old_packages():
    plan = plan_install("local", True, None, {"transformers": "4.0"})
    assert plan.source == "none" and plan.packages == []


def test_kaggle_with_dataset_installs_offline_from_it_and_holds_torch():
    plan = plan_install("kaggle", False, DATASET, OLD_KAGGLE)
    assert plan.source == "wheelhouse"
    assert plan.pip_args == ["--no-index", "--find-links", str(DATASET)]
    assert sorted(plan.packages) == sorted(expected("transformers", "peft", "bitsandbytes", "datasets"))
    assert plan.constraints == {"torch": "==2.6.0+cu124"}
    assert "--no-index" in plan.command("c.txt") and plan.packages[0] in plan.command("c.txt")


def test_kaggle_prefers_the_dataset_even_with_internet():
    assert plan_install("kaggle", True, DATASET, OLD_KAGGLE).source == "wheelhouse"


def test_kaggle_with_internet_and_no_dataset_uses_the_index_pinned():
    plan = plan_install("kaggle", True, None, OLD_KAGGLE)
    assert plan.source == "index" and plan.pip_args == []
    assert all("==" in p for p in plan.packages)


def test_kaggle_without_internet_or_dataset_says_what_to_do():
    with pytest.raises(RuntimeError, match=r"attach the 'qlora-nbutils' dataset .*Internet on"):
        plan_install("kaggle", False, None, OLD_KAGGLE)


def test_kaggle_offline_is_fine_when_nothing_is_needed():
    assert plan_install("kaggle", False, None, CURRENT).source == "none"


def test_colab_installs_only_what_is_missing_and_never_torch():
    plan = plan_install("colab", True, None, {**CURRENT, "bitsandbytes": None, "torch": "2.1.0"})
    assert plan.packages == expected("bitsandbytes")
    assert not any(p.startswith(("torch", "nvidia", "triton")) for p in plan.packages)


def test_colab_without_nbutils_installs_it_from_the_repository():
    plan = plan_install("colab", True, None, {**CURRENT, "nbutils": None})
    assert plan.packages == [f"nbutils @ git+https://github.com/{settings.repository()}@{settings.ref()}"]


def test_kaggle_without_nbutils_takes_it_from_the_dataset():
    plan = plan_install("kaggle", False, DATASET, {**CURRENT, "nbutils": None})
    assert plan.packages == ["nbutils"] and plan.source == "wheelhouse"


def test_transformers_is_pinned_exactly_others_need_a_minimum():
    newer = {**CURRENT, "transformers": "5.30.0", "peft": "0.30.0", "accelerate": "1.10.1"}
    assert plan_install("kaggle", True, None, newer).packages == expected("transformers")
    assert install.needs_install("peft", "0.17.9") and not install.needs_install("peft", "0.18.0")
    assert install.needs_install("datasets", "4.7.0rc1") is False  # pre-release of the minimum counts as it


def test_colabs_older_datasets_and_pyarrow_get_the_pins_not_the_newest_release():
    """Colab's datasets 4.0.0 and pyarrow 18.1.0 are below what trl 1.16 and datasets 5.2 require: left alone as
    `>=minimum`, pip moved them to whatever was newest that day; now they are installed at their pins."""
    from nbutils.harness.platforms import platform
    from nbutils.runtime.packages import NEEDED

    colab = platform("colab")
    plan = plan_install("colab", True, None, {**{n: colab.version(n) for n in NEEDED}, "nbutils": "0.1.0",
                                              "torch": colab.version("torch"), "numpy": colab.version("numpy")})
    assert set(expected("datasets", "pyarrow")) <= set(plan.packages)
    assert not any(k.startswith(("datasets", "pyarrow")) for k in plan.keep)


def test_colabs_own_ipywidgets_7_is_left_alone():
    """Colab keeps ipywidgets 7.7.1 on purpose (its frontend renders 8.x widgets badly, googlecolab/colabtools#3020):
    upgrading it broke the tqdm/Hugging Face progress bars. tqdm.auto needs only ipywidgets>=6."""
    from nbutils.harness.platforms import platform

    colab = platform("colab").version("ipywidgets")
    assert colab.startswith("7.")  # the freeze this test stands on
    plan = plan_install("colab", True, None, {**CURRENT, "ipywidgets": colab, "peft": None})
    assert not any(p.startswith("ipywidgets") for p in plan.packages)
    assert "ipywidgets>=7.0" in plan.keep


def test_find_dataset_looks_a_few_levels_deep(tmp_path):
    assert install.find_dataset(tmp_path) is None
    deep = tmp_path / "datasets" / "someone" / "qlora-nbutils"
    deep.mkdir(parents=True)
    (deep / "nbutils-0.1.0-py3-none-any.whl").write_text("")
    assert install.find_dataset(tmp_path) == deep


# --- run_install --------------------------------------------------------------------------------

def test_present_packages_go_to_pip_with_their_minimum_so_the_resolver_can_move_them():
    plan = plan_install("kaggle", False, DATASET, OLD_KAGGLE)
    assert "pandas>=2.1.1" in plan.keep and not any(k.startswith(("transformers", "peft")) for k in plan.keep)
    assert plan.command()[-len(plan.keep):] == plan.keep
    assert plan_install("kaggle", False, None, CURRENT).keep == []  # nothing to install: pip is not run


def test_numpy1_image_holds_numpy_and_takes_the_releases_that_run_on_it():
    plan = plan_install("kaggle", False, DATASET, {**OLD_KAGGLE, "numpy": "1.26.4", "pandas": None})
    assert plan.constraints == {"torch": "==2.6.0+cu124", "numpy": "==1.26.4", "pyarrow": "<26", "pandas": "<3"}
    assert "pandas==2.3.3" in plan.packages and "pyarrow" not in " ".join(plan.packages)  # 19.x is new enough
    assert any("numpy 1.26.4 held" in n for n in plan.notes)


def test_numpy2_image_holds_numpy_and_keeps_our_pins():
    plan = plan_install("kaggle", False, DATASET, {**OLD_KAGGLE, "numpy": "2.4.6", "pandas": None})
    assert plan.constraints == {"torch": "==2.6.0+cu124", "numpy": "==2.4.6"}
    assert f"pandas=={PINS['pandas']}" in plan.packages


def test_the_plan_shows_as_one_summary_line():
    plan = plan_install("kaggle", False, DATASET, OLD_KAGGLE)
    assert repr(plan).startswith("install plan: 4 package(s)") and "\n" not in repr(plan)
    plan.summary = "[install] verified: 4 pinned package(s)"
    assert repr(plan) == plan.summary


CONFLICT_BLOCK = ("ERROR: pip's dependency resolver does not currently take into account all the packages that are "
                  "installed. This behaviour is the source of the following dependency conflicts.\n"
                  "sentence-transformers 4.1.0 requires transformers<5.0.0,>=4.41.0, but you have transformers 5.23.0 "
                  "which is incompatible.\n")


class FakePip:
    """subprocess.run for pip: what a quiet (-q) pip prints, and its exit status."""

    def __init__(self, returncode, output=""):
        self.returncode, self.output, self.cmds = returncode, output, []

    def __call__(self, cmd, **kw):
        self.cmds.append(cmd)
        return subprocess.CompletedProcess(cmd, self.returncode, self.output, None)


@pytest.fixture()
def no_verify(monkeypatch):
    """run_install's after-pip checks (fresh interpreters) are tested in test_install_verify.py."""
    from nbutils.runtime import install_verify

    monkeypatch.setattr(install_verify, "verify", lambda *a: install_verify.Verdict())
    monkeypatch.setattr(install_verify, "distribution_versions", lambda: {})


def test_run_install_prints_runs_pip_with_the_torch_hold_and_verifies(monkeypatch, capsys, no_verify):
    monkeypatch.delitem(sys.modules, "peft", raising=False)  # earlier tests in this process imported it
    popen = FakePip(0, "WARNING: a warning pip prints even when quiet\n")
    monkeypatch.setattr(subprocess, "run", popen)
    monkeypatch.setattr(install, "installed_versions", lambda names: {n: PINS[n] for n in names})
    plan = plan_install("kaggle", True, None, {**CURRENT, "peft": None, "torch": "2.6.0"})
    install.run_install(plan)
    (cmd,) = popen.cmds
    assert cmd[:5] == [sys.executable, "-m", "pip", "install", "-q"] and "-c" in cmd and f"peft=={PINS['peft']}" in cmd
    out = capsys.readouterr().out
    assert "holding torch==2.6.0" in out and "a minute or two" in out and "verified" in repr(plan)
    assert "[install] pip: WARNING: a warning pip prints even when quiet" in out  # quiet pip's warnings still show
    assert out.strip().splitlines()[-1] == plan.summary  # the cell's last line says what happened


def test_run_install_says_when_a_pin_did_not_take(monkeypatch, no_verify):
    monkeypatch.setattr(subprocess, "run", FakePip(0))
    monkeypatch.setattr(install, "installed_versions", lambda names: {n: "0.1" for n in names})
    with pytest.raises(RuntimeError, match=r"differ from the pins: peft==.* \(found 0.1\); restart the session "
                                           r"\(Runtime > Restart session\)"):
        install.run_install(plan_install("colab", True, None, {**CURRENT, "peft": None}))


def test_run_install_explains_a_wheelhouse_failure(monkeypatch, tmp_path, no_verify):
    monkeypatch.setattr(subprocess, "run", FakePip(1))
    (tmp_path / install.WHEELHOUSE_MANIFEST).write_text('{"python_version": "3.9"}')
    with pytest.raises(RuntimeError, match=r"built for 3\.9.*make kaggle-dataset"):
        install.run_install(plan_install("kaggle", False, tmp_path, {**CURRENT, "peft": None}))


def test_a_full_disk_is_said_as_such_not_blamed_on_the_dataset(monkeypatch, tmp_path, no_verify):
    # What CI's twin printed when its disk filled: pip's own ENOSPC line, the wheelhouse attached.
    full = "ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device\n"
    monkeypatch.setattr(subprocess, "run", FakePip(1, full))
    (tmp_path / install.WHEELHOUSE_MANIFEST).write_text('{"python_version": "3.11"}')
    with pytest.raises(RuntimeError, match=r"The disk is full \(\d+\.\d GB free at .+, \d+\.\d GB free at ") as err:
        install.run_install(plan_install("kaggle", False, tmp_path, {**CURRENT, "peft": None}))
    assert "make kaggle-dataset" not in str(err.value) and "No space left on device" in str(err.value)


def test_run_install_reads_pins_from_the_specs_and_never_installs_torch(monkeypatch, no_verify):
    from nbutils.runtime import install_verify

    seen = []
    monkeypatch.setattr(install_verify, "verify", lambda before, pinned, *a: seen.append(pinned) or install_verify.Verdict())
    monkeypatch.setattr(subprocess, "run", FakePip(0, ""))
    monkeypatch.setattr(install, "installed_versions", lambda names: {n: PINS[n] for n in names})
    plan = plan_install("colab", True, None, {**CURRENT, "peft": None, "nbutils": None})
    assert plan.packages[0].startswith("nbutils @ git+")  # a URL spec: installed, but no version to check
    install.run_install(plan)
    assert seen == [["peft"]]
    with pytest.raises(AssertionError, match="never install torch"):
        install.run_install(install.InstallPlan("colab", "index", packages=["peft==0.21.2", "Torch==2.6.0"]))


def test_a_failed_pip_shows_its_last_lines_in_the_error(monkeypatch, no_verify):
    output = "".join(f"Processing wheel {i}\n" for i in range(100)) + "ERROR: No matching distribution found for peft\n"
    monkeypatch.setattr(subprocess, "run", FakePip(1, output))
    with pytest.raises(RuntimeError, match=r"(?s)pip's last lines:\n.*Processing wheel 99\nERROR: No matching") as err:
        install.run_install(plan_install("colab", True, None, {**CURRENT, "peft": None}))
    assert "Processing wheel 69\n" not in str(err.value)  # the tail, not the whole log


def test_the_conflict_block_reaches_the_verdict_and_prints_once_judged(monkeypatch, capsys):
    from nbutils.runtime import install_verify

    seen = []
    monkeypatch.setattr(subprocess, "run", FakePip(0, CONFLICT_BLOCK))
    monkeypatch.setattr(install, "installed_versions", lambda names: {n: PINS[n] for n in names})
    monkeypatch.setattr(install_verify, "distribution_versions", lambda: {})
    monkeypatch.setattr(install_verify, "verify", lambda before, pinned, output, roots: (
        seen.append(output), install_verify.Verdict(conflicts=install_verify.conflicts(output, ["peft"])))[1])
    install.run_install(plan_install("colab", True, None, {**CURRENT, "peft": None}))
    assert seen == [CONFLICT_BLOCK]  # verify parses pip's quiet output, conflict block included
    out = capsys.readouterr().out
    assert out.count("sentence-transformers 4.1.0 requires") == 1 and "[install] conflict: sentence-transformers" in out
    assert "dependency resolver" not in out and len(out.splitlines()) <= 6, out


def test_run_install_catches_a_package_imported_before_its_upgrade(monkeypatch):
    from nbutils.runtime import install_verify

    monkeypatch.setattr(subprocess, "run", FakePip(0))
    monkeypatch.setattr(install, "installed_versions", lambda names: {n: PINS[n] for n in names})
    versions = iter([{"peft": "0.17.0", "pyarrow": "19.0.1"}, {"peft": PINS["peft"], "pyarrow": "25.0.1"}])
    monkeypatch.setattr(install_verify, "distribution_versions", lambda: next(versions))
    monkeypatch.setattr(install_verify, "modules_of", lambda: {"peft": ["peft"], "pyarrow": ["pyarrow"]})
    monkeypatch.setattr(install_verify, "probe_imports", lambda dists, tops: {})
    monkeypatch.setitem(sys.modules, "pyarrow", types.ModuleType("pyarrow"))  # moved by pip, not pinned
    with pytest.raises(RuntimeError, match=r"pyarrow \(19.0.1 -> 25.0.1\) were loaded before .*restart the session"):
        install.run_install(plan_install("colab", True, None, {**CURRENT, "peft": None}))


def test_ensure_packages_locally_is_a_no_op(monkeypatch, capsys):
    for var in ("KAGGLE_KERNEL_RUN_TYPE", "KAGGLE_URL_BASE", "KAGGLE_DATA_PROXY_TOKEN", "COLAB_RELEASE_TAG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(subprocess, "run", None)  # would fail if pip were run
    assert install.ensure_packages() is None  # the cell ends on the printed summary, not on a repr
    assert capsys.readouterr().out.splitlines() == ["[install] nothing to install: local run: `make setup` installed "
                                                    "the pinned environment"]


def test_extra_packages_install_only_when_missing_pinned_and_offline_from_the_dataset(monkeypatch, tmp_path):
    from nbutils.runtime.packages import EXTRA

    monkeypatch.setattr(install, "installed_versions", lambda names: {n: EXTRA[n].pin for n in names})
    assert install.ensure_extra(("gguf", "sentencepiece")) == "[install] gguf, sentencepiece: present"
    calls = []
    monkeypatch.setattr(install, "installed_versions", lambda names: {"gguf": None, "sentencepiece": "0.1.0"})
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: calls.append(cmd) or subprocess.CompletedProcess(cmd, 0, "", ""))
    dataset = tmp_path / "input" / "qlora-nbutils"
    dataset.mkdir(parents=True)
    (dataset / "nbutils-0.1-py3-none-any.whl").write_text("")
    monkeypatch.setenv("KAGGLE_KERNEL_RUN_TYPE", "Batch")
    monkeypatch.setenv("NBUTILS_INPUT_ROOT", str(tmp_path / "input"))
    line = install.ensure_extra(("gguf", "sentencepiece"))
    assert calls[0][-5:] == ["--no-index", "--find-links", str(dataset), f"gguf=={EXTRA['gguf'].pin}",
                             f"sentencepiece=={EXTRA['sentencepiece'].pin}"]
    assert "offline" in line


@pytest.fixture()
def on_kaggle(monkeypatch, tmp_path):
    """ensure_packages on Kaggle with a dataset attached, peft missing, the internet on; returns (plans, dataset)."""
    dataset = tmp_path / "input" / "qlora-nbutils"
    dataset.mkdir(parents=True)
    monkeypatch.setenv("KAGGLE_KERNEL_RUN_TYPE", "Batch")
    monkeypatch.setenv("NBUTILS_INPUT_ROOT", str(tmp_path / "input"))
    monkeypatch.setattr(install, "installed_versions", lambda *a: {**CURRENT, "peft": None})
    monkeypatch.setattr(install, "has_internet", lambda *a: True)
    plans = []

    def pip(plan):  # the dataset lacks the pins: pip fails on it, PyPI has them
        plans.append(plan)
        if plan.source == "wheelhouse":
            raise install.PipFailed("pip failed (exit 1) installing peft==0.21.2. The attached dataset ...")

    monkeypatch.setattr(install, "run_install", pip)
    return plans, dataset


def test_a_dataset_that_cannot_install_the_pins_gives_way_to_pypi_when_online(on_kaggle, monkeypatch, capsys):
    plans, dataset = on_kaggle
    (dataset / f"nbutils-{CURRENT['nbutils']}-py3-none-any.whl").write_text("")
    install.ensure_packages()
    assert [p.source for p in plans] == ["wheelhouse", "index"]
    assert "could not install the pins" in capsys.readouterr().out
    monkeypatch.setattr(install, "has_internet", lambda *a: False)  # offline: nothing to fall back on
    with pytest.raises(install.PipFailed):
        install.ensure_packages()


def test_a_dataset_built_from_another_nbutils_is_skipped_when_online(on_kaggle, monkeypatch, capsys):
    plans, dataset = on_kaggle
    (dataset / "nbutils-0.0.1-py3-none-any.whl").write_text("")
    install.ensure_packages()
    assert [p.source for p in plans] == ["index"]
    assert "built from nbutils 0.0.1, this notebook runs 0.1.0: installing from PyPI" in capsys.readouterr().out
    monkeypatch.setattr(install, "has_internet", lambda *a: False)  # offline, it is all there is
    with pytest.raises(install.PipFailed):
        install.ensure_packages()
    assert plans[-1].source == "wheelhouse"


def test_extra_packages_the_dataset_lacks_come_from_pypi_when_online(monkeypatch, tmp_path, capsys):
    from nbutils.runtime.packages import EXTRA

    dataset = tmp_path / "input" / "qlora-nbutils"
    dataset.mkdir(parents=True)
    (dataset / "nbutils-0.1-py3-none-any.whl").write_text("")
    monkeypatch.setenv("KAGGLE_KERNEL_RUN_TYPE", "Batch")
    monkeypatch.setenv("NBUTILS_INPUT_ROOT", str(tmp_path / "input"))
    monkeypatch.setattr(install, "installed_versions", lambda names: {"gguf": None})
    monkeypatch.setattr(install, "has_internet", lambda *a: True)
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: calls.append(cmd) or subprocess.CompletedProcess(
        cmd, int("--no-index" in cmd), "", "ERROR: No matching distribution found for gguf"))
    assert install.ensure_extra(("gguf",)) == f"[install] gguf=={EXTRA['gguf'].pin} from PyPI"
    assert ["--no-index" in c for c in calls] == [True, False] and "lacks gguf" in capsys.readouterr().out
