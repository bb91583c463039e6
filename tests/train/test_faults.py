"""Fault injection: kills at random points, damaged checkpoints, two runs at once, changed settings, a full disk.

Every run here is the notebook's pipeline (load, train, final save, summary, verify) on the embedded
default, in a child process forked from a server that imported torch once (so a kill costs no
import time). A child is killed with SIGKILL at a named fault point (nbutils.train.faultpoints);
the next run must reach the target step on its first try (no crash loop) and, with evaluation
off, end with LoRA weights bit-identical to an uninterrupted run's.

Run alone: pytest -m faults
"""

from __future__ import annotations

import errno
import io
import json
import multiprocessing
import os
import random
import time
from pathlib import Path

import pytest

from nbutils.train import checkpoints, faultpoints, runlock

pytestmark = [pytest.mark.faults, pytest.mark.integration]

STEPS, SAVE = 12, 4  # checkpoints at 4, 8, 12; rotation (keep 2) deletes checkpoint-4 at step 12
# 02's parameters and the TrainingArguments these runs change (evaluation off: bit-identical resumes).
PARAMS = dict(max_steps=STEPS, save_steps=SAVE, eval_steps=SAVE, lora_r=8, probe_prompts=0)
ARGS = dict(eval_strategy="no", logging_steps=2, warmup_steps=0)
N_RANDOM_KILLS = 12
# (fault point, how many times it is passed in one uninterrupted run): where a kill can land.
# "write": inside one of the Trainer's torch.save calls (optimizer, scheduler, RNG state; 3 per save), half
# the file written: the kill lands mid-file, as a real one can.
POINTS = {"load": 1, "train": 1, "step": STEPS, "write": 9, "save": 3, "checksums": 4, "marker": 4, "rotate": 1,
          "final_save": 1, "verify": 1}


def _split(cfg_kw: dict) -> tuple[dict, dict]:
    """(02's parameters, TrainingArguments overrides) for one run: a key of ARGS is an argument, the rest parameters."""
    return {**PARAMS, **{k: v for k, v in cfg_kw.items() if k not in ARGS}}, \
        {**ARGS, **{k: v for k, v in cfg_kw.items() if k in ARGS}}


def pipeline(data: str, out: str, cfg_kw: dict, kill_at: str | None = None, log: str | None = None,
             step_sleep: float = 0.0) -> None:
    """What notebook 02 does, with its own recipe: load, train (resuming), final save, verify, summary.
    Runs in a child process."""
    if log:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
    if kill_at:
        os.environ[faultpoints.ENV] = kill_at
        if kill_at.startswith("write:"):
            _kill_mid_write(int(kill_at.split(":")[1]))
    from transformers import TrainerCallback

    from nbutils.harness import notebook_recipe

    class StepPoint(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            faultpoints.point("step")
            time.sleep(step_sleep)

    params, arguments = _split(cfg_kw)
    model, tok, session = notebook_recipe.train(data, out, arguments=arguments, run={"callbacks": [StepPoint()]},
                                                **params)
    notebook_recipe.finish(session, model, tok)


def _kill_mid_write(nth: int) -> None:
    """Patch torch.save (in this child only): the nth call writes half its bytes, then the process is SIGKILLed."""
    import signal

    import torch

    real, calls = torch.save, []

    def save(obj, f, *a, **k):
        calls.append(f)
        if len(calls) == nth:
            buf = io.BytesIO()
            real(obj, buf)
            Path(f).write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
            os.kill(os.getpid(), signal.SIGKILL)
        return real(obj, f, *a, **k)

    torch.save = save


@pytest.fixture(scope="module")
def ctx():
    c = multiprocessing.get_context("forkserver")
    c.set_forkserver_preload(["torch", "transformers", "peft", "bitsandbytes", "datasets", "jupytext",
                              "nbutils.train.training", "nbutils.train.modeling", "nbutils.train.planning",
                              "nbutils.harness.notebook_recipe", "nbutils.data"])
    return c


def run(ctx, data, out, timeout=180, **kw) -> int:
    """Run the pipeline in a child; its exit code (-9: killed)."""
    p = ctx.Process(target=pipeline, args=(str(data), str(out)), kwargs=kw)
    p.start()
    p.join(timeout)
    if p.is_alive():
        p.kill()
        pytest.fail(f"pipeline into {out} still running after {timeout}s")
    return p.exitcode


def finished(out: Path) -> dict:
    """The summary of a finished run, after checking its final checkpoint against its checksums."""
    summary = checkpoints.read_summary(out)
    assert summary["global_step"] == STEPS and summary["stopped_reason"] == "max_steps", summary
    assert summary["checkpoint_complete"] and checkpoints.problems(out / "checkpoint") == []
    return summary


def adapter(out: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(out / "checkpoint" / "adapter_model.safetensors")


def same_weights(a: dict, b: dict) -> bool:
    import torch

    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def reference(ctx, prepared_data, tmp_path_factory):
    """An uninterrupted run, evaluation off: the weights every resumed run must reproduce bit for bit."""
    out = tmp_path_factory.mktemp("reference")
    assert run(ctx, prepared_data, out, cfg_kw={}) == 0
    return adapter(out), finished(out)


def kill_points(n: int, seed: int = 14) -> list[str]:
    """n distinct (point, hit) pairs, seeded: every point once, then random ones."""
    rng = random.Random(seed)
    chosen = [f"{p}:{rng.randint(1, hits)}" for p, hits in POINTS.items()]
    all_pairs = [f"{p}:{h}" for p, hits in POINTS.items() for h in range(1, hits + 1)]
    rng.shuffle(all_pairs)
    chosen += [x for x in all_pairs if x not in chosen]
    return chosen[:n]


@pytest.mark.parametrize("kill_at", kill_points(N_RANDOM_KILLS))
def test_sigkill_anywhere_then_one_rerun_reaches_the_target_bit_identical(ctx, prepared_data, reference, tmp_path, kill_at):
    out = tmp_path / "run"
    code = run(ctx, prepared_data, out, cfg_kw={}, kill_at=kill_at)
    assert code == -9, f"the kill at {kill_at} did not happen (exit {code})"
    log = tmp_path / "rerun.log"
    assert run(ctx, prepared_data, out, cfg_kw={}, log=str(log)) == 0, log.read_text()[-3000:]  # first rerun: no loop
    summary = finished(out)
    assert same_weights(adapter(out), reference[0]), f"resumed after a kill at {kill_at}: weights differ"
    # The summary's loss covers the whole run (from the checkpoint's log history), not the last process's steps.
    assert summary["train_loss"] == pytest.approx(reference[1]["train_loss"], rel=1e-9)
    assert not list(out.rglob("*.tmp-*")) and not list(out.rglob(".trash-*"))


@pytest.mark.parametrize("damage, reason", [
    ("truncate", "adapter_model.safetensors is 100 bytes"),
    ("alter", "optimizer.pt content differs from its SHA-256"),
    ("state_120", "trainer_state.json says step 120, checksums.json 8"),
    ("state_999", "trainer_state.json says step 999, checksums.json 8"),
])
def test_damaged_newest_checkpoint_falls_back_and_says_so(ctx, prepared_data, reference, tmp_path, damage, reason):
    out = tmp_path / "run"
    assert run(ctx, prepared_data, out, cfg_kw={}, kill_at="step:10") == -9  # checkpoints 4 and 8 saved
    newest = out / "trainer" / "checkpoint-8"
    assert checkpoints.problems(newest, resumable=True) == []
    if damage == "truncate":
        f = newest / "adapter_model.safetensors"
        f.write_bytes(f.read_bytes()[:100])
    elif damage == "alter":
        f = newest / "optimizer.pt"
        raw = bytearray(f.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        f.write_bytes(bytes(raw))
    else:
        state = json.loads((newest / "trainer_state.json").read_text())
        (newest / "trainer_state.json").write_text(json.dumps({**state, "global_step": int(damage.split("_")[1])}))
    assert checkpoints.is_complete(newest)  # the marker alone would have trusted it
    log = tmp_path / "rerun.log"
    assert run(ctx, prepared_data, out, cfg_kw={}, log=str(log)) == 0, log.read_text()[-3000:]
    text = log.read_text()
    assert f"skipped {newest}: " in text and reason in text, text[-3000:]
    assert "resuming from" in text and "checkpoint-4 (step 4, verified)" in text
    assert finished(out)["global_step"] == STEPS  # not 999, not 120 + more
    assert same_weights(adapter(out), reference[0])


def test_resume_with_evaluation_on_is_bit_identical(ctx, prepared_data, tmp_path):
    """An uninterrupted run and a resumed one evaluate at different moments. On a CPU with AVX512-BF16, bitsandbytes
    would repack the 4-bit weights (lossily) at the first evaluation, and the two runs would drift apart (2.5e-4 at
    most per LoRA weight after 12 steps, this test with modeling.one_cpu_kernel taken out, on an AMD EPYC with
    AVX512-BF16); the suite keeps its 4-bit layers on one kernel, so they match bit for bit on every CPU."""

    with_eval = {"eval_strategy": "steps", "eval_steps": SAVE}
    ref, out = tmp_path / "reference", tmp_path / "run"
    assert run(ctx, prepared_data, ref, cfg_kw=with_eval) == 0
    assert run(ctx, prepared_data, out, cfg_kw=with_eval, kill_at="step:6") == -9
    assert run(ctx, prepared_data, out, cfg_kw=with_eval) == 0
    a, b = adapter(ref), adapter(out)
    assert all(a[k].equal(b[k]) for k in a), max(float((a[k] - b[k]).abs().max()) for k in a)
    assert finished(out)["train_loss"] == finished(ref)["train_loss"]


def test_resume_with_evaluation_on_without_4bit_is_bit_identical(prepared_data, tmp_path):
    """The same resume with a 16/32-bit base model matches bit for bit too, with no 4-bit kernel involved (a
    time-budget stop, in process: no kill needed to show it)."""
    import itertools

    from nbutils.harness import notebook_recipe

    def train(out, budget_min=690.0, **run):
        params, arguments = _split({"eval_strategy": "steps"})
        model, _, session = notebook_recipe.train(prepared_data, out, arguments=arguments, run=run, load_in_4bit=False,
                                                  time_budget_min=budget_min, **params)
        return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}, session.result

    reference, _ = train(tmp_path / "reference")
    ticks = itertools.count()  # a fake clock: the 7 s budget runs out after a few steps
    _, stopped = train(tmp_path / "run", budget_min=0.12, clock=lambda: next(ticks), session_start=0)
    assert stopped.stopped_reason == "time_budget" and 0 < stopped.global_step < STEPS
    resumed, result = train(tmp_path / "run")
    assert result.resumed_from_step == stopped.global_step and same_weights(resumed, reference)


def test_second_run_into_the_same_output_dir_is_refused(ctx, prepared_data, tmp_path):
    from test_training import _train

    out = tmp_path / "run"
    p = ctx.Process(target=pipeline, args=(str(prepared_data), str(out)),
                    kwargs={"cfg_kw": {}, "step_sleep": 1.0, "log": str(tmp_path / "first.log")})
    p.start()
    try:
        deadline = time.time() + 120
        while not (out / runlock.HOLDER).exists() and time.time() < deadline and p.is_alive():
            time.sleep(0.2)
        assert (out / runlock.HOLDER).exists(), "the first run never took the lock"
        with pytest.raises(runlock.RunLockedError) as err:
            _train(prepared_data, out)
        msg = str(err.value)
        assert f"pid {p.pid}" in msg and "host " in msg and "started " in msg, msg
        assert "another output_dir" in msg and f"delete {out.resolve() / runlock.LOCK}" in msg, msg
    finally:
        p.kill()
        p.join()
    # The kernel dropped the killed run's lock: the next run is not blocked by a stale lock.
    assert run(ctx, prepared_data, out, cfg_kw={}) == 0
    finished(out)


def test_changed_learning_rate_on_resume_is_refused_with_the_difference(ctx, prepared_data, tmp_path):
    out = tmp_path / "run"
    assert run(ctx, prepared_data, out, cfg_kw={}, kill_at="step:6") == -9
    log = tmp_path / "rerun.log"
    assert run(ctx, prepared_data, out, cfg_kw={"learning_rate": 1e-4}, log=str(log)) == 1
    text = log.read_text()
    assert "ResumeMismatchError" in text and "training.learning_rate: checkpoint has 0.003, this run 0.0001" in text, \
        text[-3000:]
    assert "new output_dir" in text and "resume=False" in text
    assert run(ctx, prepared_data, out, cfg_kw={}) == 0  # the same settings again: it resumes
    finished(out)


@pytest.mark.parametrize("error", [
    RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 240960 vs 240852"),
    OSError(errno.ENOSPC, "No space left on device"),
])
def test_full_disk_during_a_save_is_one_clear_error_and_a_rerun_resumes(prepared_data, tmp_path,
                                                                        monkeypatch, error):
    """A patched torch.save writes the first 1000 bytes of checkpoint-8's optimizer.pt, then fails as a full disk does."""
    import torch
    from test_training import _train

    from nbutils.train.diskspace import DiskFullError

    real_save = torch.save

    def full_disk(obj, f, *a, **k):
        if str(f).endswith(os.path.join("checkpoint-8", "optimizer.pt")):
            buf = io.BytesIO()
            real_save(obj, buf)
            Path(f).write_bytes(buf.getvalue()[:1000])
            raise error
        return real_save(obj, f, *a, **k)

    out = tmp_path / "run"
    params, arguments = _split({})
    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(DiskFullError) as err:
        _train(prepared_data, out, arguments, **params)
    msg = str(err.value)
    assert msg.startswith(f"disk full at {out / 'trainer'}: needs ~") and " free; free space or lower keep_checkpoints" \
        in msg and "checkpoint-4 (step 4) is intact" in msg, msg
    assert [p.name for p in checkpoints.checkpoint_dirs(out / "trainer")] == ["checkpoint-4"]  # partial one removed
    assert checkpoints.problems(out / "trainer" / "checkpoint-4", resumable=True) == []
    summary = checkpoints.read_summary(out)
    assert summary["stopped_reason"] == "disk_full" and summary["global_step"] == 4 and not summary["checkpoint_complete"]
    monkeypatch.setattr(torch, "save", real_save)  # space freed
    _, _, resumed = _train(prepared_data, out, arguments, **params)
    assert resumed.resumed_from_step == 4 and resumed.global_step == STEPS


def test_full_disk_during_the_final_save(prepared_data, tmp_path, monkeypatch):
    from nbutils.harness import notebook_recipe
    from nbutils.train.diskspace import DiskFullError

    out = tmp_path / "run"
    params, arguments = _split({})
    model, tok, session = notebook_recipe.train(prepared_data, out, arguments=arguments, **params)

    def full_disk(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(type(tok), "save_pretrained", full_disk)
    size = r"[\d.]+ (MB|GiB)"
    with pytest.raises(DiskFullError, match=rf"disk full at .*run: needs ~{size}, {size} free; .*final checkpoint was not saved"):
        session.save_final(model, tok)
    assert not list(out.glob("checkpoint*")) and checkpoints.read_summary(out)["stopped_reason"] == "disk_full"
    assert checkpoints.problems(out / "trainer" / f"checkpoint-{STEPS}", resumable=True) == []
    monkeypatch.undo()  # space freed: the rerun finds the finished run and saves the final checkpoint
    model, tok, again = notebook_recipe.train(prepared_data, out, arguments=arguments, **params)
    assert again.result.resumed_from_step == STEPS
    assert again.save_final(model, tok) == out / "checkpoint"
    assert checkpoints.problems(out / "checkpoint") == []
