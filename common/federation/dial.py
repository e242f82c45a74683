"""Dialing the miner: one gRPC channel factory for owners, the admin, simulate and tests.

The miner's certificate is checked against the project CA and its expected party name (not the
address dialled, which may be an IP or a NAT'd name), so ``grpc.ssl_target_name_override`` is set
to the miner's name, which provisioning puts in the certificate's SAN.
"""

from __future__ import annotations

import grpc

from modelshare.common.federation.kit import TlsFiles

__all__ = ["dial_miner", "MAX_MESSAGE_BYTES"]

MAX_MESSAGE_BYTES = 64 * 1024 * 1024


def dial_miner(address: str, tls: TlsFiles | None, miner_name: str) -> grpc.Channel:
    """A channel to the miner at ``address``: mutual TLS with ``tls``, plaintext when it is None."""
    options: list[tuple[str, int | str]] = [
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.enable_retries", 0),
        # gRPC's own reconnection backoff (up to 120 s by default) would keep a channel failing fast long after a
        # restarted miner serves again; capped here so the owner's jittered retries
        # (`modelshare.owner_node.daemon.Backoff`) find it connected within seconds. The minimum connect timeout
        # stays gRPC's 20 s (``grpc.min_reconnect_backoff_ms`` would set it too): a loaded miner's slow TLS
        # handshake is waited for, not cut short and retried.
        ("grpc.initial_reconnect_backoff_ms", 500),
        ("grpc.max_reconnect_backoff_ms", 3000),
    ]
    if tls is None:
        return grpc.insecure_channel(address, options=options)
    options.append(("grpc.ssl_target_name_override", miner_name))
    return grpc.secure_channel(address, tls.channel_credentials(), options=options)
