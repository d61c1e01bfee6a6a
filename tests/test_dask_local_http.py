"""The local Dask cluster the runner starts serves its scheduler's HTTP routes on this machine only, on a free port,
without a warning beside another cluster (``dashboard_address=None`` still serves them at port 8787 and warns "Port
8787 is already in use" when another cluster holds it; the docs' Dask tutorial failed its output check that way)."""

import contextlib
import socket
import warnings

import pytest

pytest.importorskip("dask.distributed")

from attnsvm.runner.executors import DaskCluster  # noqa: E402


def test_local_cluster_http_is_local_and_on_a_free_port():
    with contextlib.ExitStack() as stack:
        held = socket.socket()
        stack.callback(held.close)
        try:  # hold 8787 as another cluster would (where something else holds it already, so much the better)
            held.bind(("0.0.0.0", 8787))
            held.listen(1)
        except OSError:
            pass
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            client, cluster = DaskCluster(workers=1)._connect()
        try:
            address, port = cluster.scheduler.http_server.address, cluster.scheduler.http_server.port
        finally:
            client.close()
            cluster.close()
    assert address == "127.0.0.1", address
    assert port != 8787
    assert not [w for w in caught if "already in use" in str(w.message)], [str(w.message) for w in caught]
