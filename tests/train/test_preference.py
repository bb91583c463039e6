"""05's plan: the method's memory, the learning rate, the held-out rows, and the proof the reference is 02's adapter."""

import pytest

from nbutils.runtime import modelsource
from nbutils.train import memory, preference


def test_memory_plan_counts_two_sequences_per_pair_the_reference_and_grpos_cache():
    from transformers import LlamaConfig

    cfg = LlamaConfig(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                      num_key_value_heads=8, vocab_size=128256)  # Llama-3.2-1B's shape
    dpo = memory.plan_preference(cfg, "dpo", 256, 8, 16, 4, 16, None)
    orpo = memory.plan_preference(cfg, "orpo", 256, 8, 16, 4, 16, None)
    grpo = memory.plan_preference(cfg, "grpo", 256, 8, 16, 4, 16, None)
    sft = memory.estimate(memory.Shape.from_config(cfg), 256, 16, 16, "plain")
    assert dpo["parts_gb"]["activations"] == pytest.approx(sft["activations"] / memory.GB, abs=1e-3)  # 8 pairs = 16
    assert dpo["parts_gb"]["reference_adapter"] > 0 and orpo["parts_gb"]["reference_adapter"] == 0
    assert grpo["parts_gb"]["kv_cache"] > 0 and dpo["parts_gb"]["kv_cache"] == 0
    assert "2 prompts x 4" in grpo["what"]
    assert memory.plan_preference(cfg, "dpo", 256, 8, 16, 4, 16, 0.0001)["fits"] is False


def test_learning_rate_auto_is_small_for_real_models_and_given_wins():
    cfg = modelsource.load_config("embedded")
    assert preference.learning_rate("auto", cfg)[0] == preference.LR_TINY
    assert preference.learning_rate("1e-5", cfg) == (1e-5, "given")


def test_check_reference_refuses_a_reference_that_differs_or_trains(tmp_path):
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import save_file

    from nbutils.train import modeling

    model = get_peft_model(modeling.load_base("embedded"), LoraConfig(r=4, target_modules=["q_proj"]))
    saved = {k.replace(".default", ""): v.detach().clone() for k, v in model.named_parameters() if ".default." in k}
    save_file(saved, str(tmp_path / "adapter_model.safetensors"))
    model.add_adapter("ref", model.peft_config["default"])
    for name, p in model.named_parameters():
        if ".ref." in name:
            p.data.copy_(model.get_parameter(name.replace(".ref.", ".default.")).data)
    assert "tensors equal" in preference.check_reference(model, tmp_path)
    next(p for n, p in model.named_parameters() if ".ref." in n and "lora_B" in n).data += 1.0
    with pytest.raises(AssertionError, match="differs"):
        preference.check_reference(model, tmp_path)
