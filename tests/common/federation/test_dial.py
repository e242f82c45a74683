"""Dialing the miner (`modelshare.common.federation.dial`): a slow handshake is waited for, not cut short.

A loaded miner (a restart with every owner reconnecting, a flood of answers in pieces) can take more than a
second to finish a TLS handshake. The owner's channel must give it that time: gRPC's minimum connect timeout
(20 s by default) must not be shrunk by the channel's reconnect options. The test puts a TCP relay that holds
each new connection for a while before it starts relaying between the owner and a real miner on loopback.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

from modelshare.common.federation.dial import dial_miner
from modelshare.common.federation.kit import TlsFiles
from modelshare.common.federation.pb import federation_pb2 as fpb
from modelshare.common.federation.pb import federation_pb2_grpc as fgrpc
from tests.federation_helpers import make_federation

HOLD_SECONDS = 1.5  # longer than the 0.5 s that once cut every handshake short


def _relay(client: socket.socket, upstream: tuple[str, int], hold: threading.Event, stop: threading.Event) -> None:
    """Hold ``client`` for `HOLD_SECONDS` (a slow miner), then relay bytes both ways until either side closes."""
    with client:
        if stop.wait(HOLD_SECONDS):
            return
        hold.set()
        with socket.create_connection(upstream) as server:
            peers = {client: server, server: client}
            while not stop.is_set():
                ready, _, _ = select.select(list(peers), [], [], 0.2)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    peers[sock].sendall(data)


@contextlib.contextmanager
def slow_relay(upstream: tuple[str, int]) -> Iterator[tuple[str, threading.Event]]:
    """A relay on loopback to ``upstream``; yields its address and an event set once a connection got through."""
    listener = socket.socket()
    listener.bind(("localhost", 0))
    listener.listen()
    stop, relayed = threading.Event(), threading.Event()

    def accept() -> None:
        while not stop.is_set():
            ready, _, _ = select.select([listener], [], [], 0.2)
            if ready:
                client, _ = listener.accept()
                threading.Thread(target=_relay, args=(client, upstream, relayed, stop), daemon=True).start()

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield f"localhost:{listener.getsockname()[1]}", relayed
    finally:
        stop.set()
        acceptor.join()
        listener.close()


def test_an_owner_waits_for_a_slow_handshake_rather_than_failing_it(tmp_path: Path) -> None:
    with make_federation(tmp_path, ["site-a"]) as fed:
        assert fed.miner is not None
        with slow_relay(("localhost", fed.miner.port)) as (address, relayed):
            channel = dial_miner(address, TlsFiles.in_kit(fed.kits["site-a"]), "miner")
            with channel:
                reply = fgrpc.MinerStub(channel).Health(fpb.HealthRequest(), timeout=15, wait_for_ready=False)
                assert reply.status == "serving"
                assert relayed.is_set()  # the answer came through the held connection
