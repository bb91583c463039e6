"""04 end to end on the Qwen2.5 twin with its real tokenizer: the family matrix's chain (smoke, run once per session:
tests/twins/chains.py), then 04 with gguf_type="q8_0"
- in a Kaggle image twin, internet off, the nbutils dataset attached: a verified GGUF, its Modelfile and the adapter
  (not run in llama.cpp here, verify_runtime=False, and the summary says so: the runtime check's one test in the
  suite is tests/export/test_runtimecheck.py);
- with a tmpfs smaller than merged + GGUF as the output: 04, killed once with its GGUF folder complete but not yet in
  place, leaves no summary and no gguf/; rerun, it finishes, keeps adapter and GGUF (the same GGUF, byte for byte, as
  the chain's own uninterrupted 04), leaves the merged model in the temp folder, says so in the summary, and no
  temporary name is left anywhere.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nbutils import chain
from nbutils.harness import ipc_kernels
from tests.twins import chains

ROOT = Path(__file__).resolve().parents[2]
FAMILY, TWIN = "qwen2.5-instruct", "numpy2-2026"
pytestmark = pytest.mark.integration


def _harness(notebooks, out, params, twin=None):
    cmd = [sys.executable, "-m", "nbutils.harness", "run", *map(str, notebooks), "--no-internet", "--out", str(out)]
    for name, value in params.items():
        cmd += ["-p", name, str(value)]
    cmd += ["--twin", twin] if twin else []
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    report = json.loads((out / "report.json").read_text()) if (out / "report.json").exists() else {}
    assert proc.returncode == 0 and report.get("ok"), proc.stdout[-4000:] + proc.stderr[-2000:]
    return out / (f"twin-{twin}" if twin else "") / "sandbox"


@pytest.fixture(scope="module")
def chain_box(twin, tmp_path_factory):
    """The family matrix's chain on the twin (smoke run; tests/twins/chains.py: run once in a session, by whichever
    test file asks first): the twin, and the harness sandbox holding each notebook's working folder."""
    base = twin(FAMILY)
    out, returncode, log = chains.family_chain(FAMILY, base, chains.shared_root(tmp_path_factory))
    assert returncode == 0, log
    return base, out / "sandbox"


@pytest.fixture(scope="module")
def upstream(chain_box):
    """The folders 04 reads, and the twin as the base model."""
    base, box = chain_box
    working = {s: box / nb / "working" / s for s, nb in (("data_prep", "01_data_prep"), ("train_qlora", "02_train_qlora"),
                                                           ("eval", "03_eval"))}
    # force: a smoke run on random weights does not beat the base; the gate says so and 04 exports anyway. Not run
    # in llama.cpp: its one test is tests/export/test_runtimecheck.py (the probe's build takes minutes uncached).
    return {"base_model": base, "data_dir": working["data_prep"], "adapter_dir": working["train_qlora"],
            "eval_dir": working["eval"], "force": True, "gguf_type": "q8_0", "verify_runtime": False}


def _summary(output_dir: Path) -> dict:
    return json.loads((output_dir / chain.MARKERS["export"]).read_text())


def _export_notebook():
    return ROOT / chain.notebook_paths()[3]


def test_04_in_a_kaggle_twin_offline_writes_a_verified_gguf_modelfile_and_adapter(upstream, tmp_path):
    from nbutils.harness import twin

    t = twin.twins([TWIN])[0]
    if not t.built or not (twin.dataset_dir() / "wheelhouse.json").exists():
        pytest.skip("needs `make kaggle-dataset kaggle-twins` (make papermill-check runs both, as CI does); the twin "
                    "runs the dataset's nbutils wheel, so rebuild the dataset after changing nbutils")
    box = _harness([_export_notebook()], tmp_path, upstream, twin=TWIN)
    export = box / "04_export" / "working" / "export"
    gguf = _summary(export)["gguf"]
    assert gguf["verification"]["ok"] and gguf["kept"] and gguf["converter"].startswith("the attached dataset"), gguf
    skipped = gguf["runtime"]  # verify_runtime=False reaches the GGUF step: the summary and the Modelfile say so
    assert skipped["checked"] is False and skipped["reason"].startswith("verify_runtime=False") and not gguf["verified"]
    assert (export / "gguf" / "Modelfile").read_text().splitlines()[2].startswith("# not run in llama.cpp: verify_runtime")
    assert (export / "gguf" / "model-q8_0.gguf").exists()
    assert (export / "adapter" / "adapter_model.safetensors").exists()
    assert gguf["lora"]["ok"] and Path(gguf["lora"]["file"]).exists()


@pytest.fixture
def tmpfs(tmp_path):
    """mount(size) -> a fresh tmpfs of that many bytes (needs root: skipped where mounting is not allowed)."""
    mounted = []

    def mount(size: int) -> Path:
        path = tmp_path / f"tmpfs{len(mounted)}"
        path.mkdir()
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
        if proc.returncode:
            pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.decode().strip()[:100]})")
        mounted.append(path)
        return path

    yield mount
    for path in mounted:
        subprocess.run(["umount", str(path)], check=False)


def _papermill(params: dict, out: Path, monkeypatch) -> Path:
    """04 executed by papermill in the project venv (the harness wants 04's output in its sandbox's working dir;
    here it goes to `output_dir`); temp and working roots under `out`, internet off for the Hub."""
    import papermill

    for name, value in {"NBUTILS_WORKING_ROOT": out / "working", "NBUTILS_TEMP_ROOT": out / "temp",
                        "NBUTILS_INPUT_ROOT": out / "input", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                        "OMP_NUM_THREADS": "1"}.items():
        monkeypatch.setenv(name, str(value))
    out.mkdir(parents=True, exist_ok=True)
    executed = out / "04_export.ipynb"
    papermill.execute_notebook(str(_export_notebook().with_suffix(".ipynb")), str(executed), kernel_name="python3",
                               parameters={k: str(v) if isinstance(v, Path) else v for k, v in params.items()},
                               cwd=str(out), progress_bar=False, **ipc_kernels.ENGINE_KWARGS)
    return executed


def _planned_sizes(upstream: dict) -> dict[str, int]:
    """What 04's disk plan will say each artifact takes (its own two calls: the checkpoint, the parameter count)."""
    from nbutils.export import diskplan, merge
    from nbutils.train import checkpoints

    ckpt, _ = checkpoints.for_eval(Path(upstream["adapter_dir"]))
    params = merge.memory_plan(upstream["base_model"])["params"]
    return diskplan.export_sizes(ckpt, params, True, True, upstream["gguf_type"], True)[0]


def test_04_on_a_tmpfs_smaller_than_merged_plus_gguf_keeps_what_fits_in_order(upstream, chain_box, tmp_path, tmpfs,
                                                                          monkeypatch):
    from nbutils.train import checksums, faultpoints, reports

    planned = _planned_sizes(upstream)
    size = int(sum(planned[n] for n in ("adapter", "adapter_gguf", "gguf")) * 1.1) + 2**20  # + the summary, not merged
    # + the killed run's adapter folders: the rerun's new ones are complete before the old ones go
    size += planned["adapter"] + planned["adapter_gguf"]
    assert size < planned["merged"] + planned["gguf"]
    small = tmpfs(size)
    monkeypatch.setenv(faultpoints.ENV, "gguf:1")  # the GGUF, its Modelfile and card written, not yet swapped in
    with pytest.raises(Exception, match="(?i)dead|died"):
        _papermill({**upstream, "output_dir": small}, tmp_path / "killed", monkeypatch)
    monkeypatch.delenv(faultpoints.ENV)
    assert not (small / "gguf").exists() and not (small / chain.MARKERS["export"]).exists()  # no summary, no gguf/
    assert len(list(small.glob("gguf.tmp-*"))) == 1  # the complete folder under its temporary name: the rerun clears it
    _papermill({**upstream, "output_dir": small}, tmp_path / "small", monkeypatch)
    summary = _summary(small)
    artifacts = summary["disk_plan"]["artifacts"]
    assert {n: a["size_gib"] for n, a in artifacts.items()} == {n: round(b / 2**30, 4) for n, b in planned.items()}
    where = {n: a["where"] for n, a in artifacts.items()}
    assert where == {"adapter": "output", "adapter_gguf": "output", "gguf": "output", "merged": "temp"}, summary["disk_plan"]
    assert "does not fit" in artifacts["merged"]["why"]
    assert summary["gguf"]["verification"]["ok"] and Path(summary["gguf"]["file"]).parent == small / "gguf"
    assert not list(small.rglob("*.partial")) and not list((tmp_path / "small").rglob("*.partial"))
    assert not [p for p in small.rglob("*") if ".tmp-" in p.name or p.name.startswith(".trash-")]
    assert sorted(p.name for p in small.iterdir() if p.name not in reports.LOCK_FILES) == \
        ["adapter", "adapter_gguf", "export_summary.json", "gguf"]
    assert reports.problems(small, chain.MARKERS["export"]) == [] and "gguf/model-q8_0.gguf" in summary["checksums"]
    uninterrupted = chain_box[1] / "04_export" / "working" / "export" / "gguf" / "model-q8_0.gguf"  # never killed
    assert summary["checksums"]["gguf/model-q8_0.gguf"]["sha256"] == checksums.sha256(uninterrupted)
