"""Small parts of the simulated broker: settings, put messages, in-memory store, terms.

``MemLog`` is an in-memory commit log of message records with what
replication and role changes call on ``framework.store.CommitLog``; it
flushes synchronously (SYNC_FLUSH), so a crash can only tear the write in
progress. ``EpochFile`` is the epoch checkpoint, saved atomically.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

import attrs

from framework.ha.epoch import EpochCache
from framework.ha.master import MasterConnection
from framework.ha.slave import SlaveConnection
from framework.ha.sync_replication import ReplicationStatus, SyncReplication
from framework.ha.sync_state import SyncStateTracker
from framework.store import ScratchAppend, ScratchRead, read_into_by_read
from framework.testing.clustersim_net import Stream


@attrs.frozen
class BrokerSettings:
    """Broker and HA timing (ms; the config keys' names)."""

    broker_heartbeat_interval: int = 100
    sync_controller_metadata_period: int = 300
    ha_send_heartbeat_interval: int = 100
    ha_max_time_slave_not_catchup: int = 1000
    check_sync_state_set_period: int = 200
    ha_transfer_batch_size: int = 1024
    reconnect_min: int = 50
    reconnect_max: int = 400
    put_timeout: int = 1000
    client_timeout: int = 3000
    attempt_timeout: int = 1000
    #: The synchronous replication rule; False (RocketMQ's default with
    #: min_in_sync_replicas 1) acks on the master alone, which the invariants catch.
    all_ack_in_sync_state_set: bool = True


@attrs.frozen
class PutRequest:
    """A producer's synchronous put of ``body``."""

    id: int
    body: bytes


@attrs.frozen
class PutResponse:
    """How a put ended (``status`` None: this broker is not the master)."""

    id: int
    status: ReplicationStatus | None


class MemLog(ScratchAppend, ScratchRead):
    """An in-memory commit log of message records (the ``ReplicaLog`` and ``TermLog`` calls)."""

    segment_size = 1 << 20

    def __init__(self) -> None:
        self.data = bytearray()

    @property
    def min_offset(self) -> int:
        return 0

    @property
    def max_offset(self) -> int:
        return len(self.data)

    def read(self, offset: int, size: int) -> bytes:
        return bytes(self.data[offset:offset + size])

    def read_into(self, offset: int, buffer: bytearray | memoryview) -> int:
        return read_into_by_read(self.read, offset, buffer)

    def append_raw(self, offset: int, data: bytes | memoryview) -> int:
        if offset != len(self.data):
            raise AssertionError(f"append at {offset}, log ends at {len(self.data)}")
        self.data += data
        return len(self.data)

    def truncate(self, offset: int) -> None:
        del self.data[offset:]

    def truncate_to_last_whole_record(self) -> int:
        pos = 0
        while pos + 4 <= len(self.data):
            size = int.from_bytes(self.data[pos:pos + 4], "big")
            if size <= 0 or pos + size > len(self.data):
                break
            pos += size
        del self.data[pos:]
        return pos


class EpochFile:
    """The epoch checkpoint: saved atomically, survives crashes."""

    def __init__(self) -> None:
        self.cache = EpochCache()

    def load(self) -> EpochCache:
        return self.cache

    def save(self, cache: EpochCache) -> None:
        self.cache = cache


async def inline(function: Callable[..., Any], *args: Any) -> Any:
    """An ``Offload`` that calls ``function`` at once (the simulation has no threads)."""
    return function(*args)


def run_inline(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine that never suspends (the role helpers with an inline offload)."""
    try:
        coroutine.send(None)
    except StopIteration as stop:
        return stop.value
    raise AssertionError("a role change suspended")


class Term:
    """One role held from one change to the next (ReplicasManager's ``_Term``)."""

    def __init__(self, role: str, epoch: int, master: str, epochs: EpochCache) -> None:
        self.role = role
        self.epoch = epoch
        self.master = master
        self.epochs = epochs
        self.tasks: list[int] = []
        # Master side.
        self.tracker: SyncStateTracker | None = None
        self.puts: SyncReplication | None = None
        self.conns: dict[int, tuple[Stream, MasterConnection]] = {}
        self.proposals: deque[frozenset[str]] = deque()
        self.waiters: dict[object, tuple[str, int, int, bytes]] = {}
        self.reporting = False
        self.fenced = False
        # Slave side.
        self.stream: Stream | None = None
        self.conn: SlaveConnection | None = None
        self.confirm_offset = -1
        self.retry_at = 0
        self.backoff = 0
