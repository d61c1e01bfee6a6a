"""Run the notebooks' kernels over IPC (Unix domain sockets) instead of TCP.

With its default TCP transport every kernel the build starts printed ``[IPKernelApp] WARNING | Kernel is
running over TCP without encryption ... Use IPC transport or launch with kernel manager-provisioned CurveZMQ
keys`` (ipykernel >= 7.4, ``IPKernelApp.init_sockets``): one line per executed notebook. The kernel takes its
transport from the connection file its manager writes (jupyter_client's ``KernelManager.transport``), so the
manager must ask for IPC. No configuration reaches that manager: MyST-NB executes a notebook with jupyter-cache's
``single_nb_execution``, which builds ``nbclient.NotebookClient(**kwargs)`` with an empty traitlets config (no
jupyter config file is read) and MyST-NB passes no keyword arguments (it has no ``nb_*`` option for the kernel
manager). This extension passes nbclient's own option for it, ``kernel_manager_class``, by wrapping the
``single_nb_execution`` that MyST-NB's executors call (:data:`CLIENT_OPTIONS`, :func:`execute`).

IPC needs libzmq's ``ipc`` transport (Linux, macOS; :func:`zmq.has`). Where it is missing the kernels keep TCP
and the build says so once. ``scripts/build_docs.sh`` fails when the build log shows an ``[IPKernelApp] WARNING``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import uuid

import zmq
from jupyter_cache.executors.utils import single_nb_execution
from jupyter_client.manager import AsyncKernelManager
from sphinx.errors import ExtensionError
from sphinx.util import logging
from traitlets import default

logger = logging.getLogger(__name__)


_SOCKETS: list[str] = []  # the folder of this process's kernel sockets, made on first use


def _socket_folder() -> str:
    """A folder only this user can enter (``mkdtemp``: mode 0700), removed when the process ends."""
    if not _SOCKETS:
        _SOCKETS.append(tempfile.mkdtemp(prefix="attnsvm-kernels-"))
        atexit.register(shutil.rmtree, _SOCKETS[0], True)
    return _SOCKETS[0]


class IPCKernelManager(AsyncKernelManager):
    """nbclient's default kernel manager (``AsyncKernelManager``) whose kernels talk over IPC.

    A kernel's sockets are the files ``<ip>-<port>``. jupyter_client's default ``ip`` for IPC is the relative
    path ``kernel-ipc``, which the kernel binds in its own working folder (the notebook's) and the manager looks
    for in the build's: they differ, and the kernel "didn't respond". Here ``ip`` is an absolute path, unique per
    kernel, in a private temporary folder (short: a Unix socket's path has at most about 100 bytes)."""

    @default("transport")
    def _transport_default(self) -> str:
        return "ipc"

    @default("ip")
    def _ip_default(self) -> str:
        return os.path.join(_socket_folder(), f"kernel-{uuid.uuid4().hex[:12]}")


#: the options the docs build gives ``nbclient.NotebookClient`` for every notebook it executes
CLIENT_OPTIONS = {"kernel_manager_class": IPCKernelManager} if zmq.has("ipc") else {}


def execute(nb, *args, **kwargs):
    """jupyter-cache's ``single_nb_execution(nb, cwd, timeout, allow_errors, ...)`` with :data:`CLIENT_OPTIONS`
    (a caller's own keyword arguments win)."""
    return single_nb_execution(nb, *args, **{**CLIENT_OPTIONS, **kwargs})


def setup(app):
    from myst_nb.core.execute import cache, direct

    for module in (direct, cache):  # the executors of nb_execution_mode "force"/"auto" and "cache"
        if getattr(module, "single_nb_execution", None) not in (single_nb_execution, execute):
            raise ExtensionError(f"kernel_transport: {module.__name__} no longer executes notebooks with "
                                 "jupyter_cache's single_nb_execution; pass the kernel manager another way")
        module.single_nb_execution = execute
    if not CLIENT_OPTIONS:
        logger.info("kernel_transport: this libzmq has no ipc transport; notebook kernels use TCP")
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
