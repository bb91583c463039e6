"""Loading the base model for QLoRA and attaching LoRA, right for a T4.

The 4-bit recipe and the LoRA settings are written once, in 02 (`BitsAndBytesConfig`, `LoraConfig`, each
argument with its reason); the checkpoint records what 02 built (run_config.json: "quantization", "lora",
"precision"), and 03, 04 and the checkpoint check load exactly that (`checkpoints.recipe`).
- Trainable parameters (LoRA) stay fp32 even when compute is fp16: the fp16 grad scaler refuses
  to unscale fp16 gradients ("Attempting to unscale FP16 gradients").
- Gradient checkpointing with use_reentrant=False: the reentrant variant silently drops
  gradients when the inputs do not require grad, which is the case with frozen 4-bit weights.
"""

from __future__ import annotations

from nbutils.runtime import modelsource
from nbutils.train import faultpoints

DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def choose_attention(config, requested: str = "auto", preferred: str = "sdpa") -> str:
    """`requested` unless it is "auto"; else `preferred` (preflight's: flash_attention_2 at capability >= 8.0
    when installed, else sdpa) where the model class supports it, sdpa where it does, eager otherwise
    (Gemma-2: sdpa cannot apply its logit soft-capping, so transformers refuses it)."""
    if requested != "auto":
        return requested
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    cls = MODEL_FOR_CAUSAL_LM_MAPPING.get(type(config), None)
    if cls is None:
        return "eager"
    if preferred == "flash_attention_2" and getattr(cls, "_supports_flash_attn", False):
        return "flash_attention_2"
    return "sdpa" if getattr(cls, "_supports_sdpa", False) else "eager"


def quantization_config(quantization):
    """A BitsAndBytesConfig from what a checkpoint records (its to_dict()), or the one given; None: full precision."""
    if quantization is None or not isinstance(quantization, dict):
        return quantization
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig.from_dict(dict(quantization))


def load_base(base_model: str, precision: str = "fp32", quantization=None, attn_implementation: str = "auto",
              device_map=None, preferred_attention: str = "sdpa"):
    """Base causal LM with the compute dtype of the precision rule.

    quantization: 02's BitsAndBytesConfig (or the dict a checkpoint recorded of it), None for the full-precision
    weights. attn_implementation="auto" picks per model class (see choose_attention); preferred_attention is
    preflight's env.attention."""
    import torch
    from transformers import AutoModelForCausalLM

    attn_implementation = choose_attention(modelsource.load_config(base_model), attn_implementation, preferred_attention)
    if device_map is None and torch.cuda.is_available():
        import os

        # Under DDP each process holds its own 4-bit copy on its own GPU (accelerate#2378, unsloth#431).
        device_map = {"": int(os.environ.get("LOCAL_RANK", "0"))}
    elif device_map == "split":
        device_map = "auto"  # one process, layers spread over all visible GPUs: bigger models, no speed-up
    if isinstance(quantization, dict) and quantization.get("bnb_4bit_compute_dtype"):
        # the 4-bit matmuls compute in the precision this machine runs (a bf16-trained adapter on a T4: fp16)
        quantization = {**quantization, "bnb_4bit_compute_dtype": DTYPES[precision]}
    model = modelsource.load(AutoModelForCausalLM.from_pretrained, base_model,
                             quantization_config=quantization_config(quantization),
                             dtype=getattr(torch, DTYPES[precision]), attn_implementation=attn_implementation,
                             device_map=device_map)
    one_cpu_kernel(model)
    faultpoints.point("load")
    return model


def free_memory() -> None:
    """Give back what models no longer referenced hold (the Python objects, the GPU's cached blocks): a notebook cell
    run again drops its earlier models first, else the new one loads beside them and a T4 runs out of memory."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def release_training(trainer) -> None:
    """Drop what only training needed once the final checkpoint is written (the optimizer's moments, its scheduler,
    the gradients), then free_memory(): verifying the checkpoint loads a second base model beside this one. The
    Trainer checkpoints hold the optimizer for a resume; the trainer cannot train on afterwards."""
    if trainer is None:
        return
    optimizer = getattr(trainer, "optimizer", None)
    inner = getattr(optimizer, "optimizer", optimizer)  # accelerate wraps torch's optimizer
    if inner is not None and hasattr(inner, "state"):
        inner.state.clear()
    trainer.optimizer = trainer.lr_scheduler = None
    handler = getattr(trainer, "callback_handler", None)  # it hands both to every callback
    if handler is not None:
        handler.optimizer = handler.lr_scheduler = None
    accelerator = getattr(trainer, "accelerator", None)
    for held in (getattr(accelerator, "_optimizers", None), getattr(accelerator, "_schedulers", None)):
        if isinstance(held, list):
            held.clear()
    for p in trainer.model.parameters():
        p.grad = None
    free_memory()


def one_cpu_kernel(model) -> None:
    """Keep bitsandbytes' 4-bit layers on one kernel on a CPU with AVX512-BF16.

    There, a 4-bit layer called in eval mode without gradients repacks its weights in place for a faster CPU
    kernel: it refuses layers whose width is not a multiple of 32 (reduced twins, dry runs), and training after the
    first evaluation then runs on other arithmetic than before it, so a run would depend on which CPU it got
    (resume and reproducibility checks compare runs bit for bit). GPUs never take that path."""
    for module in model.modules():
        if hasattr(module, "support_avx512bf16_for_cpu"):
            module.support_avx512bf16_for_cpu = False


# What transformers names the image and audio encoders and projectors of multimodal models: Gemma-3 4B and up
# (vision_tower, multi_modal_projector), Gemma-3n (audio_tower, embed_vision, embed_audio besides), others vision_model.
ENCODERS = ("vision_tower", "vision_model", "multi_modal_projector", "audio_tower", "embed_vision", "embed_audio")


def text_only_exclude(config) -> str | None:
    """LoraConfig's exclude_modules for text-only training: a regex of a multimodal model's encoders, else None.

    AutoModelForCausalLM loads Gemma-3 4B/12B as Gemma3ForConditionalGeneration, vision tower included, and
    target_modules="all-linear" would put adapters there too: saved, counted as trainable, never given a gradient by
    text, and under DDP (ddp_find_unused_parameters=False) the run stops at its second step. None for a text-only
    model, so its LoRA settings, which every checkpoint records and a resume compares, stay as they were.
    config: the model's config, or 02's plan (its model_config)."""
    config = getattr(config, "model_config", config)
    if all(getattr(config, part, None) is None for part in ("vision_config", "audio_config")):
        return None
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    # Llama-4's and Mllama's causal-LM classes are the language model alone: nothing to exclude.
    if not MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(getattr(config, "model_type", ""), "").endswith("ForConditionalGeneration"):
        return None
    return rf"(.*\.)?({'|'.join(ENCODERS)})(\..*)?"


def attach_lora(model, config, seed: int = 0, gradient_checkpointing: bool = True):
    """k-bit preparation (for a 4-bit model), then the adapters of `config` (02's LoraConfig); trainables in fp32."""
    import torch
    from peft import get_peft_model, prepare_model_for_kbit_training
    from transformers import set_seed

    set_seed(seed)  # LoRA's A matrices are drawn from the global RNG: same seed, same run
    if getattr(model, "is_loaded_in_4bit", False):
        model = prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=gradient_checkpointing,
            gradient_checkpointing_kwargs={"use_reentrant": False},
        )
    elif gradient_checkpointing:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    model = get_peft_model(model, config)
    for p in model.parameters():
        if p.requires_grad:
            p.data = p.data.to(torch.float32)
    return model


def unwrap(model):
    """Strip accelerate/DDP/compile wrappers so save_pretrained reaches the PEFT model."""
    try:
        from accelerate.utils import extract_model_from_parallel

        model = extract_model_from_parallel(model)
    except ImportError:
        pass
    while hasattr(model, "module"):
        model = model.module
    return model


def attention_of(model) -> str:
    """The attention implementation the model loaded with: the packed mask differs for eager (Gemma-2) and sdpa."""
    return getattr(getattr(unwrap(model), "config", None), "_attn_implementation", None) or "sdpa"


def trainable_summary(model) -> dict:
    """Counts and dtypes of trainable parameters (to show fp32 LoRA weights under fp16 compute)."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    total = sum(p.numel() for p in model.parameters())
    n = sum(p.numel() for p in trainable)
    return {"trainable": n, "total": total, "share": round(n / total, 4),
            "trainable_dtypes": sorted({str(p.dtype).replace("torch.", "") for p in trainable})}


def trainable_line(model) -> str:
    """trainable_summary as the one line 02 prints under the model."""
    t = trainable_summary(model)
    return (f"[model] LoRA: {t['trainable']:,} trainable parameters of {t['total']:,} ({t['share']:.2%}), "
            f"{'/'.join(t['trainable_dtypes'])}")
