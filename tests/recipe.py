"""02's QLoRA recipe for the tests that load a model outside a notebook run: the notebook's own
BitsAndBytesConfig and LoraConfig, evaluated by nbutils.harness.notebook_recipe (never a copy of their values)."""

from __future__ import annotations

import functools


@functools.cache
def _configs(precision: str, lora_r: int, lora_dropout: float, use_rslora: bool):
    from nbutils.harness import notebook_recipe

    return notebook_recipe.configs(precision, lora_r=lora_r, lora_dropout=lora_dropout, use_rslora=use_rslora)


def nf4(precision: str = "fp32"):
    """02's 4-bit config at this compute precision."""
    return _configs(precision, 16, 0.0, False)[0]


def lora(r: int = 16, dropout: float = 0.0, rslora: bool = False):
    """02's LoraConfig at rank r (a fresh copy: peft fills a config in as it attaches it)."""
    import copy

    return copy.deepcopy(_configs("fp32", r, dropout, rslora)[1])
