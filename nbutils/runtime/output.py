"""What a run prints: known harmless library messages filtered where they are raised, bars that end.

An executed notebook is read as a report (Kaggle's viewer, a batch log), so every line in it should
be ours or a real problem. Each filter below matches one message exactly and says why it is harmless;
anything else still shows. `quiet_session()` runs in preflight, near the top of every notebook and
before transformers, peft or bitsandbytes are imported (the bitsandbytes message is printed at import).
"""

from __future__ import annotations

import logging
import warnings

# transformers 5.x renamed gradient checkpointing to activation checkpointing and warns on the old
# names; peft (prepare_model_for_kbit_training, PeftModel.__init__) and trl (around GRPO's generation) still call
# them. Our own code uses the new names; the warning is for their maintainers, not for a person training a model.
DEPRECATED_ALIASES = r"`(gradient_checkpointing_enable|gradient_checkpointing_disable|is_gradient_checkpointing)` is deprecated"
# bitsandbytes on a CPU with AVX512-bf16 tries an optional faster kernel from the `kernels` package
# and logs when it is absent; its own CPU kernel is used instead, and on a GPU this path never runs.
BNB_CPU_KERNEL = "Failed to load CPU gemm_4bit_forward"
BNB_CPU_LOGGER = "bitsandbytes.backends.cpu.ops"


class _DropMessage(logging.Filter):
    def __init__(self, prefix: str):
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefix)


def filter_known_warnings() -> None:
    """Filter the harmless messages above, each by its exact text; idempotent."""
    warnings.filterwarnings("ignore", message=DEPRECATED_ALIASES, category=FutureWarning)
    logger = logging.getLogger(BNB_CPU_LOGGER)
    if not any(isinstance(f, _DropMessage) for f in logger.filters):
        logger.addFilter(_DropMessage(BNB_CPU_KERNEL))


def plain_progress(batch: bool) -> None:
    """In a batch run, no library progress bars (loading weights, writing shards, downloads).

    They are tqdm.auto widgets in a kernel; a saved notebook keeps only the widget's first frame,
    so the viewer shows "Loading weights: 0%" forever. Our own lines say what was loaded and saved.
    Interactively the widgets stay: they update live there.
    """
    if not batch:
        return
    import datasets
    from huggingface_hub.utils import disable_progress_bars
    from transformers.utils import logging as hf_logging

    disable_progress_bars()
    hf_logging.disable_progress_bar()
    datasets.disable_progress_bars()  # trl tokenizes 05's pairs with datasets.map


def quiet_session(batch: bool) -> None:
    """Both of the above: what every notebook's preflight calls."""
    filter_known_warnings()
    plain_progress(batch)
