"""The family matrix: for every family twin (in make test, one per kind: see MATRIX), 01 -> 02 -> 03 -> 04 -> 05
under `python -m nbutils.harness run` with smoke=True, the model named in 01 alone (02 to 05 take it from upstream,
as a user's chain does), then the checkpoint reloads with its own tokenizer and chat template, 04's GGUF (q8_0,
through llama.cpp's real converter) is verified with exactly the suite's stop ids, or, for a twin without a real
tokenizer, its one-line reason, and 05's DPO run on 02's adapter completes (on one family of each chat format, see
NO_05).

Two chains run at a time (one per core; each process uses one math thread), at batch size 4 (05: 2 pairs a step):
the real embedding sizes (up to 262144 x 64) make the logits the big cost, and 05's most of all (policy and
reference over both answers of each pair). The largest vocabularies start first. `pytest -m families` runs only
this matrix.
"""

import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.twins import chains, realvocab
from tests.twins.families import FAMILIES

pytestmark = [pytest.mark.integration, pytest.mark.families]

# make test's budget (warm CI under 20 minutes on 2 cores) runs the chain once per kind of thing a family brings:
# - SmolLM2's tokenizer, template and generation config go through 01 -> 04 on the real SmolLM2-135M-Instruct in
#   tests/test_real_model.py (real weights, 30 layers);
# - Llama-3 base's tokenizer is Llama-3.2-instruct's and its plain-text path Pythia's; Gemma 2's chat format and large
#   vocabulary are Gemma 3's; Mistral v0.3's SentencePiece tokenizer is Phi-3.5's kind; Qwen3's tokenizer, vocabulary
#   and ChatML turns are Qwen2.5's; each of the four still has its pad, labels, stops, attention and preference pairs
#   checked in tests/data/test_chatformat.py (their model classes, Gemma2, Mistral and Qwen3, go through the notebooks
#   only with NBUTILS_ALL_FAMILIES=1). Qwen3's chain (about 100 s of a core) left make test when warm CI neared 20
#   minutes.
# NBUTILS_ALL_FAMILIES=1 runs every family's chain (`NBUTILS_ALL_FAMILIES=1 pytest -m families`).
LEFT_TO_OTHER_TESTS = ("smollm2-instruct", "llama-3-base", "gemma-2", "mistral-v0.3", "qwen3")
ALL = os.environ.get("NBUTILS_ALL_FAMILIES") == "1"
MATRIX = sorted(name for name in FAMILIES if ALL or name not in LEFT_TO_OTHER_TESTS)
# 05 (DPO on 02's adapter, the matrix's costliest notebook) runs end to end on one family of each chat format: these
# two share theirs with a family that runs it (Qwen3 Qwen2.5's ChatML, Llama-3 base Pythia's plain text). make test
# runs it on three (Gemma 3's format and largest vocabulary, Qwen2.5's ChatML, Pythia's plain text): Llama-3.2's and
# Phi-3.5's 05 (about 60 s of a core) left it when warm CI neared 20 minutes again; their preference pairs are still
# rendered and checked in tests/data/test_chatformat.py, and NBUTILS_ALL_FAMILIES=1 runs their 05.
NO_05 = ("qwen3", "llama-3-base") + (() if ALL else ("llama-3.2-instruct", "phi-3.5-mini"))


@pytest.fixture(scope="module")
def matrix(twin, tmp_path_factory):
    """name -> (folder, harness output dir, exit code, log tail), all chains run two at a time (tests/twins/chains.py:
    a chain another test file already ran, or is running, in this session is read, not run again)."""
    root = chains.shared_root(tmp_path_factory)
    folders = {name: twin(name) for name in MATRIX}  # built here, once, before the parallel runs
    longest_first = sorted(MATRIX, key=lambda n: -FAMILIES[n].model_vocab)
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = {n: pool.submit(chains.family_chain, n, folders[n], root, 4 if n in NO_05 else 5) for n in longest_first}
        return {n: (folders[n], *f.result()) for n, f in runs.items()}


@pytest.mark.parametrize("name", MATRIX)
def test_chain_passes_and_the_checkpoint_reproduces_training(matrix, name):
    from datasets import load_from_disk
    from peft import PeftModel
    from transformers import AutoTokenizer

    from nbutils.train import modeling

    folder, out, returncode, log = matrix[name]
    report = json.loads((out / "report.json").read_text()) if (out / "report.json").exists() else {}
    assert returncode == 0 and report.get("ok"), log
    work = out / "sandbox"
    ckpt = work / "02_train_qlora" / "working" / "train_qlora" / "checkpoint"
    reloaded = AutoTokenizer.from_pretrained(ckpt)
    for row in load_from_disk(str(work / "01_data_prep" / "working" / "data_prep" / "train")).select(range(3)):
        text = reloaded.apply_chat_template(row["messages"], tokenize=False)
        assert reloaded(text, add_special_tokens=False)["input_ids"] == row["input_ids"], name
    manifest = json.loads((work / "01_data_prep" / "working" / "data_prep" / "manifest.json").read_text())
    assert manifest["tokens"]["end_of_turn"] == FAMILIES[name].expect_stop
    assert manifest["tokens"]["pad_token"] == reloaded.pad_token == FAMILIES[name].expect_pad
    assert json.loads((ckpt / "run_config.json").read_text())["base_model"] == str(folder)  # named in 01 alone
    model = PeftModel.from_pretrained(modeling.load_base(str(folder), "fp32"), ckpt)
    assert model.config._attn_implementation == FAMILIES[name].expect_attention
    report03 = json.loads((work / "03_eval" / "working" / "eval" / "eval_report.json").read_text())
    assert report03["tuned"]["n"] == 8
    export = json.loads((work / "04_export" / "working" / "export" / "export_summary.json").read_text())
    assert export["merged"]["same_argmax"] and export["adapter"]["files"], name
    if name in NO_05:
        return
    preference = work / "05_preference" / "working" / "preference"
    summary05 = json.loads((preference / "preference_summary.json").read_text())  # DPO on 02's adapter, smoke
    assert summary05["global_step"] == 4 and summary05["checkpoint_complete"], name
    assert json.loads((preference / "checkpoint" / "run_config.json").read_text())["base_model"] == str(folder)


@pytest.mark.parametrize("name", MATRIX)
def test_gguf_converts_and_verifies_with_the_suites_stops_or_says_why_in_one_line(matrix, name):
    """Twins with a real tokenizer (tests/twins/realvocab.py) convert to q8_0 and pass verification (reloaded, logits,
    greedy tokens, perplexity); the GGUF's eos/eot/eom fields hold exactly the suite's stop ids and the Modelfile
    one `PARAMETER stop` per stop token. The others pass the same way or give a one-line reason."""
    from transformers import AutoTokenizer

    from nbutils.export import ggufbuild, ggufcheck

    _, out, returncode, log = matrix[name]
    export = out / "sandbox" / "04_export" / "working" / "export"
    assert returncode == 0 and (export / "export_summary.json").exists(), log
    result = json.loads((export / "export_summary.json").read_text())["gguf"]
    if name not in realvocab.VOCAB and not result.get("file"):
        assert result["reason"] and "\n" not in result["reason"] and "Traceback" not in result["reason"]
        return
    assert result.get("file"), f"{name} has a real tokenizer but no GGUF: {result.get('reason')}"
    check = result["verification"]
    assert check["ok"] and check["nmse"] <= check["nmse_bound"], check
    merged = export / "merged"
    tok = AutoTokenizer.from_pretrained(merged)
    stop_ids = ggufbuild.stop_ids(tok, merged)  # the suite's, from the merged model's generation_config
    meta = ggufcheck.read_metadata(result["file"])
    assert sorted(v for v in meta["stops"].values() if v is not None) == sorted(set(stop_ids))
    text = Path(result["path"]).read_text()
    assert re.findall(r'^PARAMETER stop "(.*)"$', text, re.M) == [tok.convert_ids_to_tokens(i) for i in stop_ids]
    assert f"FROM ./{Path(result['file']).name}" in text
