"""04's building blocks: the gate on crafted reports, the merged fp16 model against base + adapter on the
embedded default, adapter export and model cards free of secrets, Hub push skips and a push to a fake
Hub on 127.0.0.1, GGUF skip messages."""

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

from nbutils.data import chatformat
from nbutils.export import adapter, card, gate, gguf, hub, merge
from nbutils.platform import secrets
from nbutils.train import checkpoints

TOKEN = "hf_" + "Q7xw2LmZk9RtYp4VbN8cDe5FgH3jK6sA1u"  # shaped like a real one; not a real token


def report(base=0.1, tuned=0.8, degenerate=0.0):
    m = lambda b, t: {"base": {"mean": b, "ci": [b, b]}, "tuned": {"mean": t, "ci": [t, t]},  # noqa: E731
                      "win_tie_loss": {"win": 1, "tie": 0, "loss": 0}}
    return {"n_samples": 10, "base": {"task_metric": base, "degenerate_rate": 0.1},
            "tuned": {"task_metric": tuned, "degenerate_rate": degenerate},
            "metrics": {"primary": "exact_match", "metrics": {"exact_match": m(base, tuned), "rouge_l": m(0.5, 0.4)}}}


# --- the gate -----------------------------------------------------------------------------------

def test_gate_passes_a_better_model(tmp_path, capsys):
    (tmp_path / "eval_report.json").write_text(json.dumps(report()))
    decision = gate.check(tmp_path)
    assert decision.passed and not decision.forced and decision.metric == "exact_match"
    assert "[gate] passed" in capsys.readouterr().out


def test_gate_refuses_a_worse_model_and_force_overrides(capsys):
    worse = report(base=0.6, tuned=0.4)
    with pytest.raises(gate.GateRefused, match="does not beat the base on exact_match"):
        gate.check(worse)
    with pytest.raises(gate.GateRefused, match="does not beat the base on rouge_l"):
        gate.check(report(), metric="rouge_l")  # a metric where the tuned model lost
    decision = gate.check(worse, force=True)
    assert decision.forced and not decision.passed
    assert "force=True: exporting anyway" in capsys.readouterr().out


def test_gate_refuses_degenerate_output_and_unknown_metrics():
    with pytest.raises(gate.GateRefused, match="35.0% of the tuned generations are degenerate"):
        gate.check(report(degenerate=0.35), max_degenerate_rate=0.2)
    with pytest.raises(gate.GateRefused, match="needed more than"):
        gate.check(report(base=0.5, tuned=0.52), min_improvement=0.05)
    with pytest.raises(KeyError, match="chrf"):
        gate.check(report(), metric="chrf")
    old = {"base": {"task_metric": 0.0}, "tuned": {"task_metric": 1.0, "degenerate_rate": 0.0}}
    assert gate.check(old).passed  # a report from before the metrics block gates on exact match


# --- merged fp16 model ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def trained_adapter(tmp_path_factory, embedded_dir):
    """A LoRA adapter on the embedded base with non-zero weights (peft's default init would be a no-op)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from nbutils import embedded
    from nbutils.train.modeling import load_tokenizer

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(embedded.resolve_model("embedded"), dtype=torch.float32)
    model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", init_lora_weights=False))
    out = tmp_path_factory.mktemp("adapter") / "checkpoint"
    model.save_pretrained(out)
    load_tokenizer("embedded").save_pretrained(out)
    (out / "run_config.json").write_text(json.dumps({"parameters": {"lora_r": 8, "hub_token": TOKEN}}))
    (out / "trainer_state.json").write_text("{}")
    checkpoints.mark_complete(out)
    return out


def prompts_for(tokenizer):
    return [tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
            for q in ("what kind of word is paris ?", "classify the word cake .", "tell me what owl is .")]


@pytest.mark.integration
def test_merged_model_reloads_and_matches_base_plus_adapter(tmp_path, trained_adapter):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(trained_adapter)
    result = merge.export_merged("embedded", trained_adapter, tmp_path / "merged", prompts_for(tok))
    assert result["ok"] and result["same_argmax"] and result["has_chat_template"]
    # Stated tolerance: two fp16 steps of the largest logit, at least 0.01.
    assert result["max_abs_diff"] <= max(0.01, 2e-3 * result["max_abs_logit"])
    assert {"config.json", "generation_config.json", "tokenizer.json", "chat_template.jinja"} <= set(result["files"])
    assert any(f.endswith(".safetensors") for f in result["files"])
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    assert str(model.dtype) == "torch.float16" and not hasattr(model, "peft_config")
    gen = json.loads((tmp_path / "merged" / "generation_config.json").read_text())
    # The merged model stops where the tuned one did: end-of-turn and EOS, never on pad.
    eot = tok.convert_tokens_to_ids(chatformat.end_of_turn(tok))
    assert {eot, tok.eos_token_id} <= set(gen["eos_token_id"]) and gen["pad_token_id"] == tok.pad_token_id
    assert tok.pad_token_id not in gen["eos_token_id"]


@pytest.mark.integration
def test_verification_catches_a_model_without_the_adapter(tmp_path, trained_adapter):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from nbutils import embedded

    tok = AutoTokenizer.from_pretrained(trained_adapter)
    reference = merge.merge_and_save("embedded", trained_adapter, tmp_path / "merged", prompts_for(tok))
    # Overwrite the merged weights with the plain base: the comparison must notice.
    AutoModelForCausalLM.from_pretrained(embedded.resolve_model("embedded"), dtype=torch.float16).save_pretrained(
        tmp_path / "merged")
    result = merge.verify(tmp_path / "merged", reference, prompts_for(tok))
    assert not result["ok"] and result["max_abs_diff"] > 10 * result["tolerance"]


def test_memory_plan_counts_parameters_from_the_config(embedded_dir):
    plan = merge.memory_plan("embedded")
    assert 100_000 < plan["params"] < 5_000_000 and plan["device"] == ("cuda" if torch.cuda.is_available() else "cpu")
    assert plan["free_sessions"]["kaggle"]["fits_ram"]
    assert "parameters" in merge.plan_text(plan)


@pytest.mark.parametrize("gpu_gb, ram_gb, device", [(16.0, 30.0, "cuda"), (None, 30.0, "cpu"), (1e-6, 30.0, "cpu"),
                                                    (None, 1e-6, None)])
def test_memory_plan_picks_the_gpu_then_ram_then_nowhere(embedded_dir, monkeypatch, gpu_gb, ram_gb, device):
    monkeypatch.setattr(merge, "_available", lambda: {"gpu_gb": gpu_gb, "ram_gb": ram_gb})
    assert merge.memory_plan("embedded")["device"] == device


# --- adapter export and model cards: no secrets -----------------------------------------------------------

def test_adapter_export_and_cards_hold_no_secret(tmp_path, trained_adapter, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert secrets.get_secret("HF_TOKEN") == TOKEN  # fetched: redact now knows the value
    train = tmp_path / "train_qlora"
    train.mkdir()
    (train / "training_summary.json").write_text(json.dumps({"checkpoint_dir": str(trained_adapter), "global_step": 5,
                                                             "note": f"token {TOKEN}"}))
    (tmp_path / "manifest.json").write_text(json.dumps({"content_hash": "abc123", "counts": {"kept": 9},
                                                        "splits": {"train": 8, "eval": 1}}))
    (tmp_path / "eval_report.json").write_text(json.dumps(report()))
    facts = card.collect_facts(tmp_path, train, tmp_path, "someone/base-model")
    text = card.model_card(facts, "adapter", "me/model")
    assert "base_model: someone/base-model" in text and "abc123" in text and '"kept": 9' in text
    assert "| exact_match (primary) | 0.100 [0.100, 0.100] | 0.800 [0.800, 0.800] | 1/0/0 |" in text
    assert "| lora_r | 8 |" in text
    out = adapter.export_adapter(trained_adapter, tmp_path / "adapter", text)
    assert "adapter_model.safetensors" in out["files"] and "trainer_state.json" not in out["files"]
    assert checkpoints.MARKER not in out["files"]
    for path in (tmp_path / "adapter").iterdir():
        assert TOKEN not in path.read_bytes().decode("utf-8", "ignore"), path.name
    assert TOKEN not in json.dumps(facts) and TOKEN not in text


# --- Hub push --------------------------------------------------------------------------------------------

def test_push_skips_with_a_reason(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert hub.push(str(tmp_path), "") is None
    assert hub.push(str(tmp_path), "me/model") is None
    assert "cannot be reached" in hub.skip_reason("me/model", TOKEN, internet=False)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub.push(str(tmp_path), "me/model") is None
    out = capsys.readouterr().out
    assert "hub_repo is empty" in out and "no HF_TOKEN secret" in out and "HF_HUB_OFFLINE" in out
    assert TOKEN not in out


class FakeHub(BaseHTTPRequestHandler):
    """The few Hub endpoints upload_folder uses, answering like the Hub does; records what it got."""

    calls: list = []

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.calls.append((self.path, self.headers.get("Authorization"), body))
        host = f"http://{self.server.server_address[0]}:{self.server.server_address[1]}"
        if self.path == "/api/repos/create":
            payload = {"url": f"{host}/{json.loads(body)['organization'] or ''}/{json.loads(body)['name']}"}
        elif self.path == "/api/validate-yaml":
            payload = {}
        elif "/preupload/" in self.path:
            payload = {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False}
                                 for f in json.loads(body)["files"]]}
        elif "/commit/" in self.path:
            payload = {"commitUrl": f"{host}/me/model/commit/abc", "commitOid": "a" * 40}
        else:
            self.send_response(404)
            self.end_headers()
            return
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_push_to_a_fake_hub_on_localhost(tmp_path, monkeypatch, capsys):
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    FakeHub.calls = []
    try:
        (tmp_path / "README.md").write_text("---\nlibrary_name: peft\n---\n# card\n")
        (tmp_path / "adapter_config.json").write_text("{}")
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
        monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.setenv("HF_TOKEN", TOKEN)
        url = hub.push(str(tmp_path), "me/model")
    finally:
        server.shutdown()
    paths = [c[0] for c in FakeHub.calls]
    created = json.loads(FakeHub.calls[0][2])
    assert paths[0] == "/api/repos/create" and (created.get("visibility") == "private" or created.get("private") is True)
    commit = next(c for c in FakeHub.calls if "/commit/" in c[0])
    lines = [json.loads(line) for line in commit[2].decode().splitlines()]
    sent = {x["value"]["path"]: base64.b64decode(x["value"]["content"]) for x in lines if x["key"] == "file"}
    assert sent == {"README.md": (tmp_path / "README.md").read_bytes(), "adapter_config.json": b"{}"}
    assert all(c[1] == f"Bearer {TOKEN}" for c in FakeHub.calls)  # the token goes to the Hub only
    out = capsys.readouterr().out
    assert url and "me/model" in url and "(private)" in out and TOKEN not in out


# --- GGUF -------------------------------------------------------------------------------------------------

def test_gguf_skips_without_llama_cpp(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("LLAMA_CPP_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert gguf.export_gguf(tmp_path, tmp_path / "gguf", "q8_0", str(tmp_path / "nowhere")) is None
    assert "convert_hf_to_gguf.py not found" in capsys.readouterr().out
    fake = tmp_path / "llama.cpp"
    fake.mkdir()
    (fake / gguf.CONVERTER).write_text("import sys; open(sys.argv[sys.argv.index('--outfile') + 1], 'w').write('GGUF')\n")
    monkeypatch.setenv("PATH", str(tmp_path))  # no llama-quantize anywhere
    assert gguf.export_gguf(tmp_path, tmp_path / "gguf", "q4_k_m", str(fake)) is None
    assert "q4_k_m needs llama-quantize" in capsys.readouterr().out
    made = gguf.export_gguf(tmp_path, tmp_path / "gguf", "q8_0", str(fake))
    assert made.name == "model-q8_0.gguf" and made.read_text() == "GGUF"


def test_push_targets():
    assert hub.targets("", "both") == {}
    assert hub.targets("me/m", "adapter") == {"adapter": "me/m"}
    assert hub.targets("me/m", "both") == {"adapter": "me/m", "merged": "me/m-merged"}
    with pytest.raises(ValueError, match="hub_what"):
        hub.targets("me/m", "gguf")
