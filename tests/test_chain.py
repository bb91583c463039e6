"""The chain is defined once (nbutils/chain.py): every place that needs its order, folders, markers, slugs or
upstream parameters reads it from there, and the places that cannot import it (Makefile, committed Kaggle
metadata, the notebooks' own calls) agree with it."""

import json
import re
import subprocess
from pathlib import Path

import pytest

from nbutils import chain
from nbutils.runtime import environment

ROOT = Path(__file__).resolve().parents[1]


def test_every_stage_reads_only_earlier_stages_and_names_are_unique():
    seen = []
    for s in chain.STAGES:
        assert set(s.upstream) <= set(seen), f"{s.notebook} reads a stage that runs after it: {s.upstream}"
        seen.append(s.stage)
    for field in ("notebook", "stage", "marker", "slug", "title"):
        values = [getattr(s, field) for s in chain.STAGES]
        assert len(set(values)) == len(values), f"two stages share a {field}: {values}"
    params = [s.param for s in chain.STAGES if s.param]
    assert len(set(params)) == len(params)
    assert sorted(chain.NOTEBOOKS) == list(chain.NOTEBOOKS), "file names sort in chain order (reading order)"


def test_lookup_by_notebook_path_and_by_stage():
    assert chain.by_notebook("notebooks/03_eval.ipynb") == chain.by_stage("eval")
    assert chain.by_notebook("02_train_qlora.py").marker == "training_summary.json"
    with pytest.raises(KeyError, match="known: 01_data_prep"):
        chain.by_notebook("05_serve")
    with pytest.raises(KeyError, match="no stage"):
        chain.by_stage("serve")


def test_makefile_reads_the_chain():
    out = subprocess.run(["make", "-n", "-C", str(ROOT), "lint"], capture_output=True, text=True, check=True).stdout
    assert " ".join(chain.notebook_paths(".py")) in out, out


def test_every_notebook_exists_and_uses_its_own_stage_and_its_upstreams():
    for s in chain.STAGES:
        text = (ROOT / "notebooks" / f"{s.notebook}.py").read_text()
        if "planning.plan_run(" in text:  # 02's plan finds its folders (nbutils/train/planning.py)
            text += (ROOT / "nbutils" / "train" / "planning.py").read_text()
        assert f'stage_dir("{s.stage}"' in text, f"{s.notebook}.py does not write into its stage folder {s.stage}"
        found = re.findall(r'find_upstream\("(\w+)", (\w+)\)', text)
        assert found == [(up, chain.by_stage(up).param) for up in s.upstream], \
            f"{s.notebook}.py reads {found}; nbutils/chain.py says {s.upstream}"
        assert (ROOT / "notebooks" / f"{s.notebook}.ipynb").exists()


def test_committed_kaggle_metadata_follows_the_chain():
    for s in chain.STAGES:
        meta = json.loads((ROOT / "kaggle-metadata" / s.slug / "kernel-metadata.json").read_text())
        assert [k.split("/")[-1] for k in meta["kernel_sources"]] == [chain.by_stage(up).slug for up in s.upstream]
        assert meta["code_file"].endswith(f"notebooks/{s.notebook}.ipynb")


def test_find_upstream_looks_for_the_chains_marker(tmp_path):
    for s in chain.STAGES:
        folder = tmp_path / s.stage
        folder.mkdir()
        with pytest.raises(FileNotFoundError, match=re.escape(s.marker)):
            environment.find_upstream(s.stage, folder)
        (folder / s.marker).write_text("{}")
        assert environment.find_upstream(s.stage, folder) == folder
