"""The merged fp16 model against base + adapter on the embedded default, and the memory plan before merging."""

import json

import pytest
import torch

from nbutils.data import chatformat
from nbutils.export import merge
from nbutils.runtime import modelsource


def prompts_for(tokenizer):
    return [tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
            for q in ("what kind of word is paris ?", "classify the word cake .", "tell me what owl is .")]


@pytest.mark.integration
def test_merged_model_reloads_and_matches_base_plus_adapter(tmp_path, trained_adapter):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(trained_adapter)
    result = merge.export_merged("embedded", trained_adapter, tmp_path / "merged", prompts_for(tok))
    assert result["ok"] and result["same_argmax"] and result["has_chat_template"]
    # Stated tolerance: 4 x the fp16 noise of base + adapter measured on these prompts, at least 0.01.
    assert result["tolerance"] == max(0.01, 4 * result["fp16_noise"]) and 0 < result["fp16_noise"] < 0.05
    assert result["max_abs_diff"] <= result["tolerance"] < result["adapter_effect"]
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


@pytest.mark.integration
def test_verification_catches_the_adapter_merged_into_another_base(tmp_path, trained_adapter):
    """A sibling of the base (the same architecture, every weight moved by 2% of its tensor's spread, as a base
    and its instruct sibling differ) with the same adapter merged in: the check against the right base refuses it."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from nbutils import embedded

    tok = AutoTokenizer.from_pretrained(trained_adapter)
    reference = merge.merge_and_save("embedded", trained_adapter, tmp_path / "merged", prompts_for(tok))
    torch.manual_seed(1)
    sibling = AutoModelForCausalLM.from_pretrained(embedded.resolve_model("embedded"), dtype=torch.float32)
    with torch.no_grad():
        for p in sibling.parameters():
            p.add_(torch.randn_like(p) * 0.02 * p.std().nan_to_num(0.0))
    merged = PeftModel.from_pretrained(sibling, str(trained_adapter)).merge_and_unload()
    merged.to(torch.float16).save_pretrained(tmp_path / "merged")
    result = merge.verify(tmp_path / "merged", reference, prompts_for(tok))
    assert not result["ok"] and result["max_abs_diff"] > 3 * result["tolerance"]


def test_fp32_computation_of_an_fp16_model_equals_its_fp32_copy_and_leaves_it_fp16(embedded_dir):
    from transformers import AutoModelForCausalLM

    from nbutils import embedded
    from nbutils.data.chatformat import load_tokenizer

    tok = load_tokenizer("embedded")
    half = AutoModelForCausalLM.from_pretrained(embedded.resolve_model("embedded"), dtype=torch.float16).eval()
    full = AutoModelForCausalLM.from_pretrained(embedded.resolve_model("embedded"), dtype=torch.float16).float().eval()
    prompts = prompts_for(tok)
    with merge.computing_in_fp32(half):
        upcast = merge.logits(half, tok, prompts)
    exact, plain = merge.logits(full, tok, prompts), merge.logits(half, tok, prompts)
    assert all(torch.allclose(a, b, atol=1e-4) for a, b in zip(upcast, exact))
    assert all(p.dtype == torch.float16 for p in half.parameters())
    assert max(float((a - b).abs().max()) for a, b in zip(plain, exact)) > 1e-3  # fp16 itself does differ


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


def test_tolerance_is_four_times_the_measured_fp16_noise_at_least_001():
    assert merge.tolerance_for(0.0) == 0.01 and merge.tolerance_for(0.1333) == pytest.approx(0.5332)


@pytest.mark.parametrize("noise", [float("nan"), float("inf")])
def test_a_non_finite_noise_gives_a_tolerance_nothing_passes(noise):
    assert not 0.0 <= merge.tolerance_for(noise)  # max() gave 0.01 for NaN and inf for inf: both passed


def test_the_plan_counts_every_check_prompts_exact_logits():
    from nbutils.train import memory

    shape = memory.Shape.from_config(modelsource.load_config("embedded"))
    one, three = merge.merge_parts(shape, 100, prompts=1), merge.merge_parts(shape, 100, prompts=3)
    assert three["reference_logits"] == 3 * one["reference_logits"] == 3 * 100 * shape.vocab * 4
    assert merge._need(three) - merge._need(one) == pytest.approx(2 * 100 * shape.vocab * 4 / 2**30)


def _plan(device, weights_gb):
    return {"params": 7e9, "weights_gb": weights_gb, "needed_gb": weights_gb * merge.HEADROOM, "ram_free_gb": 12.0,
            "gpu_free_gb": None, "device": device,
            "free_sessions": {"kaggle": {"fits_gpu": False, "fits_ram": True}, "colab": {"fits_gpu": False,
                                                                                         "fits_ram": False}}}


def test_plan_text_says_what_to_do_when_it_does_not_fit():
    text = merge.plan_text(_plan(None, 13.0))
    assert "merging NOWHERE here" in text and "export_merged=False" in text and "GPU none ->" in text and "none GiB" not in text
    assert "kaggle: RAM, colab: does not fit" in text and "Kaggle keeps at most 20 GB" in text
    small = merge.plan_text(_plan("cpu", 1.0))
    assert "merging in CPU RAM" in small and "export_merged=False" not in small and "20 GB" not in small
    assert "GPU 14.5 GiB -> merging on the GPU" in merge.plan_text({**_plan("cuda", 1.0), "gpu_free_gb": 14.5})


@pytest.mark.parametrize("export_merged, gguf_type", [(True, ""), (False, "q8_0"), (True, "q4_k_m")])
def test_a_merge_that_fits_nowhere_stops_04_whether_the_merged_export_or_a_gguf_wants_it(export_merged, gguf_type):
    nowhere = {**_plan(None, 13.0), "checked_against": "this machine"}
    with pytest.raises(MemoryError, match='export_merged=False, gguf_type=""') as err:
        merge.check_fits(nowhere, export_merged, gguf_type)
    assert ("GGUF" in str(err.value)) == (not export_merged)  # says why a merge was wanted at all
    merge.check_fits(nowhere, False, "")  # the adapter alone needs no merge
    merge.check_fits({**_plan("cpu", 1.0), "checked_against": "this machine"}, export_merged, gguf_type)


def test_no_check_prompts_is_refused_before_the_base_loads(tmp_path, monkeypatch):
    monkeypatch.setattr(merge, "merge_and_save", lambda *a, **k: pytest.fail("the base was loaded"))
    with pytest.raises(ValueError, match="verify_prompts to 1 or more"):
        merge.export_merged("embedded", tmp_path, tmp_path / "merged", [])


def test_the_plan_is_sized_on_the_longest_check_prompt_as_the_check_runs_it(embedded_dir, tok):
    """04 sizes the check pass on the check prompts (eval prompts without their answers), counted as `merge.logits`
    tokenizes them, not on 01's longest training row: a long-answer dataset once refused merges that fit."""
    from transformers import AutoModelForCausalLM

    from nbutils import embedded

    prompts = [*prompts_for(tok), prompts_for(tok)[0] * 3]
    model = AutoModelForCausalLM.from_pretrained(embedded.resolve_model("embedded"), dtype=torch.float32).eval()
    longest = max(x.shape[1] for x in merge.logits(model, tok, prompts))
    assert merge.check_tokens(tok, prompts) == longest
    short, long = merge.memory_plan("embedded", longest, prompts=4), merge.memory_plan("embedded", 4 * longest, prompts=4)
    assert short["prompt_tokens"] == longest and short["parts_gb"]["reference_logits"] < long["parts_gb"]["reference_logits"]


def _prequantized_base(path):
    """A base whose config.json says its weights are stored 4-bit (an unsloth ...-bnb-4bit repo), and no weights."""
    from transformers import AutoConfig

    from nbutils import embedded

    config = AutoConfig.from_pretrained(embedded.resolve_model("embedded"))
    config.quantization_config = {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}
    config.save_pretrained(path)
    return str(path)


@pytest.mark.parametrize("export_merged, gguf_type", [(True, ""), (False, "q8_0")])
def test_a_prequantized_base_is_refused_before_anything_loads_for_a_merge_or_a_gguf(embedded_dir, tmp_path,
                                                                                   export_merged, gguf_type):
    """The review's repro: computing_in_fp32 upcast packed Params4bit ("shape '[64, 64]' is invalid for input of size
    16384"); a GGUF is converted from the merged model, so it is refused too; the adapter alone is not."""
    base = _prequantized_base(tmp_path / "base")
    plan = merge.memory_plan(base)
    assert plan["device"] is not None and "bitsandbytes" in plan["prequantized"]
    with pytest.raises(ValueError, match='export_merged=False, gguf_type=""\\) in the parameters cell.*unquantized'):
        merge.check_fits(plan, export_merged, gguf_type)
    merge.check_fits(plan, False, "")  # the adapter alone merges nothing
    with pytest.raises(ValueError, match="is stored quantized"):  # the merge itself, before the base's weights load
        merge.merge_and_save(base, tmp_path / "adapter", tmp_path / "merged", ["a prompt"])
    assert not (tmp_path / "merged").exists() and merge.memory_plan("embedded")["prequantized"] is None


WEAK = ["q_proj", "v_proj", "o_proj", "down_proj"]  # with B ~ N(0, 3e-4): a weakly trained adapter (the review's)


def _adapter(path, b_std, targets="all-linear", layers=None):
    """A LoRA adapter on the embedded base (r=8, alpha=16) whose B ~ N(0, b_std), saved with the tokenizer."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from nbutils import embedded
    from nbutils.data.chatformat import load_tokenizer

    base = AutoModelForCausalLM.from_pretrained(embedded.resolve_model("embedded"), dtype=torch.float32)
    model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, target_modules=targets, layers_to_transform=layers))
    torch.manual_seed(0)
    for name, p in model.named_parameters():
        if "lora_B" in name:
            p.data.normal_(0, b_std)
    model.save_pretrained(path)
    load_tokenizer("embedded").save_pretrained(path)
    return path


def _nan_on(prompt, monkeypatch):
    """merge.logits, with NaN logits wherever `prompt` is run."""
    real = merge.logits
    monkeypatch.setattr(merge, "logits", lambda model, tok, ps: [torch.full_like(x, float("nan")) if p == prompt else x
                                                                 for p, x in zip(ps, real(model, tok, ps))])


def _exact_reference(tok, prompts, noise=1e-3):
    from transformers import AutoModelForCausalLM

    from nbutils import embedded

    model = AutoModelForCausalLM.from_pretrained(embedded.resolve_model("embedded"), dtype=torch.float32).eval()
    return {"logits": merge.logits(model, tok, prompts), "fp16_noise": noise, "adapter_effect": 1.0}


def test_nan_logits_on_a_later_prompt_fail_saying_what_overflowed(embedded_dir, tok, monkeypatch):
    """The review's repro: NaN on prompt 2 only, where Python's max dropped it and the check passed."""
    from nbutils import embedded

    prompts = prompts_for(tok)
    reference = _exact_reference(tok, prompts)
    _nan_on(prompts[1], monkeypatch)
    result = merge.verify(embedded.resolve_model("embedded"), reference, prompts)
    assert not result["ok"] and result["max_abs_diff"] != result["max_abs_diff"]  # NaN, not prompt 1's figure
    assert len(result["problems"]) == 1 and "non-finite logits on check prompt(s) 2: fp16 overflow" in result["problems"][0]
    monkeypatch.setattr(merge, "merge_and_save", lambda *a, **k: reference)
    with pytest.raises(RuntimeError, match="overflow") as err:
        merge.export_merged("embedded", "unused", embedded.resolve_model("embedded"), prompts)
    assert "base_model is the base" not in str(err.value)  # never the wrong-base advice


def test_a_nan_fp16_noise_fails_instead_of_falling_back_to_001(embedded_dir, tok):
    from nbutils import embedded

    prompts = prompts_for(tok)
    reference = _exact_reference(tok, prompts, noise=float("nan"))
    result = merge.verify(embedded.resolve_model("embedded"), reference, prompts)
    assert not result["ok"] and "tolerance is nan" in result["problems"][0] and "overflow" in result["problems"][0]


@pytest.mark.integration
def test_fp16_overflow_of_base_plus_adapter_stops_the_merge_before_anything_is_written(tmp_path, embedded_dir, tok):
    """An adapter whose layer-0 update leaves fp16's range: fp32 base + adapter is finite, the fp16 pass is not."""
    adapter = _adapter(tmp_path / "adapter", 1e4, ["down_proj"], [0])
    with pytest.raises(RuntimeError, match="fp16 gives non-finite logits on check prompt.s. 1, 2, 3 where fp32 "
                                           "does not: fp16 overflow") as err:
        merge.export_merged("embedded", adapter, tmp_path / "merged", prompts_for(tok))
    assert "export_merged=False" in str(err.value) and "base_model is the base" not in str(err.value)
    assert not list((tmp_path / "merged").glob("*.safetensors"))


@pytest.mark.integration
def test_a_merge_that_lost_a_weak_adapter_fails_in_the_weights(tmp_path, embedded_dir, tok, monkeypatch):
    """The review's repro: an adapter whose effect on the logits is below the tolerance, and a merge that drops it
    (peft's per-layer merge doing nothing): the logits could not tell; the weights do, before anything is saved."""
    from peft.tuners.lora import Linear

    adapter = _adapter(tmp_path / "adapter", 3e-4, WEAK)
    monkeypatch.setattr(Linear, "merge", lambda self, *a, **k: None)
    with pytest.raises(RuntimeError, match="lost the adapter in 8 of 8 LoRA layers"):
        merge.export_merged("embedded", adapter, tmp_path / "merged", prompts_for(tok))
    assert not list((tmp_path / "merged").glob("*.safetensors"))


@pytest.mark.integration
def test_a_saved_folder_without_a_weak_adapter_fails_on_its_weights(tmp_path, embedded_dir, tok):
    from transformers import AutoModelForCausalLM

    from nbutils import embedded

    adapter = _adapter(tmp_path / "adapter", 3e-4, WEAK)
    reference = merge.merge_and_save("embedded", adapter, tmp_path / "merged", prompts_for(tok))
    AutoModelForCausalLM.from_pretrained(embedded.resolve_model("embedded"), dtype=torch.float16).save_pretrained(
        tmp_path / "merged")
    result = merge.verify(tmp_path / "merged", reference, prompts_for(tok))
    # the adapter's whole effect is below the tolerance: the logits alone cannot tell this base from the merge
    assert result["max_abs_diff"] <= result["tolerance"] and result["adapter_effect"] < result["tolerance"]
    assert not result["ok"] and "saved merged weights differ" in result["problems"][0]
    assert result["weights"]["checked"] == 8 and result["weights"]["moved"] > result["weights"]["weights"] / 2


@pytest.mark.integration
def test_the_check_holds_the_exact_logits_and_one_pass_more(tmp_path, trained_adapter, monkeypatch):
    """Each prompt's other passes are reduced and freed: at most the exact logits of every prompt and one more."""
    import weakref

    from transformers import AutoTokenizer

    real, refs, peak = merge.logits, [], [0]

    def tracked(model, tokenizer, prompts):
        out = real(model, tokenizer, prompts)
        refs.extend(weakref.ref(x) for x in out)
        peak[0] = max(peak[0], sum(r() is not None for r in refs))
        return out

    monkeypatch.setattr(merge, "logits", tracked)
    prompts = prompts_for(AutoTokenizer.from_pretrained(trained_adapter))
    assert merge.export_merged("embedded", trained_adapter, tmp_path / "merged", prompts)["ok"]
    assert peak[0] == len(prompts) + 1  # was 3 x 3: reference, base alone and fp16 pass of every prompt at once
