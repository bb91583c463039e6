"""The probes: each notebook's work re-run on a twin, its peak measured from what was resident before it."""

from pathlib import Path

import pytest

from nbutils.plan import probes


def test_the_peak_resets_to_what_is_resident():
    resident = probes._reset()
    assert resident > 0 and probes._status("VmHWM") <= resident * 1.05
    held = bytearray(64 * 2**20)  # 64 MB touched: the peak grows by it
    held[::4096] = b"x" * len(held[::4096])
    assert probes._status("VmHWM") - resident > 60 * 2**20
    del held


@pytest.mark.integration  # one fresh process, the embedded twin at 2 and 4 layers: 1-2 minutes on 2 cores
def test_the_probes_measure_each_notebooks_work_on_the_twin(tmp_path, embedded_dir):
    from transformers import AutoConfig

    from nbutils import embedded
    from nbutils.plan import probes, shrink

    source = Path(embedded.resolve_model("embedded"))
    twin, deeper = shrink.build(source, tmp_path / "twin"), shrink.build(source, tmp_path / "deeper", times=2)
    assert AutoConfig.from_pretrained(deeper).num_hidden_layers == 2 * AutoConfig.from_pretrained(twin).num_hidden_layers
    jobs = [("train", str(f), {"batch": 4, "seq": 64, "loss": "chunked"}) for f in (twin, deeper)]
    jobs += [("infer", str(twin), {"rows": 4, "prompt": 16, "new_tokens": 4, "tokens": 256, "longest": 64,
                                   "loss": "chunked"}), ("merge", str(twin), {"prompt": 16})]
    peaks = probes.measure_all(jobs, tmp_path / "work")
    assert len(peaks) == 4 and all(p > 0 for p in peaks)
