"""Whether 04 runs its GGUF in llama.cpp: verify_runtime=False skips it and says so, "auto" says why where llama.cpp
cannot be built, True refuses to go on without it."""

import pytest

from nbutils.export import ggufruntime, llamaruntime


def _start(verify_runtime, chats=(({"role": "user", "content": "hi"},),)):
    return ggufruntime.start(verify_runtime, lambda: None, None, [list(c) for c in chats], [], [], [1], False)


def test_verify_runtime_false_skips_and_says_so():
    for value in (False, "False"):
        runtime = _start(value)
        assert runtime["checked"] is False and runtime["reason"].startswith("verify_runtime=False")
        assert ggufruntime.text(runtime).startswith("not run in llama.cpp: verify_runtime=False")


def test_auto_says_why_without_a_runtime_and_true_refuses(monkeypatch):
    monkeypatch.setattr(llamaruntime, "probe", lambda sources: (None, "no C++ compiler here"))
    runtime = _start("auto")
    assert runtime["checked"] is False and "no C++ compiler here" in runtime["reason"]
    with pytest.raises(RuntimeError, match="verify_runtime=True but llama.cpp's runtime cannot be built here"):
        _start(True)
