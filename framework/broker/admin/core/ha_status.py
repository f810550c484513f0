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

__all__ = ["HAClientInfo", "HAConnectionInfo", "encode_master_ha_info", "encode_slave_ha_info",
           "java_socket_address"]


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


def encode_master_ha_info(max_offset: int, connections: Iterable[HAConnectionInfo]) -> bytes:
    """The body of a master whose log ends at ``max_offset``."""
    rows = [{"addr": c.address, "slaveAckOffset": c.ack_offset,
             "diff": max(0, max_offset - c.ack_offset) if c.ack_offset >= 0 else -1,
             "inSync": c.in_sync, "transferredByteInSecond": c.bytes_per_second,
             "transferFromWhere": c.transfer_from}
            for c in sorted(connections, key=lambda c: c.address)]
    # RocketMQ's master sends its unused client info, the address unset.
    return _encode(True, max_offset, rows, {"transferredByteInSecond": 0, "maxOffset": 0,
                                            "lastReadTimestamp": 0, "lastWriteTimestamp": 0})


def encode_slave_ha_info(client: HAClientInfo) -> bytes:
    """The body of a slave."""
    return _encode(False, 0, [], {"masterAddr": client.master_address,
                                  "transferredByteInSecond": client.bytes_per_second,
                                  "maxOffset": client.max_offset,
                                  "lastReadTimestamp": client.last_read_ms,
                                  "lastWriteTimestamp": client.last_write_ms})


def _encode(master: bool, max_offset: int, rows: list[dict[str, object]],
            client: dict[str, object]) -> bytes:
    return json.dumps({
        "master": master, "masterCommitLogMaxOffset": max_offset,
        "inSyncSlaveNums": sum(1 for r in rows if r["inSync"]), "haConnectionInfo": rows,
        "haClientRuntimeInfo": {**client, "masterFlushOffset": 0},
    }, sort_keys=True, separators=(",", ":")).encode()
