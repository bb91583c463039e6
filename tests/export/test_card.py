"""Model cards from what the chain wrote: missing facts stay missing, each kind says how to load it, figures in tables."""

import json

import pytest

from nbutils.chain import MARKERS
from nbutils.export import card
from nbutils.train import checkpoints
from tests.twins import templates


def _facts(tmp_path, base_model="someone/base-model", report=None, checkpoint=None):
    if report is not None:
        (tmp_path / MARKERS["eval"]).write_text(json.dumps(report))
    return card.collect_facts(tmp_path, tmp_path, tmp_path, base_model, checkpoint=checkpoint)


def test_missing_upstream_files_give_missing_facts_not_errors(tmp_path):
    facts = _facts(tmp_path)
    assert facts["data"] == {"content_hash": None, "counts": None, "splits": {}}
    assert facts["hyperparameters"] == {} and facts["eval"]["metrics"] == {}
    assert facts["eval"]["primary_metric"] == "exact_match" and facts["training"]["global_step"] is None


def test_hyperparameters_come_from_the_checkpoints_run_config_only_the_listed_ones(tmp_path):
    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "checkpoint" / "run_config.json").write_text(json.dumps(
        {"parameters": {"lora_r": 8, "learning_rate": 0.003, "output_dir": "/somewhere/private"}}))
    assert _facts(tmp_path)["hyperparameters"] == {"learning_rate": 0.003, "lora_r": 8}


def test_the_lora_config_the_model_trained_with_outranks_the_lora_parameters(tmp_path):
    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "checkpoint" / "run_config.json").write_text(json.dumps(
        {"parameters": {"lora_r": 16, "seed": 1}, "lora": {"r": 32, "lora_alpha": 64, "target_modules": ["q_proj"]}}))
    assert _facts(tmp_path)["hyperparameters"] == {"lora_r": 32, "lora_alpha": 64, "seed": 1}


def test_each_kind_says_how_to_load_it_and_only_a_hub_base_is_linked(tmp_path):
    merged = card.model_card(_facts(tmp_path), "merged", "me/model-merged")
    front = merged.split("---")[1]
    assert "library_name: transformers" in front and "base_model: someone/base-model" in front
    assert 'AutoModelForCausalLM.from_pretrained("me/model-merged", dtype="float16")' in merged
    adapter = card.model_card(_facts(tmp_path, "embedded"), "adapter")
    assert "library_name: peft" in adapter and "base_model:" not in adapter  # a local model is no Hub link
    assert 'AutoPeftModelForCausalLM.from_pretrained("this folder")' in adapter
    kaggle = card.model_card(_facts(tmp_path, "/kaggle/input/llama-3.2/transformers/1b-instruct/1"), "merged")
    assert "base_model:" not in kaggle.split("---")[1]  # a Kaggle Models folder is no Hub id either


def test_every_card_says_how_to_download_it_from_kaggle_and_that_a_gguf_needs_the_merged_model(tmp_path):
    for kind in ("adapter", "merged"):
        text = card.model_card(_facts(tmp_path), kind)
        assert "Output tab" in text and "kaggle kernels output <your-username>/qlora-04-export -p DIR" in text
        assert "GGUF for llama.cpp and Ollama is converted from the merged fp16 model" in text
    gguf = card.model_card(_facts(tmp_path), "gguf", run={"llama_cpp": "llama-cli -m m.gguf", "ollama": "ollama run m",
                                                          "type": "q8_0", "stops": ["<|im_end|>"]})
    assert "This GGUF was converted from the merged fp16 model" in gguf and "Output tab" in gguf


def test_loss_rows_appear_only_when_both_models_have_the_figure(make_report, tmp_path):
    report = make_report()
    report["base"]["eval_loss"], report["tuned"]["eval_loss"] = 2.5, 1.25
    report["base"]["perplexity"] = 12.0  # the tuned one has none: no half row
    text = card.model_card(_facts(tmp_path, report=report), "adapter")
    assert "| eval loss | 2.5 | 1.25 | |" in text and "| perplexity |" not in text
    assert "| degenerate rate | 0.1 | 0 | |" in text


def _checkpoint(path, step, learning_rate, log_history=None):
    """A checkpoint 02 would write (dummy weights), with its own run config and trainer state, checksummed."""
    path.mkdir(parents=True)
    for name in checkpoints.ADAPTER_FILES + checkpoints.TOKENIZER_FILES:
        (path / name).write_text("{}")
    (path / "run_config.json").write_text(json.dumps({"parameters": {"learning_rate": learning_rate, "max_steps": 6}}))
    (path / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": log_history or []}))
    checkpoints.mark_complete(path, step)
    return path


def test_a_card_describes_the_trainer_checkpoint_exported_when_the_final_one_failed(tmp_path, make_report):
    """02's final checkpoint (step 6) fails its checksums, so 04 exports trainer/checkpoint-3: the card gives that
    checkpoint's step, eval loss and run config, says why, and none of the final one's figures."""
    (tmp_path / MARKERS["train_qlora"]).write_text(json.dumps({"checkpoint_dir": "checkpoint", "global_step": 6,
                                                               "stopped_reason": "max_steps", "train_loss": 0.25,
                                                               "eval_loss": 0.125}))
    final = _checkpoint(tmp_path / "checkpoint", 6, 0.001)
    (final / "adapter_model.safetensors").write_text("altered")  # fails its checksums
    history = [{"loss": 2.0, "step": 1}, {"eval_loss": 1.75, "step": 2}, {"eval_loss": 1.5, "step": 3},
               {"eval_loss": 0.5, "step": 4}]
    ckpt = _checkpoint(tmp_path / "trainer" / "checkpoint-3", 3, 0.002, history)
    found, _ = checkpoints.for_eval(tmp_path)  # as 04 finds it
    assert found == ckpt
    for facts in (_facts(tmp_path, report=make_report(), checkpoint=found),
                  card.collect_facts(tmp_path, tmp_path, tmp_path, "someone/base-model", checkpoint=ckpt)):
        assert facts["training"]["global_step"] == 3 and facts["training"]["eval_loss"] == 1.5
        assert facts["training"]["checkpoint"] == "trainer/checkpoint-3" and facts["hyperparameters"]["learning_rate"] == 0.002
        text = card.model_card(facts, "adapter")
        assert "| global_step | 3 |" in text and "| eval_loss | 1.5 |" in text and "| checkpoint | trainer/checkpoint-3 |" in text
        assert "02's final checkpoint (step 6) failed verification: this is trainer/checkpoint-3" in text
        assert "| stopped_reason |" not in text and "| train_loss |" not in text and "0.125" not in text
    good = card.collect_facts(tmp_path, tmp_path, tmp_path, "someone/base-model", checkpoint=tmp_path / "checkpoint")
    assert good["training"] == {"global_step": 6, "stopped_reason": "max_steps", "train_loss": 0.25, "eval_loss": 0.125}


def _run_config(tmp_path, **recorded):
    (tmp_path / "checkpoint").mkdir(exist_ok=True)
    (tmp_path / "checkpoint" / "run_config.json").write_text(json.dumps(recorded))


def test_merged_and_gguf_cards_say_where_the_tuned_figures_were_measured(tmp_path, make_report):
    _run_config(tmp_path, precision="fp16", quantization={"load_in_4bit": True, "bnb_4bit_quant_type": "nf4"})
    facts = _facts(tmp_path, report=make_report())
    where = "The tuned figures were measured by notebook 03 on the 4-bit (nf4) base model with the adapter applied"
    run = {"llama_cpp": "llama-cli -m m.gguf", "ollama": "ollama run m", "type": "q4_k_m", "stops": ["<|im_end|>"]}
    merged, gguf = card.model_card(facts, "merged"), card.model_card(facts, "gguf", run=run)
    assert f"{where}, not on this fp16 merged model." in merged and f"{where}, not on this q4_k_m GGUF." in gguf
    assert merged.index("| exact_match (primary)") < merged.index(where) < merged.index("## Files")
    assert where not in card.model_card(facts, "adapter")  # the adapter on the 4-bit base is what 03 ran


@pytest.mark.parametrize("recorded, loaded", [
    ({"precision": "fp16", "quantization": {"load_in_4bit": True, "bnb_4bit_quant_type": "fp4"}}, "the 4-bit (fp4) base"),
    ({"precision": "fp16", "quantization": None}, "the full-precision (fp16) base"),  # 02 with load_in_4bit=False
    ({"precision": "bf16"}, "the base model as 02 loaded it"),  # a checkpoint that records no quantization
])
def test_the_card_says_how_03_loaded_the_base_as_the_checkpoint_records_it(tmp_path, recorded, loaded):
    """From the checkpoint's run_config.json (what 02 built, and what 03 loads), never a fixed "4-bit (NF4)"."""
    _run_config(tmp_path, **recorded)
    text = card.model_card(_facts(tmp_path), "merged")
    assert f"measured by notebook 03 on {loaded}" in text and "NF4" not in text and "nf4" not in text


@pytest.mark.parametrize("family", ["qwen3", "qwen2.5"])
def test_the_usage_snippet_prompts_as_the_model_was_trained_qwen3_without_thinking(tmp_path, tok, family):
    """A Qwen3 model tuned on plain answers learnt them after the empty think block that enable_thinking=False
    writes into the prompt (03 prompts so): the merged card's snippet passes it, read from the tokenizer 02 saved
    beside the adapter; a template without that variant keeps the plain call."""
    own, tok.chat_template = tok.chat_template, {"qwen3": templates.QWEN3, "qwen2.5": templates.QWEN25}[family]
    try:
        tok.save_pretrained(tmp_path / "checkpoint")
    finally:
        tok.chat_template = own
    facts = _facts(tmp_path)
    assert facts["prompt_variant"] == ({"enable_thinking": False} if family == "qwen3" else {})
    call = "tokenize=False, add_generation_prompt=True" + (", enable_thinking=False)" if family == "qwen3" else ")")
    assert call in card.model_card(facts, "merged")
    assert "enable_thinking" not in card.model_card(_facts(tmp_path / "checkpoint"), "merged")  # no tokenizer there
