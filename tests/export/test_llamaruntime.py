"""The runtime probe's runner (nbutils.export.llamaruntime), on stand-in programs: the request goes in, result.json
and llama.cpp's warnings come back, a failure says what llama.cpp said last, and logits are read as written. The
real probe runs in tests/export/test_runtimecheck.py."""

import json

import numpy as np
import pytest

from nbutils.export import llamabuild, llamaruntime


def _program(path, body: str):
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def test_the_request_goes_in_and_the_result_comes_back_with_the_warnings(tmp_path):
    # The stand-in copies the request into result.json (args: model, request, out dir, [lora]).
    fake = _program(tmp_path / "probe", 'cp "$2" "$3/result.json"; echo "llama: a warning" >&2\n')
    result = llamaruntime.run(fake, tmp_path / "m.gguf", {"threads": 1, "logits": [[1, 2]]}, tmp_path / "out")
    assert result == {"threads": 1, "logits": [[1, 2]], "warnings": ["llama: a warning"]}
    assert json.loads((tmp_path / "out" / "request.json").read_text())["logits"] == [[1, 2]]


def test_a_failure_names_the_file_the_lora_and_what_llama_cpp_said_last(tmp_path):
    fake = _program(tmp_path / "probe", 'for i in 1 2 3 4; do echo "line $i" >&2; done; exit 3\n')
    with pytest.raises(llamaruntime.ProbeFailed, match=r"could not run m.gguf with a.gguf \(exit code 3\): "
                                                       r"line 2 \| line 3 \| line 4"):
        llamaruntime.run(fake, tmp_path / "m.gguf", {}, tmp_path / "out", lora=tmp_path / "a.gguf")
    quiet = _program(tmp_path / "quiet", "exit 0\n")  # no result.json: a failure too
    with pytest.raises(llamaruntime.ProbeFailed, match=r"\(exit code 0\): \(no output\)"):
        llamaruntime.run(quiet, tmp_path / "m.gguf", {}, tmp_path / "out2")


def test_logits_are_read_as_the_probe_wrote_them(tmp_path):
    rows = np.arange(12, dtype=np.float32).reshape(3, 4)
    rows.tofile(tmp_path / "logits-0.f32")
    got = llamaruntime.logits({"file": str(tmp_path / "logits-0.f32"), "rows": 3, "n_vocab": 4})
    assert np.array_equal(np.asarray(got), rows)


def test_a_cached_probe_is_used_without_the_sources(monkeypatch):
    monkeypatch.setattr(llamabuild, "find_probe", lambda folder=None: "/cache/bin/nbutils-llama-probe")
    assert llamaruntime.probe(lambda: pytest.fail("the sources are not needed")) == \
        ("/cache/bin/nbutils-llama-probe", "cached build")
    monkeypatch.setattr(llamabuild, "find_probe", lambda folder=None: None)
    monkeypatch.setattr(llamabuild, "ensure", lambda sources: (None, "no C++ compiler here"))
    assert llamaruntime.probe(lambda: None) == (None, "no C++ compiler here")
