"""Two machines, as two torchrun "nodes" on this one over loopback (gloo, one process each): 02's script launcher
trains across them with identical LoRA weights, one checkpoint, and resumes after one node is killed."""

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
PARAMS = dict(max_steps=60, eval_steps=20, save_steps=20, per_device_batch_size=8, probe_prompts=0)


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


@pytest.fixture(scope="module")
def two_nodes(prepared_data, tmp_path_factory):
    work = tmp_path_factory.mktemp("nodes")
    out = work / "shared"  # the output folder both machines see (shared storage)
    nodes = _both(work, data_dir=prepared_data, output_dir=out, **PARAMS)
    for rank, node in enumerate(nodes):
        assert node.wait(timeout=900) == 0, _log(work, rank)[-3000:]
    return work, out


def test_two_nodes_train_one_model_into_one_checkpoint(two_nodes):
    work, out = two_nodes
    summary = _summary(out)
    assert summary["global_step"] == 60 and summary["world_size"] == 2
    assert len(set(summary["replica_checksums"])) == 1  # the LoRA weights are identical on both machines
    assert summary["checkpoint_complete"]
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("checkpoint")) == ["checkpoint"]
    assert "[train] step 60/60" in _log(work, 0) and "[train] step 60/60" not in _log(work, 1)  # one log, node 0's
    assert "one of 2 processes" in _log(work, 0)  # the plan's mode row: a rank of a launched job


def test_a_killed_node_stops_the_job_and_both_resume_from_the_last_checkpoint(prepared_data, tmp_path):
    out = tmp_path / "shared"
    first = _both(tmp_path, data_dir=prepared_data, output_dir=out, **{**PARAMS, "max_steps": 200})
    marker = out / "trainer" / "checkpoint-20" / "COMPLETE"
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
    second = _both(tmp_path, data_dir=prepared_data, output_dir=out, **{**PARAMS, "max_steps": 200})
    for rank, node in enumerate(second):
        assert node.wait(timeout=900) == 0, _log(tmp_path, rank)[-3000:]
    summary = _summary(out)
    assert summary["resumed_from_step"] in (20, 40, 60, 80) and summary["global_step"] == 200
    assert summary["world_size"] == 2 and len(set(summary["replica_checksums"])) == 1
    assert f"resuming from {out / 'trainer' / 'checkpoint-'}" in _log(tmp_path, 0)
