"""Loading the base model in 4-bit and attaching LoRA, the QLoRA way, right for a T4.

- nf4 with double quantization (`nf4_config`; 02 spells the same config out in view, and
  tests/train/test_modeling.py keeps the two equal); compute dtype from the
  precision rule (fp16 on a T4).
- Trainable parameters (LoRA) stay fp32 even when compute is fp16: the fp16 grad scaler refuses
  to unscale fp16 gradients ("Attempting to unscale FP16 gradients").
- Gradient checkpointing with use_reentrant=False: the reentrant variant silently drops
  gradients when the inputs do not require grad, which is the case with frozen 4-bit weights.
"""

from __future__ import annotations

from nbutils import embedded

DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def load_tokenizer(base_model: str, verbose: bool = False):
    """Tokenizer prepared by nbutils.data.chatformat: a pad that is not EOS (and not new), a chat template always."""
    from transformers import AutoTokenizer

    from nbutils.data import chatformat

    return chatformat.prepare_tokenizer(AutoTokenizer.from_pretrained(embedded.resolve_model(base_model)), verbose)


def load_config(base_model: str):
    """The model's config only (no weights): for validation and the memory plan before loading."""
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(embedded.resolve_model(base_model))


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


def nf4_config(precision: str = "fp32"):
    """The QLoRA 4-bit recipe (02 spells it out as code to change; 03, 04 and the checkpoint check load with this)."""
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                              bnb_4bit_compute_dtype=DTYPES[precision])


def load_base(base_model: str, precision: str = "fp32", load_in_4bit=True,
              attn_implementation: str = "auto", device_map=None, preferred_attention: str = "sdpa"):
    """Base causal LM with the compute dtype of the precision rule.

    load_in_4bit: True loads with nf4_config(precision), a BitsAndBytesConfig loads with that one (02's), False
    loads the full-precision weights. attn_implementation="auto" picks per model class (see choose_attention);
    preferred_attention is preflight's env["attention"]."""
    import torch
    from transformers import AutoModelForCausalLM

    attn_implementation = choose_attention(load_config(base_model), attn_implementation, preferred_attention)
    quant = nf4_config(precision) if load_in_4bit is True else (load_in_4bit or None)
    if device_map is None and torch.cuda.is_available():
        import os

        # Under DDP each process holds its own 4-bit copy on its own GPU (accelerate#2378, unsloth#431).
        device_map = {"": int(os.environ.get("LOCAL_RANK", "0"))}
    elif device_map == "split":
        device_map = "auto"  # one process, layers spread over all visible GPUs: bigger models, no speed-up
    return AutoModelForCausalLM.from_pretrained(
        embedded.resolve_model(base_model), quantization_config=quant, dtype=getattr(torch, DTYPES[precision]),
        attn_implementation=attn_implementation, device_map=device_map,
    )


def attach_lora(model, r: int = 16, alpha: int | None = None, dropout: float = 0.0, use_rslora: bool = False,
                gradient_checkpointing: bool = True, seed: int = 0, config=None):
    """k-bit preparation, then LoRA: `config` (a peft LoraConfig, as 02 builds it) or, without one, on all linear
    layers with rank r (alpha = r by default); trainables in fp32."""
    import torch
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
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
    config = config or LoraConfig(
        r=r, lora_alpha=alpha or r, lora_dropout=dropout, use_rslora=use_rslora,
        target_modules="all-linear", task_type="CAUSAL_LM",
    )
    model = get_peft_model(model, config)
    for p in model.parameters():
        if p.requires_grad:
            p.data = p.data.to(torch.float32)
    return model


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
