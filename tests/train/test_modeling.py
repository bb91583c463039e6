"""Loading the 4-bit base and attaching LoRA the QLoRA way, right for a T4."""

from pathlib import Path

import pytest
import torch

from nbutils.data import chatformat
from nbutils.runtime.preflight import Accelerator, choose_precision
from nbutils.train import modeling
from tests import recipe

T4 = Accelerator(0, "Tesla T4", (7, 5), 15.0)
A100 = Accelerator(0, "NVIDIA A100", (8, 0), 40.0)


def test_precision_rule_fp16_on_t4_bf16_from_capability_8():
    assert choose_precision([T4]).dtype == "fp16"
    assert choose_precision([T4, T4]).dtype == "fp16"
    assert choose_precision([A100]).dtype == "bf16"
    assert choose_precision([]).dtype == "fp32"


def test_t4_path_is_fp16_compute_with_fp32_trainables(embedded_dir):
    precision = choose_precision([T4])
    model = modeling.attach_lora(modeling.load_base("embedded", precision.dtype, recipe.nf4(precision.dtype)), recipe.lora(8))
    quant = model.base_model.model.config.quantization_config
    assert quant.load_in_4bit and quant.bnb_4bit_quant_type == "nf4" and quant.bnb_4bit_use_double_quant
    assert str(quant.bnb_4bit_compute_dtype).endswith("float16") and "bfloat" not in str(quant.bnb_4bit_compute_dtype)
    # The fp16 grad scaler refuses fp16 gradients: everything trainable must be fp32.
    assert modeling.trainable_summary(model)["trainable_dtypes"] == ["float32"]


def test_4bit_layers_keep_one_kernel_through_an_evaluation_on_any_cpu(embedded_dir):
    """On a CPU with AVX512-BF16, bitsandbytes repacks a 4-bit layer's weights in place when it first runs in eval
    mode without gradients: training after an evaluation would then run on other arithmetic (and layers whose width
    is not a multiple of 32 fail). The suite keeps every CPU on the path training uses."""
    model = modeling.attach_lora(modeling.load_base("embedded", "fp32", recipe.nf4()), recipe.lora(8))
    layers = [m for m in model.modules() if hasattr(m, "support_avx512bf16_for_cpu")]
    assert layers and not any(m.support_avx512bf16_for_cpu for m in layers)
    model.eval()
    with torch.no_grad():
        model(input_ids=torch.tensor([[1, 2, 3, 4]]))
    assert not any(getattr(m.weight.quant_state, "packing_format_for_cpu", False) for m in layers)


def test_lora_on_all_linear_layers_alpha_r_no_dropout(embedded_dir):
    model = modeling.attach_lora(modeling.load_base("embedded", "fp32", recipe.nf4()), recipe.lora(8))
    cfg = model.peft_config["default"]
    assert cfg.r == 8 and cfg.lora_alpha == 8 and cfg.lora_dropout == 0.0 and not cfg.use_rslora
    wrapped = {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if hasattr(m, "lora_A")}
    assert wrapped == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    base = model.base_model.model
    assert base.config._attn_implementation == "sdpa"
    assert base.is_gradient_checkpointing
    # use_reentrant=False: the reentrant variant drops gradients when inputs need no grad (frozen 4-bit weights).
    assert base.model.layers[0]._gradient_checkpointing_func.keywords.get("use_reentrant") is False


def test_the_notebooks_own_configs_are_the_ones_used(embedded_dir):
    """02 builds BitsAndBytesConfig and LoraConfig as code to change: what it passes is what loads and trains."""
    from peft import LoraConfig
    from transformers import BitsAndBytesConfig

    bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="fp4", bnb_4bit_use_double_quant=False,
                             bnb_4bit_compute_dtype="float32")
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.1, task_type="CAUSAL_LM")
    model = modeling.attach_lora(modeling.load_base("embedded", "fp32", bnb), lora)
    quant = model.base_model.model.config.quantization_config
    assert quant.bnb_4bit_quant_type == "fp4" and not quant.bnb_4bit_use_double_quant
    cfg = model.peft_config["default"]
    assert cfg.r == 4 and cfg.lora_alpha == 8 and cfg.lora_dropout == 0.1
    assert {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if hasattr(m, "lora_A")} == {"q_proj", "v_proj"}
    assert modeling.trainable_line(model).startswith("[model] LoRA: ") and "float32" in modeling.trainable_line(model)


def test_a_checkpoints_recorded_4bit_config_loads_as_it_was_built(embedded_dir):
    """03, 04 and the checkpoint check load the dict 02's run_config.json records: the same config, key for key."""
    built = recipe.nf4("fp16")
    again = modeling.quantization_config(built.to_dict())
    assert again.to_dict() == built.to_dict() and modeling.quantization_config(None) is None

def test_rslora_option_scales_by_sqrt_r(embedded_dir):
    model = modeling.attach_lora(modeling.load_base("embedded", "fp32"), recipe.lora(16, rslora=True),
                                 gradient_checkpointing=False)
    layer = model.base_model.model.model.layers[0].self_attn.q_proj
    assert model.peft_config["default"].use_rslora
    assert layer.scaling["default"] == pytest.approx(16 / 16**0.5)


def test_pad_token_is_not_eos(embedded_dir):
    tok = chatformat.load_tokenizer("embedded")
    assert tok.pad_token_id is not None and tok.pad_token_id != tok.eos_token_id


def test_pad_token_fixed_when_it_is_eos(embedded_dir, monkeypatch):
    from transformers import AutoTokenizer

    real = AutoTokenizer.from_pretrained

    def eos_as_pad(*a, **k):
        tok = real(*a, **k)
        tok.pad_token = tok.eos_token  # what many base models ship with
        return tok

    monkeypatch.setattr(AutoTokenizer, "from_pretrained", eos_as_pad)
    tok = chatformat.load_tokenizer("embedded")
    assert tok.pad_token_id != tok.eos_token_id


def test_lora_init_is_seeded(embedded_dir):
    def lora_a(seed):
        model = modeling.attach_lora(modeling.load_base("embedded", "fp32"), recipe.lora(4), seed=seed,
                                     gradient_checkpointing=False)
        return next(p for n, p in model.named_parameters() if "lora_A" in n).detach().clone()

    assert torch.equal(lora_a(0), lora_a(0)) and not torch.equal(lora_a(0), lora_a(1))


def test_the_nf4_values_are_written_once_in_the_repository():
    """The 4-bit recipe lives in 02 alone: the library, tests and benches read it (nbutils.harness.notebook_recipe)."""
    import re

    root = Path(__file__).resolve().parents[2]
    found = [str(p.relative_to(root)) for folder in ("nbutils", "tests", "bench", "tools", "notebooks")
             for p in (root / folder).rglob("*.py") if re.search(r"bnb_4bit_quant_type\s*=\s*[\"']nf4", p.read_text())]
    assert found == ["notebooks/02_train_qlora.py"], found


def test_a_recorded_4bit_config_computes_in_the_precision_this_machine_runs(monkeypatch):
    """A bf16-trained adapter evaluated on a T4 (fp16): its recorded compute dtype bfloat16 would be emulated."""
    from nbutils.runtime import modelsource

    seen = {}
    monkeypatch.setattr(modelsource, "load", lambda fn, name, **kw: seen.update(kw) or torch.nn.Linear(1, 1))
    monkeypatch.setattr(modelsource, "load_config", lambda name: None)
    monkeypatch.setattr(modeling, "choose_attention", lambda *a: "sdpa")
    recorded = {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4", "bnb_4bit_compute_dtype": "bfloat16"}
    modeling.load_base("some/model", "fp16", recorded, device_map="cpu")
    assert seen["quantization_config"].bnb_4bit_compute_dtype == torch.float16 and seen["dtype"] == torch.float16


def test_free_memory_gives_back_a_model_no_longer_referenced():
    import gc
    import weakref

    model = torch.nn.Linear(4, 4)
    gone = weakref.ref(model)
    cycle = [model]
    cycle.append(cycle)  # held only through a reference cycle, as a model in a traceback or a PeftModel wrapper is
    model = cycle = None
    gc.disable()
    try:
        modeling.free_memory()
    finally:
        gc.enable()
    assert gone() is None
