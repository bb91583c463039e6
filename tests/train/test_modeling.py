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


def _tiny_gemma3(vision: bool = True):
    """Gemma-3 4B's shape in miniature: AutoModelForCausalLM loads model_type gemma3 with its SigLIP vision tower."""
    from transformers import Gemma3Config, Gemma3TextConfig

    text = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                head_dim=32, vocab_size=300, sliding_window=16)
    if not vision:
        return Gemma3TextConfig(**text)
    return Gemma3Config(text_config=text, mm_tokens_per_image=4, vision_config=dict(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2, image_size=28, patch_size=14))


def _notebooks_lora(model_config):
    """02's LoraConfig, every keyword evaluated as the notebook does, with a plan holding this model's config."""
    import ast
    from types import SimpleNamespace

    from peft import LoraConfig

    from nbutils.harness import notebook_recipe

    ns = notebook_recipe.namespace(SimpleNamespace(precision="fp32", model_config=model_config))
    call = next(n for n in ast.walk(ast.parse(notebook_recipe.NOTEBOOK.read_text())) if isinstance(n, ast.Call)
                and isinstance(n.func, ast.Name) and n.func.id == "LoraConfig")
    return LoraConfig(**{kw.arg: eval(compile(ast.Expression(kw.value), "02", "eval"), ns) for kw in call.keywords})  # noqa: S307


def test_lora_stays_off_a_multimodal_models_vision_tower_and_every_adapter_learns_from_text():
    """Gemma-3 4B/12B load with their vision tower: 02's "all-linear" adapters there would get no gradient from text,
    be saved and counted anyway, and stop a DDP run (ddp_find_unused_parameters=False) at its second step."""
    from transformers import AutoModelForCausalLM

    config = _tiny_gemma3()
    lora = _notebooks_lora(config)
    assert lora.target_modules == "all-linear" and lora.exclude_modules == modeling.text_only_exclude(config) is not None
    model = modeling.attach_lora(AutoModelForCausalLM.from_config(config), lora)
    adapted = [name for name, m in model.named_modules() if hasattr(m, "lora_A")]
    assert adapted and not [n for n in adapted if "vision_tower" in n or "multi_modal_projector" in n], adapted
    assert any(".language_model." in n for n in adapted)
    ids = torch.randint(0, 200, (2, 12), generator=torch.Generator().manual_seed(0))
    model(input_ids=ids, labels=ids).loss.backward()  # text only, as 02 trains
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and [n for n, p in trainable if p.grad is None] == []


def test_a_text_only_model_keeps_its_recorded_lora_settings():
    """None for a text-only model: its LoraConfig, which every checkpoint records and a resume compares, is as before."""
    from transformers import Llama4Config, LlamaConfig

    from nbutils.train import runsettings

    for config in (_tiny_gemma3(vision=False), LlamaConfig(), Llama4Config()):  # Llama4ForCausalLM: the text model alone
        assert modeling.text_only_exclude(config) is None, type(config).__name__
    assert _notebooks_lora(_tiny_gemma3(vision=False)).exclude_modules is None
    assert runsettings.lora_settings(recipe.lora())["exclude_modules"] is None  # peft's default, as recorded before


def test_02s_training_cell_frees_the_last_runs_model_before_loading_another(monkeypatch):
    """Run again in one kernel (train longer, Run All), 02's training cell would load a second model beside the one its
    globals still hold: an 8B model twice does not fit a T4. The cell drops them and frees the memory first."""
    import gc
    import weakref
    from types import SimpleNamespace

    import jupytext

    from nbutils.harness import notebook_recipe
    from nbutils.train import launch

    cell = next(c.source for c in jupytext.read(notebook_recipe.NOTEBOOK).cells
                if c.cell_type == "code" and "launch.run_in_processes(" in c.source)
    previous = torch.nn.Linear(4, 4)
    plan = SimpleNamespace(launch=SimpleNamespace(processes=1))
    ns = {"modeling": modeling, "plan": plan, "train_on_this_process": None, "trained": (previous, "tokenizer")}
    ns["model"], gone = previous, weakref.ref(previous)
    cycle = [previous]
    cycle.append(cycle)  # held in a reference cycle too, as a PeftModel is: only a collection frees it
    previous = cycle = None

    class Launched(Exception):
        pass

    def launched(*a):
        raise Launched(gone() is None)

    monkeypatch.setattr(launch, "run_in_processes", launched)
    gc.disable()  # only the cell's own collection may free it
    try:
        with pytest.raises(Launched) as stopped:
            exec(compile(cell, "02", "exec"), ns)  # noqa: S102 -- 02's own cell, up to the launch
    finally:
        gc.enable()
    assert stopped.value.args == (True,), "the last run's model was still held when the next one loaded"
