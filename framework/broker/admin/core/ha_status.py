"""GET_BROKER_HA_STATUS's body: a broker's replication as ``mqadmin haStatus`` reads it. Pure.

RocketMQ answers GET_BROKER_HA_STATUS (907) with its ``HARuntimeInfo`` as
JSON. A master sets ``master`` and lists each slave connection
(``haConnectionInfo``): the far end's socket address as Java prints an
``InetSocketAddress`` (``/127.0.0.1:40321``), the slave's acked offset,
what it lacks of the master's log (``diff``), whether it is in the
SyncStateSet (``inSync``; ``mqadmin`` prints ``OK`` or ``Fall Behind``),
the bytes sent to it in the last whole second and where its next transfer
starts. A slave fills ``haClientRuntimeInfo``: its master's HA address, its
own log's end, the bytes received in the last whole second and when it last
read from and wrote to its master (epoch ms; 0 before its first connection).
``masterFlushOffset`` is 0: a triomq slave is not told its master's flushed
offset (a RocketMQ slave shows 0 too until it is).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import attrs

__all__ = ["HAClientInfo", "HAConnectionInfo", "encode_ha_runtime_info", "java_socket_address"]


@attrs.frozen
class HAConnectionInfo:
    """One slave connection of a master."""

    address: str
    ack_offset: int
    in_sync: bool
    bytes_per_second: int
    transfer_from: int


@attrs.frozen
class HAClientInfo:
    """A slave's connection to its master; times in epoch ms, 0 when never."""

    master_address: str
    max_offset: int
    bytes_per_second: int
    last_read_ms: int
    last_write_ms: int


def java_socket_address(peer: str) -> str:
    """``host:port`` as Java's ``InetSocketAddress.toString`` gives a resolved one."""
    return peer if peer.startswith("/") or ":" not in peer else f"/{peer}"


def encode_ha_runtime_info(*, master_max_offset: int | None,
                           connections: Iterable[HAConnectionInfo] = (),
                           client: HAClientInfo | None = None) -> bytes:
    """The body for a master (``master_max_offset`` given) or a slave (``client``)."""
    if master_max_offset is not None:
        rows = [{"addr": c.address, "slaveAckOffset": c.ack_offset,
                 "diff": max(0, master_max_offset - c.ack_offset) if c.ack_offset >= 0 else -1,
                 "inSync": c.in_sync, "transferredByteInSecond": c.bytes_per_second,
                 "transferFromWhere": c.transfer_from}
                for c in sorted(connections, key=lambda c: c.address)]
        body: dict[str, object] = {
            "master": True, "masterCommitLogMaxOffset": master_max_offset,
            "inSyncSlaveNums": sum(1 for r in rows if r["inSync"]), "haConnectionInfo": rows,
            # RocketMQ's master sends its unused client info, the address unset.
            "haClientRuntimeInfo": {"transferredByteInSecond": 0, "maxOffset": 0,
                                    "lastReadTimestamp": 0, "lastWriteTimestamp": 0,
                                    "masterFlushOffset": 0}}
    else:
        info = client or HAClientInfo("", -1, 0, 0, 0)
        body = {
            "master": False, "masterCommitLogMaxOffset": 0, "inSyncSlaveNums": 0,
            "haConnectionInfo": [],
            "haClientRuntimeInfo": {"masterAddr": info.master_address,
                                    "transferredByteInSecond": info.bytes_per_second,
                                    "maxOffset": info.max_offset,
                                    "lastReadTimestamp": info.last_read_ms,
                                    "lastWriteTimestamp": info.last_write_ms,
                                    "masterFlushOffset": 0}}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
