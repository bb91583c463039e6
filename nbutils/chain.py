"""The chain: which notebooks run in which order, where each writes, what it leaves last, what it reads.

The one source of these facts: the notebooks (through nbutils.runtime.environment), the harness, the
Kaggle metadata, the benches and the Makefile (`python -m nbutils.chain` prints the notebook paths) read
them from here.

A notebook writes into <working_root>/<stage>/ and writes its marker file last; the next notebook finds that
folder in its working root (same session or a local chain) or among its inputs (Kaggle mounts an upstream
kernel's /kaggle/working under /kaggle/input/<slug>/), and takes it through the parameter named `param`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Stage:
    notebook: str  # notebooks/<notebook>.py (source) and .ipynb (paired copy)
    stage: str  # the folder it writes under the working root
    marker: str  # the file it writes last: the folder is complete once it exists
    param: str | None  # the parameter later notebooks take this folder through (None: no notebook reads it)
    slug: str  # Kaggle kernel slug; kaggle's slugify(title) must give it back
    title: str
    gpu: bool
    upstream: tuple[str, ...] = field(default=())  # stages whose output this notebook reads (kernel_sources)
    what: str = ""  # one line for the README's notebooks table


# Chain order: each notebook reads the outputs of the ones before it.
STAGES = (
    Stage("01_data_prep", "data_prep", "manifest.json", "data_dir", "qlora-01-data-prep", "QLoRA 01 Data Prep",
          False, (), "raw records -> chat-formatted train/eval data"),
    Stage("02_train_qlora", "train_qlora", "training_summary.json", "adapter_dir", "qlora-02-train-qlora",
          "QLoRA 02 Train QLoRA", True, ("data_prep",), "4-bit base + LoRA adapter, checkpointed"),
    Stage("03_eval", "eval", "eval_report.json", "eval_dir", "qlora-03-eval", "QLoRA 03 Eval", True,
          ("data_prep", "train_qlora"), "base vs fine-tuned: task metrics with intervals, eval loss, degeneration, chat"),
    Stage("04_export", "export", "export_summary.json", None, "qlora-04-export", "QLoRA 04 Export", True,
          ("data_prep", "train_qlora", "eval"), "gate on 03, merged fp16 (verified), adapter + card, Hub push, GGUF"),
    Stage("05_preference", "preference", "preference_summary.json", "preference_dir", "qlora-05-preference",
          "QLoRA 05 Preference", True, ("data_prep", "train_qlora"),
          "DPO, ORPO, KTO or GRPO (rollouts under the guard) on 02's adapter, judged against it"),
)
NOTEBOOKS = tuple(s.notebook for s in STAGES)
MARKERS = {s.stage: s.marker for s in STAGES}  # stage folder -> the file written last


def by_notebook(name: str) -> Stage:
    """The stage of a notebook, given its stem or any path to it ('notebooks/03_eval.ipynb' works)."""
    stem = name.replace("\\", "/").rsplit("/", 1)[-1].split(".", 1)[0]
    for s in STAGES:
        if s.notebook == stem:
            return s
    raise KeyError(f"no notebook {stem!r} in the chain; known: {', '.join(NOTEBOOKS)}")


def by_stage(name: str) -> Stage:
    """The stage writing folder `name` ('data_prep', 'train_qlora', 'eval', 'export', 'preference')."""
    for s in STAGES:
        if s.stage == name:
            return s
    raise KeyError(f"no stage {name!r}; known: {', '.join(MARKERS)}")


def notebook_paths(suffix: str = ".ipynb") -> list[str]:
    """Repository-relative paths of the chain's notebooks, in order."""
    return [f"notebooks/{nb}{suffix}" for nb in NOTEBOOKS]


if __name__ == "__main__":  # the Makefile's NOTEBOOKS: `python3 -m nbutils.chain` (stdlib only, no venv needed)
    print(" ".join(notebook_paths("")))
