"""The harness's kernel manager: kernels talk over Unix sockets, so a TCP port another process holds (the race
two side-by-side runs lose at kernel start) cannot stop one, and the sockets' folder goes with the kernel."""

import asyncio
import os
import socket

import pytest

from nbutils.harness import ipc_kernels
from nbutils.harness.runner import KERNEL_ARGS


async def _answers(km) -> bool:
    await km.start_kernel(extra_arguments=KERNEL_ARGS)
    kc = km.client()
    kc.start_channels()
    try:
        await kc.wait_for_ready(timeout=60)
        return True
    finally:
        kc.stop_channels()
        await km.shutdown_kernel(now=True)


def _held_port_kernel(manager, port: int):
    # cache_ports=False: otherwise jupyter_client's own port cache replaces the ports given with ones it picks
    return manager(kernel_name="python3", shell_port=port, cache_ports=False)


@pytest.mark.integration
def test_a_kernel_starts_on_a_port_another_process_holds_and_leaves_no_socket_behind():
    from jupyter_client import AsyncKernelManager

    with socket.socket() as held:  # what the losing kernel met in CI: its port bound by someone else meanwhile
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises((RuntimeError, asyncio.TimeoutError)):  # the fault is real: over TCP the kernel dies
            asyncio.run(asyncio.wait_for(_answers(_held_port_kernel(AsyncKernelManager, port)), 30))
        km = _held_port_kernel(ipc_kernels.IPCKernelManager, port)
        assert km.transport == "ipc" and len(km.ip + ipc_kernels.SOCKET_SUFFIX) <= ipc_kernels.SOCKET_PATH_MAX
        folder = os.path.dirname(km.ip)
        assert asyncio.run(_answers(km))
    assert not os.path.exists(folder)


def test_without_a_short_enough_folder_it_stays_on_tcp(monkeypatch, tmp_path):
    deep = tmp_path / ("d" * 120)
    deep.mkdir()
    monkeypatch.setattr(ipc_kernels.tempfile, "mkdtemp", lambda prefix, dir: str(deep))
    monkeypatch.setattr(ipc_kernels.os, "rmdir", lambda path: None)
    assert ipc_kernels.socket_folder() is None
    km = ipc_kernels.IPCKernelManager(kernel_name="python3")
    assert km.transport == "tcp" and km.ip == "127.0.0.1"


def test_papermill_hands_the_manager_to_nbclient():
    import papermill.engines

    client = papermill.engines.PapermillNotebookClient
    assert issubclass(ipc_kernels.IPCKernelManager, client.kernel_manager_class.klass)
    assert set(ipc_kernels.ENGINE_KWARGS) <= set(client.class_trait_names())
