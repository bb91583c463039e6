"""02's recipe read from the notebook itself: what a test trains is what the notebook trains."""

import ast
from pathlib import Path

import pytest

from nbutils.harness import notebook_recipe

ROOT = Path(__file__).resolve().parents[2]


def test_the_configs_are_the_notebooks_keyword_for_keyword():
    bnb, lora = notebook_recipe.configs("fp16", lora_r=8, use_rslora=True)
    assert bnb.load_in_4bit and bnb.bnb_4bit_quant_type == "nf4" and bnb.bnb_4bit_use_double_quant
    assert str(bnb.bnb_4bit_compute_dtype).endswith("float16")
    assert lora.r == lora.lora_alpha == 8 and lora.use_rslora and lora.target_modules == "all-linear"
    source = notebook_recipe.NOTEBOOK.read_text()
    for name, config in (("BitsAndBytesConfig", bnb), ("LoraConfig", lora)):
        call = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call)
                    and isinstance(n.func, ast.Name) and n.func.id == name)
        assert all(hasattr(config, kw.arg) for kw in call.keywords), name


def test_the_namespace_holds_the_recipe_functions_and_refuses_unknown_parameters():
    ns = notebook_recipe.namespace(plan=None, max_steps=7)
    assert ns["max_steps"] == 7 and ns["lora_r"] == 16 and ns["plan"] is None
    assert {"load_model", "training_arguments", "make_trainer", "train_on_this_process"} <= set(ns)
    assert "trained" not in ns  # the cell that runs the training is not executed
    with pytest.raises(TypeError, match="has no parameter max_step"):
        notebook_recipe.namespace(plan=None, max_step=7)


def test_training_arguments_come_from_the_notebook_with_overrides(prepared_data, tmp_path):
    plan = notebook_recipe.plan_for(prepared_data, tmp_path, max_steps=12)
    args = notebook_recipe.namespace(plan, {"logging_steps": 3})["training_arguments"]()
    assert args.max_steps == 12 and args.logging_steps == 3 and args.lr_scheduler_type.value == "cosine"
    assert args.output_dir == str(tmp_path / "trainer") and args.save_total_limit is None and not args.fp16


def test_a_notebook_without_a_parameters_cell_is_refused(tmp_path):
    path = tmp_path / "nb.py"
    path.write_text("# %%\nx = 1\n")
    with pytest.raises(ValueError, match="expected one cell tagged 'parameters'"):
        notebook_recipe.namespace(plan=None, notebook=path)


def test_02_shows_its_recipe_in_its_first_half():
    """A reader meets the QLoRA recipe early: the 4-bit config, the LoRA config, the Trainer, its arguments and
    trainer.train() in 02 itself, the Trainer in the first half of the notebook, after one planning cell."""
    lines = notebook_recipe.NOTEBOOK.read_text().splitlines()
    first = {name: next(i for i, line in enumerate(lines, 1) if name in line)
             for name in ("planning.plan_run(", "BitsAndBytesConfig(", "LoraConfig(", "Trainer(", "TrainingArguments(",
                          "trainer.train(resume_from_checkpoint")}
    assert first["Trainer("] <= len(lines) / 2, (first, len(lines))
    assert first["planning.plan_run("] < first["BitsAndBytesConfig("] < first["Trainer("] < first["trainer.train(resume_from_checkpoint"]
    assert sum("planning.plan_run(" in line for line in lines) == 1  # the checks collapse into one cell


def test_05_shows_its_recipe_after_one_planning_cell():
    """05 reads as 02 does: one plan, then the policy loaded on 02's recorded recipe, trl's config and trainer, and
    trainer.train() in the notebook; the 4-bit values are not restated (they come from 02's checkpoint)."""
    source = notebook_recipe.PREFERENCE.read_text()
    lines = source.splitlines()
    first = {name: next(i for i, line in enumerate(lines, 1) if name in line)
             for name in ("preference.plan_preference(", "PeftModel.from_pretrained(", "DPOConfig(", "GRPOConfig(",
                          "DPOTrainer", "trainer.train(resume_from_checkpoint")}
    assert sum("preference.plan_preference(" in line for line in lines) == 1
    assert first["preference.plan_preference("] < first["PeftModel.from_pretrained("] < first["DPOConfig("] \
        < first["trainer.train(resume_from_checkpoint"]
    assert "nf4" not in source and "BitsAndBytesConfig(" not in source and "nbutils.platform" not in source
    assert "plan.recipe.quantization" in source  # the base loads with 02's recorded 4-bit config
