"""02's (and 05's) recipe run from the notebook itself, for the tests and benches that train outside a notebook run.

The 4-bit config, the LoRA config, the `TrainingArguments` and the `Trainer` are written once, in
notebooks/02_train_qlora.py. Code that trains outside the chain (the tests of nbutils.train, the fault
injection, the benches) executes the notebook's own parameters cell and its function cells here, bound to a
plan of its own, so it trains exactly what a user runs and a change of the recipe reaches it. `arguments`
overrides TrainingArguments fields where a test needs another value (logging every step, say). 05's recipe
(`PREFERENCE`: trl's config built by `trainer_arguments`, its trainer by `make_trainer`) is read the same way.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "02_train_qlora.py"
PREFERENCE = ROOT / "notebooks" / "05_preference.py"
BUILDERS = {NOTEBOOK: "training_arguments", PREFERENCE: "trainer_arguments"}  # the function building the arguments
DEFINITIONS = (ast.Import, ast.ImportFrom, ast.FunctionDef)


def _cells(notebook: Path = NOTEBOOK) -> tuple[str, list[str]]:
    """The parameters cell, and the code cells that only import and define functions (the recipe)."""
    import jupytext

    nb = jupytext.read(notebook) if notebook.suffix == ".py" else nbformat.read(notebook, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    params = [c.source for c in code if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(params) != 1:
        raise ValueError(f"{notebook}: expected one cell tagged 'parameters', found {len(params)}")
    recipe = [c.source for c in code if c.source.strip()
              and all(isinstance(n, DEFINITIONS) for n in ast.parse(c.source).body)]
    return params[0], recipe


def namespace(plan, arguments: dict | None = None, notebook: Path = NOTEBOOK, **parameters) -> dict:
    """The notebook's globals as its recipe sees them: its parameters (defaults, then `parameters`), `plan`, and
    its functions (load_model, training_arguments, make_trainer ...); `arguments` overrides TrainingArguments fields."""
    params_src, recipe = _cells(notebook)
    ns: dict = {"__name__": "__notebook_recipe__"}
    exec(compile(params_src, str(notebook), "exec"), ns)  # noqa: S102 -- our own notebook's parameters cell
    unknown = set(parameters) - set(ns)
    if unknown:
        raise TypeError(f"{notebook} has no parameter {', '.join(sorted(unknown))}")
    ns.update(parameters, plan=plan)
    for source in recipe:
        exec(compile(source, str(notebook), "exec"), ns)  # noqa: S102 -- imports and function definitions only
    if arguments:
        name = BUILDERS.get(Path(notebook), "training_arguments")
        built = ns[name]
        ns[name] = lambda: dataclasses.replace(built(), **arguments)
    return ns


def _call(name: str, notebook: Path) -> ast.Call:
    calls = [n for n in ast.walk(ast.parse(_source(notebook))) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Name) and n.func.id == name]
    if len(calls) != 1:
        raise ValueError(f"{notebook}: expected one {name}(...) call, found {len(calls)}")
    return calls[0]


def _source(notebook: Path) -> str:
    return "\n".join(_cells(notebook)[1])


def configs(precision: str = "fp32", notebook: Path = NOTEBOOK, **parameters):
    """(BitsAndBytesConfig, LoraConfig) exactly as 02's recipe builds them, for this precision and these
    parameters (lora_r, lora_dropout, use_rslora ...): each keyword of the notebook's two calls evaluated."""
    from types import SimpleNamespace

    from peft import LoraConfig
    from transformers import BitsAndBytesConfig

    ns = namespace(SimpleNamespace(precision=precision), notebook=notebook, **parameters)
    built = []
    for cls in (BitsAndBytesConfig, LoraConfig):
        call = _call(cls.__name__, notebook)
        if call.args:
            raise ValueError(f"{notebook}:{call.lineno}: pass {cls.__name__} keywords only")
        built.append(cls(**{kw.arg: eval(compile(ast.Expression(kw.value), str(notebook), "eval"), ns)  # noqa: S307
                            for kw in call.keywords}))
    return tuple(built)


def plan_for(data_dir, output_dir, **parameters):
    """planning.plan_run on these folders with the notebook's parameters that the plan takes (no table printed)."""
    import inspect

    from nbutils.train import planning

    accepted = set(inspect.signature(planning.plan_run).parameters)
    parameters.setdefault("progress", "log")  # a log, not widgets: these runs are read in a terminal or a test report
    return planning.plan_run(data_dir=str(data_dir), output_dir=str(output_dir), show=False,
                             **{k: v for k, v in parameters.items() if k in accepted})


def adhoc_plan(output_dir, train_ds, eval_ds, batching: dict, base_model: str = "embedded", loss: str = "chunked",
               learning_rate: float = 3e-3, max_steps: int = 80, eval_steps: int = 20, save_steps: int = 20,
               keep_checkpoints: int | None = 2, per_device_batch_size: int = 16):
    """A plan for data that no 01 prepared (a bench's synthetic rows): the same fields 02's plan fills."""
    from nbutils.runtime import modelsource
    from nbutils.runtime.preflight import inspect
    from nbutils.train import launch, planning

    env, _ = inspect(load_in_4bit=True)
    manifest = {"batching": batching, "max_seq_len": max(train_ds["length"]), "content_hash": "adhoc"}
    return planning.RunPlan(env, base_model, "given", Path(output_dir), Path(output_dir), manifest, train_ds, eval_ds,
                            modelsource.load_config(base_model), env.attention, loss, {"estimate_gb": None},
                            launch.Launch("single", 1, 1, "one process"), learning_rate, "given", max_steps, eval_steps,
                            save_steps, keep_checkpoints, "log", per_device_batch_size=per_device_batch_size)


def train(data_dir, output_dir, model=None, tokenizer=None, arguments: dict | None = None, run: dict | None = None,
          plan=None, **parameters):
    """02's run outside the notebook: its plan, its load_model (unless a model and tokenizer are given), its Trainer
    and TrainingArguments, one training.Run around trainer.train() (`run`: Run keywords such as clock,
    session_start, probe, callbacks). Returns (model, tokenizer, run); run.result holds the TrainResult."""
    from nbutils.train import training

    if plan is not None and "per_device_batch_size" in parameters:  # an ad hoc plan trains at the batch given, as
        plan = dataclasses.replace(plan, per_device_batch_size=int(parameters["per_device_batch_size"]))  # 02's would
    plan = plan or plan_for(data_dir, output_dir, **parameters)
    ns = namespace(plan, arguments, **parameters)
    training.lock(plan.out)  # as 02 does: one run per output folder, before the model loads
    if model is None:
        model, tokenizer = ns["load_model"]()
    options = {"time_budget_min": ns["time_budget_min"], "keep_checkpoints": ns["keep_checkpoints"],
               "resume": ns["resume"], "progress": "log", "time_plan": ns["time_plan"], **(run or {})}
    session = training.Run(plan.out, plan.record(smoke=ns["smoke"]), **options)
    trainer = ns["make_trainer"](model, tokenizer, session)
    with session.session(trainer) as resume_from:
        if not session.finished:
            trainer.train(resume_from_checkpoint=resume_from)
    return model, tokenizer, session


def finish(session, model, tokenizer, plan=None) -> Path | None:
    """What 02 does after training: the final checkpoint, verified, then the summary (the stage's marker)."""
    from nbutils.train import checkpoints

    ckpt = session.save_final(model, tokenizer)
    if ckpt is not None:
        check = checkpoints.verify(ckpt, session.run_config.get("precision", ""))
        assert check["ok"], check
    session.write_summary(ckpt, plan.memory if plan is not None else None)
    return ckpt
