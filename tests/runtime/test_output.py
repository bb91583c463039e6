"""The session's output filters: exactly the known harmless messages go, everything else still shows."""

import logging
import unittest
import warnings

import pytest

from nbutils.runtime import output


@pytest.fixture
def restored():
    with warnings.catch_warnings():
        logger = logging.getLogger(output.BNB_CPU_LOGGER)
        filters = list(logger.filters)
        from transformers.utils import logging as hf_logging

        bars = hf_logging.is_progress_bar_enabled()
        yield
        logger.filters[:] = filters
        hf_logging.enable_progress_bar() if bars else hf_logging.disable_progress_bar()


def test_only_the_known_deprecation_aliases_are_filtered(restored):
    output.filter_known_warnings()
    with warnings.catch_warnings(record=True) as caught:
        warnings.warn("`gradient_checkpointing_enable` is deprecated and will be removed in v6.", FutureWarning, stacklevel=1)
        warnings.warn("`is_gradient_checkpointing` is deprecated and will be removed in v6.", FutureWarning, stacklevel=1)
        warnings.warn("`something_else` is deprecated", FutureWarning, stacklevel=1)
        warnings.warn("`gradient_checkpointing_enable` is deprecated", UserWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["`something_else` is deprecated",
                                                "`gradient_checkpointing_enable` is deprecated"]


def test_the_bitsandbytes_cpu_kernel_message_is_dropped_and_nothing_else(restored):
    output.filter_known_warnings()
    output.filter_known_warnings()  # idempotent: one filter
    logger = logging.getLogger(output.BNB_CPU_LOGGER)
    assert sum(isinstance(f, output._DropMessage) for f in logger.filters) == 1
    with unittest.TestCase().assertLogs(logger, logging.WARNING) as logged:  # (pytest's log capture is off)
        logger.warning("Failed to load CPU gemm_4bit_forward from kernels-community: %s. Please ...", "No module")
        logger.warning("something that matters")
    assert [r.getMessage() for r in logged.records] == ["something that matters"]


@pytest.mark.parametrize("batch", [True, False])
def test_library_bars_are_off_in_a_batch_run_only(restored, batch):
    from transformers.utils import logging as hf_logging

    hf_logging.enable_progress_bar()
    output.plain_progress(batch)
    assert hf_logging.is_progress_bar_enabled() is not batch
