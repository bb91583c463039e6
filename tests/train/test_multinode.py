"""Two machines, as two torchrun "nodes" on this one over loopback (gloo, one process each): 02's script launcher
trains across them with identical LoRA weights into one checkpoint, after one node was killed and both resumed."""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

# Each test starts two launchers and their training processes: the full gate only, not `make test-fast`.
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = str(ROOT / "notebooks" / "02_train_qlora.py")
# One scenario, small on purpose (each node is a launcher, a training process and a 4-bit model on a shared CPU):
# a checkpoint every SAVE steps, node 1 killed after the first, then both resume and finish.
STEPS, SAVE = 30, 10
PARAMS = dict(max_steps=STEPS, eval_steps=SAVE, save_steps=SAVE, per_device_batch_size=8, probe_prompts=0)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node(rank: int, port: int, work: Path, **params) -> subprocess.Popen:
    """One node: torchrun with the rendezvous address of node 0, one training process, in its own process group."""
    args = [a for k, v in params.items() for a in (f"--{k}", str(v))]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1", "--node_rank",
           str(rank), "--master_addr", "127.0.0.1", "--master_port", str(port), "-m", "nbutils.train.launch", NOTEBOOK,
           *args]
    env = {**os.environ, "NBUTILS_WORKING_ROOT": str(work), "NBUTILS_INPUT_ROOT": str(work / "input"),
           "OMP_NUM_THREADS": "1"}
    log = open(work / f"node{rank}.log", "a")  # noqa: SIM115 -- closed with the process
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _both(work: Path, **params) -> tuple[subprocess.Popen, subprocess.Popen]:
    port = _port()
    return _node(0, port, work, **params), _node(1, port, work, **params)


def _kill_tree(pid: int) -> None:
    """SIGKILL a launcher and every process under it (torchrun starts its workers in their own process group)."""
    import psutil

    parent = psutil.Process(pid)
    for proc in [*parent.children(recursive=True), parent]:
        proc.kill()


def _summary(out: Path) -> dict:
    return json.loads((out / "training_summary.json").read_text())


def _log(work: Path, rank: int) -> str:
    return (work / f"node{rank}.log").read_text()


def test_a_killed_node_stops_the_job_then_both_resume_into_one_model_and_one_checkpoint(prepared_data, tmp_path):
    out = tmp_path / "shared"  # the output folder both machines see (shared storage)
    first = _both(tmp_path, data_dir=prepared_data, output_dir=out, **PARAMS)
    marker = out / "trainer" / f"checkpoint-{SAVE}" / "COMPLETE"
    deadline = time.time() + 600
    while not marker.exists() and time.time() < deadline and first[1].poll() is None:
        time.sleep(0.2)
    assert marker.exists(), _log(tmp_path, 0)[-3000:]
    _kill_tree(first[1].pid)  # the second machine dies: its launcher and its training process
    try:
        assert first[0].wait(timeout=300) != 0  # the first one notices (its peer is gone) and stops, instead of hanging
    finally:
        if first[0].poll() is None:
            _kill_tree(first[0].pid)
    assert not (out / "training_summary.json").exists()
    second = _both(tmp_path, data_dir=prepared_data, output_dir=out, **PARAMS)
    for rank, node in enumerate(second):
        assert node.wait(timeout=900) == 0, _log(tmp_path, rank)[-3000:]
    summary = _summary(out)
    assert summary["resumed_from_step"] in range(SAVE, STEPS, SAVE) and summary["global_step"] == STEPS
    assert summary["world_size"] == 2 and summary["checkpoint_complete"]
    assert len(set(summary["replica_checksums"])) == 1  # the LoRA weights are identical on both machines
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("checkpoint")) == ["checkpoint"]
    assert f"resuming from {out / 'trainer' / 'checkpoint-'}" in _log(tmp_path, 0)
    log0, log1 = _log(tmp_path, 0), _log(tmp_path, 1)
    assert f"[train] step {STEPS}/{STEPS}" in log0 and f"[train] step {STEPS}/{STEPS}" not in log1  # one log, node 0's
    assert "one of 2 processes" in log0  # the plan's mode row: a rank of a launched job
