"""gpu_spawn: fresh processes for make gpu-proof's measurements."""

import pytest

from bench import gpu_spawn


def test_a_gpu_run_spawns_each_measurement_the_cpu_run_forks_them_from_a_preloaded_server():
    assert gpu_spawn._context(True).get_start_method() == "spawn"  # a process's CUDA context, cap and peak are its own
    assert gpu_spawn._context(False).get_start_method() == "forkserver"


def test_a_task_that_raises_gives_its_failure_in_its_place_and_the_others_their_results(monkeypatch):
    import multiprocessing

    monkeypatch.setattr(gpu_spawn, "_context", lambda cuda: multiprocessing.get_context("fork"))  # no 6 s preload
    assert gpu_spawn.tasks([(int, ("7",)), (int, ("x",)), (abs, (-2,))]) == [
        7, gpu_spawn.Failed("ValueError: invalid literal for int() with base 10: 'x'"), 2]


def test_one_raises_the_failure_of_its_process(monkeypatch):
    import multiprocessing

    monkeypatch.setattr(gpu_spawn, "_context", lambda cuda: multiprocessing.get_context("fork"))
    assert gpu_spawn.one(abs, -3) == 3
    with pytest.raises(RuntimeError, match="ValueError: invalid literal"):
        gpu_spawn.one(int, "x")
