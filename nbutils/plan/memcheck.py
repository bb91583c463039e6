"""The dry run's memory check: each notebook's peak measured on the twin, on this CPU, beside its memory plan.

Each notebook that loads a model records its plan (02's training_summary.json, 03's eval_report.json, 04's
export_summary.json, 05's preference_summary.json): the plan of the model the twin stands for (the twin carries its
shape: nbutils.train.memory.FULL_SHAPE), made against a T4 (the dry run sets NBUTILS_PLAN_GPU_GB), and the settings
it planned (batch, lengths, loss, tokens). Here the same work runs again on the twin, at the real vocabulary and
those lengths, in one fresh process: 02 one training step of its recipe (4-bit base, LoRA, checkpointing, its loss,
AdamW), 03 and 05's judge the generation and the scoring pass, 04 the merge and its fp32 check. Each is measured at
the twin's depth and at twice it; the growth per layer extrapolates the measurement to the model's depth. The peak is
the growth of the process's peak resident memory over the work (/proc/self/status VmHWM, reset through
/proc/self/clear_refs after a garbage collection and malloc_trim), so it counts every buffer, torch's or not.

Beside it, the plan's own formula for the twin's shape at the model's depth (fp32 on a CPU: no 16-bit copies, no
CUDA context). The twin has the model's vocabulary and, extrapolated, its depth: what the formula misses there it
misses by as much on the model, so where the measurement exceeds the formula, the excess is added to the model's
plan (a CPU also holds what a GPU never does, the tokenizer and Python's objects: the correction errs on the safe
side). A notebook whose plan, so corrected, would not fit the T4 fails the dry run, naming the notebook, its plan
cell and the parameter to change. 05's trl training step is not re-run (trl's CPU path is not its GPU path): its
judge pass is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from nbutils import chain, defaults
from nbutils.train import evalmemory, memory

GB = 2**30
T4_GB = defaults.T4_MEMORY_GB  # what every notebook's plan is checked against in the dry run
PLAN_CALLS = {"02_train_qlora": ("plan_run(", "per_device_batch_size"),  # the plan cell, and what to change there
              "03_eval": ("plan_eval(", "eval_batch_tokens"),
              "04_export": ("memory_plan(", "export_merged"),
              "05_preference": ("plan_preference(", "per_device_batch_size")}


@dataclass
class Check:
    """One notebook's line: the model's plan on a T4, the twin's peak extrapolated to the model's depth, the plan's
    formula for the twin at that depth, and the verdict."""

    notebook: str
    cell: int | None
    settings: str
    plan_gb: float  # the model's plan (what the notebook printed)
    measured_gb: float  # the twin, extrapolated to the model's depth
    twin_plan_gb: float
    depths: str  # "2 -> 28 layers: 0.61, 0.66 GB measured"
    problem: str = ""

    @property
    def ratio(self) -> float:
        return self.measured_gb / self.twin_plan_gb if self.twin_plan_gb else float("nan")

    def row(self) -> str:
        return (f"{self.notebook:<15} {self.plan_gb:6.2f} GB  {self.measured_gb:6.3f} GB  {self.twin_plan_gb:6.3f} GB  "
                f"{self.ratio:5.2f}  {self.settings}; {self.depths}")


def table(checks: list[Check]) -> str:
    """The dry run's memory lines: one per notebook, then every problem."""
    head = (f"{'memory':<15} {'T4 plan':>9}  {'twin peak':>9}  {'twin plan':>9}  ratio  (the model's plan on a "
            f"{T4_GB:g} GB T4; the twin measured on this CPU and extrapolated to the model's depth; the plan's formula "
            "for the twin)")
    return "\n".join([head, *(c.row() for c in checks), *(c.problem for c in checks if c.problem)])


def deeper_times(model_config) -> int:
    """How many times over the twin's layers the second twin repeats them: about half the model's depth, so the
    growth per layer is measured over many layers (a narrow twin's layer costs little beside the measurement's noise
    of a few MB) and extrapolated over as many again."""
    from nbutils.plan import shrink

    twin_layers = defaults.text_config(shrink.shrink_config(model_config)).num_hidden_layers
    return max(2, round(defaults.text_config(model_config).num_hidden_layers / (2 * twin_layers)))


def plan_cell(notebook: Path) -> int | None:
    """Index of the notebook's plan cell, as the harness numbers cells (every cell, as written)."""
    import nbformat

    call = PLAN_CALLS[notebook.stem][0]
    cells = nbformat.read(notebook, as_version=4).cells
    return next((i for i, c in enumerate(cells) if c.cell_type == "code" and call in c.source), None)


def recorded(chain_out: Path, notebook: str) -> dict | None:
    """The memory plan a notebook of the chain recorded in its stage's marker file (None: it did not finish)."""
    stage = chain.by_notebook(notebook)
    path = chain_out / "sandbox" / notebook / "working" / stage.stage / stage.marker
    if not path.exists():
        return None
    return json.loads(path.read_text()).get("memory_plan")


def tasks(notebook: str, plan: dict) -> tuple[str, dict] | None:
    """What to re-run on the twin for this notebook's recorded plan: (probe, its settings)."""
    if notebook == "02_train_qlora":
        return "train", {"batch": plan["batch_size"], "seq": plan["seq_len"], "loss": plan["loss"],
                         "attention": plan.get("attention", "sdpa")}
    if notebook == "03_eval":
        return "infer", {"rows": plan["generate_rows"], "prompt": plan["prompt"], "new_tokens": plan["new_tokens"],
                         "tokens": min(plan["tokens"], plan.get("split_tokens", plan["tokens"])),
                         "longest": plan.get("longest_row", plan["prompt"]), "loss": plan["loss"],
                         "attention": plan.get("attention", "sdpa")}
    if notebook == "04_export":
        return "merge", {"prompt": plan.get("prompt_tokens", 64)}
    if notebook == "05_preference":
        seq = plan["seq_len"]
        return "infer", {"rows": evalmemory.GENERATE_ROWS, "prompt": seq, "new_tokens": seq, "longest": seq,
                         "tokens": min(evalmemory.BATCH_TOKENS, 8 * seq), "loss": "chunked", "adapters": 3}
    return None


def twin_plan_bytes(probe: str, shape: memory.Shape, s: dict) -> float:
    """The plan's formula for the twin's own shape (at the depth in `shape`), fp32 on a CPU."""
    if probe == "train":
        return memory.estimate(shape, s["seq"], s["batch"], 16, s["loss"], compute_bytes=4,
                               attention=s.get("attention", "sdpa"))["total"]
    if probe == "infer":
        rows = max(1, s["tokens"] // s["longest"]) * s["longest"]
        return evalmemory.peak_bytes(shape, quantized=True, lora_r=16, n_adapters=s.get("adapters", 1), rows=s["rows"],
                                     prompt=s["prompt"], new_tokens=s["new_tokens"], tokens=rows, loss=s["loss"],
                                     compute_bytes=4, attention=s.get("attention", "sdpa"))
    from nbutils.export import merge

    return merge.merge_need_bytes(shape, s["prompt"])


def check(model_config, twin: Path, deeper: Path, chain_out: Path, notebooks: list[Path]) -> list[Check]:
    """The memory line of every notebook of the chain that recorded a plan (see the module docstring)."""
    from transformers import AutoConfig

    from nbutils.plan import probes

    wanted = [(nb, plan) for nb in notebooks if (plan := recorded(chain_out, nb.stem)) and tasks(nb.stem, plan)]
    jobs = [(probe, str(folder), settings) for nb, plan in wanted for probe, settings in [tasks(nb.stem, plan)]
            for folder in (twin, deeper)]
    peaks = probes.measure_all(jobs, chain_out / "memcheck")
    depth, deep = (defaults.text_config(AutoConfig.from_pretrained(f)).num_hidden_layers for f in (twin, deeper))
    full, own = memory.Shape.from_config(model_config), memory.Shape.from_config(AutoConfig.from_pretrained(twin), own=True)
    out = []
    for i, (nb, plan) in enumerate(wanted):
        probe, settings = tasks(nb.stem, plan)
        low, high = peaks[2 * i], peaks[2 * i + 1]
        per_layer = max(0.0, (high - low) / (deep - depth))
        measured = high + (full.layers - deep) * per_layer
        twin_plan = twin_plan_bytes(probe, _at_depth(own, full.layers), settings)
        out.append(_verdict(nb, plan, settings, measured, twin_plan,
                            f"{depth} and {deep} layers: {low / GB:.3f}, {high / GB:.3f} GB measured, "
                            f"extrapolated to {full.layers}"))
    return out


def _at_depth(shape: memory.Shape, layers: int) -> memory.Shape:
    from dataclasses import replace

    return replace(shape, layers=layers)


def _verdict(nb: Path, plan: dict, settings: dict, measured: float, twin_plan: float, depths: str) -> Check:
    """The line, and a problem when the model's plan (plus what the twin measured above its plan) would not fit
    the T4 (04: nor a free Kaggle session's RAM, where it merges when the T4 cannot)."""
    plan_gb = plan.get("estimate_gb", plan.get("needed_gb", 0.0))
    shown = ", ".join(f"{k} {v}" for k, v in settings.items())
    c = Check(nb.stem, plan_cell(nb), shown, plan_gb, measured / GB, twin_plan / GB, depths)
    excess = max(0.0, c.measured_gb - c.twin_plan_gb)
    corrected = plan_gb + excess
    limit = T4_GB * memory.MARGIN
    if nb.stem == "04_export":  # the merge runs in a free Kaggle session's RAM where the T4 cannot hold it
        from nbutils.export.merge import FREE_SESSIONS

        limit = max(limit, FREE_SESSIONS["kaggle"]["ram_gb"])
    if corrected > limit or plan.get("fits") is False:
        param = PLAN_CALLS[nb.stem][1]
        c.problem = (f"memory {nb.name} cell {c.cell}: would not fit a {T4_GB:g} GB T4 (the model's plan "
                     f"{plan_gb:.2f} GB, + {excess:.2f} GB the twin measured above its own plan: {corrected:.2f} GB "
                     f"of {limit:.1f} usable) -- lower {param}" + _largest(plan, param))
    return c


def _largest(plan: dict, param: str) -> str:
    """What the plan says fits, for the message."""
    key = {"per_device_batch_size": "largest_batch_that_fits", "eval_batch_tokens": "largest_tokens"}.get(param)
    if key and plan.get(key) is not None:
        return f" (the plan's largest that fits: {plan[key]})"
    return " (False, with gguf_type=\"\": the adapter alone)" if param == "export_merged" else ""
