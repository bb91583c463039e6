"""The merge proved in the weights: the bound from the dtypes holds for a right merge, a lost adapter is off wherever
it moves a weight, and the reloaded weights are compared bit for bit."""

import pytest
import torch

from nbutils.export import mergeweights


class Tiny(torch.nn.Module):
    def __init__(self, conv1d=False):
        super().__init__()
        from transformers.pytorch_utils import Conv1D

        self.up = Conv1D(96, 64) if conv1d else torch.nn.Linear(64, 96, bias=False)  # GPT-2 stores W as [in, out]
        self.down = torch.nn.Linear(96, 64, bias=False)

    def forward(self, x):
        return self.down(self.up(x))


def _peft(b_std, conv1d=False, seed=0):
    """Tiny's fp16 weights with a LoRA (r=4, alpha=8; fp32 adapter weights, as peft loads them) whose B ~ N(0, b_std)."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    model = get_peft_model(Tiny(conv1d).half(), LoraConfig(r=4, lora_alpha=8, target_modules=["up", "down"],
                                                          fan_in_fan_out=conv1d))
    for name, p in model.named_parameters():
        if "lora_B" in name:
            p.data.normal_(0, b_std)
    return model


def test_half_ulp_is_half_the_spacing_of_the_dtype():
    x = torch.tensor([1.0, 0.75, -0.03, 1000.0, 0.0, 1e-7, 6e-5], dtype=torch.float16)
    half = mergeweights.half_ulp(x)
    normal = x.abs() >= torch.finfo(torch.float16).smallest_normal
    spacing = (torch.nextafter(x.abs(), torch.tensor(float("inf"), dtype=x.dtype)) - x.abs()).float()
    assert torch.equal(half[normal], spacing[normal] / 2)
    assert torch.all(half[~normal] == 2.0**-25)  # zero and subnormals: half the smallest spacing, 2**-24
    assert mergeweights.half_ulp(torch.tensor([1.0], dtype=torch.bfloat16)).item() == 2.0**-8


@pytest.mark.parametrize("conv1d", [False, True])
def test_a_right_merge_is_within_the_bound_for_linear_and_conv1d(conv1d):
    found = mergeweights.merge_layers(_peft(1e-3, conv1d))
    assert found["checked"] == 2 and found["lost"] == [] and found["overflow"] == [] and found["unchecked"] == []
    assert 0 < found["moved"] <= found["weights"] == 2 * 64 * 96 and set(found["digests"]) == {"up", "down"}


def test_a_merge_that_lost_the_adapter_is_off_wherever_the_adapter_moves_a_weight():
    w = (torch.randn(96, 64) * 0.05).half()
    b, a = torch.randn(96, 4) * 3e-4, torch.randn(4, 64) * 0.1
    right = (w.float() + 2.0 * (b @ a)).half()
    assert mergeweights.merge_error(right, w, [(b, a, 2.0)])[0] == 0
    off, bad, moved = mergeweights.merge_error(w.clone(), w, [(b, a, 2.0)])  # the base back: the delta is gone
    assert off == moved > 0.5 * w.numel() and bad == 0
    half_way = (w.float() + 1.0 * (b @ a)).half()  # the wrong scale is off too
    assert mergeweights.merge_error(half_way, w, [(b, a, 2.0)])[0] > 0
    inf = right.clone()
    inf[0, 0] = float("inf")
    assert mergeweights.merge_error(inf, w, [(b, a, 2.0)])[:2] == (1, 1)


def test_peft_merge_that_does_nothing_is_named_per_layer(monkeypatch):
    from peft.tuners.lora import Linear

    monkeypatch.setattr(Linear, "merge", lambda self, *a, **k: None)
    found = mergeweights.merge_layers(_peft(3e-4))
    assert [x.split(" ")[0] for x in found["lost"]] == ["up", "down"] and found["moved"] > 0


def test_a_delta_below_fp16_rounding_moves_no_weight():
    found = mergeweights.merge_layers(_peft(1e-9))
    assert found["lost"] == [] and found["moved"] == 0 and found["checked"] == 2


def test_changed_names_a_reloaded_weight_that_is_not_the_merged_one():
    model = _peft(1e-3)
    digests = mergeweights.merge_layers(model)["digests"]
    merged = model.merge_and_unload()
    assert mergeweights.changed(merged, digests) == []
    with torch.no_grad():
        merged.down.weight[3, 5] = torch.nextafter(merged.down.weight[3, 5], torch.tensor(9.0, dtype=torch.float16))
    assert mergeweights.changed(merged, digests) == ["down"]
    assert mergeweights.changed(merged, {"gone": digests["up"]}) == ["gone"]
