"""Execute the four notebooks on the embedded default under the Kaggle batch simulation.

This is the end-to-end evidence: the chain runs headless with the internet off, passes every
harness check without an allowance, shows real learning, exports a verified merged model, and
gives the same numbers on a rerun. The rerun (02 -> 04 on the same prepared data) has an HF_TOKEN
set and a Hub repo named, so 04's push step runs (and skips: the internet is off) with a secret in
the environment.

The chain itself runs once per environment: `make papermill-check` (which CI runs before `make test`)
stamps its run, and the `chain` fixture reuses it while the sources are unchanged (nbutils/harness/chainrun.py).
"""

import json
from pathlib import Path

import pytest

from nbutils import chain as stages
from nbutils.harness import chainrun
from nbutils.harness import runner as harness

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT / "runs" / "papermill-check"  # where `make papermill-check` leaves its run (its --out default)
TOKEN = "hf_" + "Zp4Lq8WnR2tXc6VbM9kJd3HgF7sA5eYu1o"  # shaped like a real one; not a real token


def _rows(results) -> list[dict]:
    return [{"notebook": r.notebook, "status": r.status, "problems": [str(p) for p in r.problems]} for r in results]


def _report(dest: Path) -> dict | None:
    path = dest / "sandbox" / "03_eval" / "working" / "eval" / "eval_report.json"
    return json.loads(path.read_text()) if path.exists() else None


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """(rows, folder) of one default 01 -> 04 run: papermill-check's when stamped for these sources, else run here."""
    rows = chainrun.fresh_rows(SHARED)
    if rows is not None:
        return rows, SHARED
    dest = tmp_path_factory.mktemp("chain")
    return _rows(harness.run([ROOT / nb for nb in stages.notebook_paths()], dest, {}, internet=False, time_budget=600)), dest


@pytest.fixture(scope="module")
def rerun(chain, tmp_path_factory):
    """(rows, folder) of 02 -> 04 again on the chain's prepared data, with an HF_TOKEN set and a Hub repo named."""
    dest = tmp_path_factory.mktemp("rerun")
    data_dir = chain[1] / "sandbox" / "01_data_prep" / "working" / "data_prep"
    notebooks = [ROOT / nb for nb in stages.notebook_paths()[1:]]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_TOKEN", TOKEN)
        results = harness.run(notebooks, dest, {"data_dir": str(data_dir), "hub_repo": "someone/model"},
                              internet=False, time_budget=600)
    return _rows(results), dest


def test_chain_passes_every_check_without_allowances(chain, rerun):
    for (rows, _), n in ((chain, 4), (rerun, 3)):  # the rerun with a token set: secret-in-output stays green
        assert [r["status"] for r in rows] == ["passed"] * n, [p for r in rows for p in r["problems"]]
        assert not [p for r in rows for p in r["problems"]]


def test_chain_shows_real_learning(chain):
    report = _report(chain[1])
    assert report["n_samples"] > 0
    assert report["base"]["task_metric"] <= 0.1
    assert report["tuned"]["task_metric"] >= 0.5
    assert report["tuned"]["eval_loss"] <= 0.7 * report["base"]["eval_loss"]


def test_same_seed_same_numbers(chain, rerun):
    first, second = _report(chain[1]), _report(rerun[1])  # 02 trained again on the same data, same seed
    for model in ("base", "tuned"):
        assert first[model]["task_metric"] == second[model]["task_metric"]
        assert first[model]["eval_loss"] == pytest.approx(second[model]["eval_loss"], rel=1e-5)


def test_eval_reports_every_metric_with_intervals(chain):
    report = _report(chain[1])
    block = report["metrics"]
    assert block["primary"] == "exact_match"  # one-word answers
    for name in ("exact_match", "rouge_l", "chrf"):
        m = block["metrics"][name]
        for model in ("base", "tuned"):
            low, high = m[model]["ci"]
            assert low <= m[model]["mean"] <= high
        assert sum(m["win_tie_loss"].values()) == report["n_samples"]
        assert m["tuned"]["mean"] > m["base"]["mean"]


def test_export_writes_a_verified_merged_model_and_no_secret(chain, rerun):
    dest = chain[1]
    export = dest / "sandbox" / "04_export" / "working" / "export"
    summary = json.loads((export / "export_summary.json").read_text())
    assert summary["gate"]["passed"] and summary["merged"]["ok"]
    assert summary["merged"]["max_abs_diff"] <= summary["merged"]["tolerance"]
    assert (export / "merged" / "config.json").exists() and (export / "adapter" / "adapter_model.safetensors").exists()
    dest = rerun[1]
    export = dest / "sandbox" / "04_export" / "working" / "export"
    assert json.loads((export / "export_summary.json").read_text())["pushed"] == [None]  # skipped: internet off
    for path in export.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".md", ".jinja"):
            assert TOKEN not in path.read_text(), path
    assert TOKEN not in (dest / "sandbox" / "03_eval" / "working" / "eval" / "eval_report.json").read_text()
    executed = (dest / "04_export.ipynb").read_text()
    assert "[hub] skipped: HF_HUB_OFFLINE is set" in executed and TOKEN not in executed


def test_export_gate_stops_a_worse_model_and_force_overrides(chain, tmp_path):
    report, dest = _report(chain[1]), chain[1]
    worse = json.loads(json.dumps(report))
    worse["metrics"]["metrics"]["exact_match"]["tuned"]["mean"] = 0.0  # crafted: tuned no better than base
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "eval_report.json").write_text(json.dumps(worse))
    working = dest / "sandbox"
    params = {"data_dir": str(working / "01_data_prep" / "working" / "data_prep"),
              "adapter_dir": str(working / "02_train_qlora" / "working" / "train_qlora"),
              "eval_dir": str(tmp_path / "eval")}
    nb = [ROOT / "notebooks" / "04_export.ipynb"]
    refused = harness.run(nb, tmp_path / "refused", params, internet=False, time_budget=600)[0]
    assert [p.check for p in refused.failing] == ["cell-error"]
    assert "GateRefused" in refused.failing[0].what and "does not beat the base on exact_match" in refused.failing[0].what
    assert not (tmp_path / "refused" / "sandbox" / "04_export" / "working" / "export" / "merged").exists()
    forced = harness.run(nb, tmp_path / "forced", {**params, "force": True}, internet=False, time_budget=600)[0]
    assert forced.status == "passed", [str(p) for p in forced.problems]
    assert "force=True: exporting anyway" in (tmp_path / "forced" / "04_export.ipynb").read_text()


def _outputs(path: Path) -> list[tuple[str, str, str]]:
    """(cell source, output type, text) of every output of an executed notebook."""
    found = []
    for cell in json.loads(path.read_text())["cells"]:
        for out in cell.get("outputs", []):
            text = out.get("text") or out.get("data", {}).get("text/plain") or out.get("evalue") or ""
            kinds = ",".join(out.get("data", {})) if "data" in out else out.get("name", "")
            found.append(("".join(cell["source"]), f"{out['output_type']} {kinds}", "".join(text)))
    return found


# Known noise that once filled the executed notebooks (issue 18); each is filtered or replaced at its source.
NOISE = ("FutureWarning", "DeprecationWarning", "{'loss'", "{'eval_loss'", "'train_runtime'", "gemm_4bit_forward",
         "Loading weights", "Writing model shards", "InstallPlan(", "KeyboardInterrupt")


def test_executed_notebooks_read_like_a_report(chain, rerun):
    for (_, dest), notebooks in ((chain, stages.notebook_paths()), (rerun, stages.notebook_paths()[1:])):
        for nb in notebooks:
            outputs = _outputs(dest / Path(nb).name)
            assert outputs, nb
            noisy = [(src[:60], kind, text[:200]) for src, kind, text in outputs for n in NOISE if n in text]
            assert not noisy, f"{nb}: {noisy}"
            # widgets keep only their first frame in a saved notebook: a batch run shows plain lines instead
            assert not [(src[:60], kind) for src, kind, _ in outputs if "widget-view" in kind], nb
            # the install cell: one summary line, not a repr
            install = [text for src, kind, text in outputs if "ensure_packages()" in src]
            assert len(install) == 1 and install[0].startswith("[install] ") and install[0].count("\n") <= 1, install
