"""The kernel manager every notebook run starts its kernel with: ZeroMQ over Unix sockets, not TCP ports.

jupyter_client picks a kernel's five TCP ports by binding port 0 and letting go; the kernel binds them a second
later. Two processes starting kernels side by side (make test's workers, the environments papermill-check runs at
once) can pick the same free port in between, and the kernel that loses dies at start ("Address already in use"),
which nbclient reports a minute later as "Kernel didn't respond in 60 seconds". Unix sockets in a folder of the
kernel's own leave nothing to race for.
"""

import os
import shutil
import tempfile

from jupyter_client import AsyncKernelManager
from traitlets import default

# A Unix socket's path is at most 107 bytes on Linux; a sandbox's runtime folder can be longer than that.
SOCKET_PATH_MAX = 107
SOCKET_SUFFIX = "-99"  # the ports jupyter_client numbers the sockets with: 1 to 5 for one kernel


def socket_folder() -> str | None:
    """A fresh folder for one kernel's sockets, short enough for their paths; None where none can be made."""
    for base in ("/tmp", tempfile.gettempdir()):
        try:
            folder = tempfile.mkdtemp(prefix="nbk-", dir=base)
        except OSError:
            continue
        if len(os.path.join(folder, "k") + SOCKET_SUFFIX) <= SOCKET_PATH_MAX:
            return folder
        os.rmdir(folder)
    return None


class IPCKernelManager(AsyncKernelManager):
    """nbclient's default manager with transport `ipc`; TCP as before where no short folder can be made."""

    _socket_folder: str | None = None

    @default("transport")
    def _transport_default(self) -> str:
        self._socket_folder = socket_folder()
        return "tcp" if self._socket_folder is None else "ipc"

    @default("ip")
    def _ip_default(self) -> str:
        if self.transport == "ipc" and self._socket_folder:
            return os.path.join(self._socket_folder, "k")
        return super()._ip_default()

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart)
        if self._socket_folder and not restart:  # a restarted kernel binds in the same folder again
            shutil.rmtree(self._socket_folder, ignore_errors=True)


# papermill passes these to nbclient: `papermill.execute_notebook(..., **ENGINE_KWARGS)`.
ENGINE_KWARGS = {"kernel_manager_class": IPCKernelManager}
