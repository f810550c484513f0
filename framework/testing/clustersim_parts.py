"""Small parts of the simulated broker: settings, put messages, in-memory store, terms.

``MemLog`` is an in-memory commit log of message records with what
replication, role changes and pulls call on ``triomq.store.CommitLog``; it
flushes synchronously (SYNC_FLUSH), so a crash can only tear the write in
progress. Its records are encoded by the store's own rule
(``commitlog_layout.pack_records``: physical and queue offsets assigned) and
its consume queues are what the store's indexing rule
(``commitlog_layout.index_records``) finds in its whole records, on a master
and a slave alike. ``EpochFile`` is the epoch checkpoint, saved atomically.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Sequence

import attrs

from triomq.broker.send.core.put_flow import PutFlow
from triomq.ha.core.epoch import EpochCache, EpochStore
from triomq.ha.core.master import MasterConnection
from triomq.ha.core.master_term import HAMasterConfig, MasterTerm
from triomq.ha.core.reconnect import Reconnect
from triomq.ha.core.role_change import (
    EndTerm,
    LoadEpochs,
    RoleChange,
    RoleChangeAction,
    StartTerm,
    TermLog,
    TruncateTornTail,
)
from triomq.ha.core.slave import SlaveConnection
from triomq.protocol import message
from triomq.protocol.commitlog_layout import (
    CQ_ENTRY_SIZE,
    index_records,
    pack_records,
    unpack_cq_entry,
)
from triomq.protocol.message import MessageRecord, RecordError
from triomq.protocol.remoting import RemotingCommand
from triomq.store import QueueEntry, ScratchAppend, ScratchRead, read_into_by_read
from triomq.testing.clustersim_net import Stream

#: The simulated cluster and its one broker group.
CLUSTER, GROUP = "sim-cluster", "broker-a"
#: The topic the producer sends to and the consumers read, and its queues.
TOPIC, TOPIC_QUEUES = "sim", 4
#: Where delayed and timer messages wait before their delivery.
WAITING_TOPICS = ("SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer")

#: The HA master's settings in the simulation. ``all_ack_in_sync_state_set``
#: False (RocketMQ's default with min_in_sync_replicas 1) acks on the master
#: alone, which the invariants catch.
SIM_MASTER = HAMasterConfig(ha_transfer_batch_size=1024, ha_send_heartbeat_interval=100,
                            ha_max_time_slave_not_catchup=1000, check_sync_state_set_period=200,
                            all_ack_in_sync_state_set=True)


@attrs.frozen
class BrokerSettings:
    """Broker and HA timing (ms; the config keys' names)."""

    broker_heartbeat_interval: int = 100
    sync_controller_metadata_period: int = 300
    #: The master's; a slave acks every ``master.ha_send_heartbeat_interval`` too.
    master: HAMasterConfig = SIM_MASTER
    reconnect_min: int = 50
    reconnect_max: int = 400
    put_timeout: int = 1000
    client_timeout: int = 3000
    attempt_timeout: int = 1000
    #: The pause after every controller was tried (``ControllerClient``'s retry_interval).
    client_retry_interval: int = 50
    #: Name-server registration; heartbeats go every ``broker_heartbeat_interval``.
    register_name_server_period: int = 1000
    #: The silence after which name servers drop this broker (sent as heartbeatTimeoutMillis).
    broker_not_active_timeout: int = 1000
    #: A failed registration is sent again after this (the broker service's rule).
    namesrv_retry_interval: int = 1000
    namesrv_request_timeout: int = 1000
    #: Consumer offsets: written to their file, and a slave's copy of its master's.
    flush_consumer_offset_interval: int = 1000
    slave_synchronize_period: int = 500


@attrs.frozen
class PutRequest:
    """A producer's synchronous put: its SEND_MESSAGE_V2 request."""

    id: int
    command: RemotingCommand


@attrs.frozen
class PutResponse:
    """The broker's answer to a put, as its processor answers it."""

    id: int
    command: RemotingCommand


class MemLog(ScratchAppend, ScratchRead):
    """An in-memory commit log of message records (the ``ReplicaLog`` and ``TermLog`` calls)."""

    segment_size = 1 << 20

    def __init__(self) -> None:
        self.data = bytearray()
        #: (topic, queue id) -> its consume queue, entry i at queue offset i.
        self._queues: dict[tuple[str, int], list[QueueEntry]] = {}
        #: The records below this offset are in the consume queues.
        self._indexed = 0

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

    def read_record(self, offset: int) -> MessageRecord:
        """The record starting at ``offset`` (``RecordError`` if none does)."""
        size = int.from_bytes(self.data[offset:offset + 4], "big", signed=True)
        if size <= 0:
            raise RecordError(offset, "no record starts here")
        return message.decode(bytes(self.data[offset:offset + size]), base_offset=offset)[0]

    def iter_records(self, start: int | None = None, end: int | None = None
                     ) -> Iterator[MessageRecord]:
        """The records from ``start`` (a record boundary) to ``end``, blanks skipped."""
        pos = start or 0
        stop = len(self.data) if end is None else end
        while pos + 8 <= stop:
            size, magic = struct.unpack_from(">iI", self.data, pos)
            if size <= 0 or pos + size > stop:
                return
            if magic != message.BLANK_MAGIC:
                yield self.read_record(pos)
            pos += size

    def append_raw(self, offset: int, data: bytes | memoryview) -> int:
        if offset != len(self.data):
            raise AssertionError(f"append at {offset}, log ends at {len(self.data)}")
        self.data += data
        return len(self.data)

    def truncate(self, offset: int) -> None:
        del self.data[offset:]
        self._unindex(offset)

    def _unindex(self, offset: int) -> None:
        """Drop the consume-queue entries of records at or past ``offset``."""
        if self._indexed <= offset:
            return
        self._indexed = offset
        for entries in self._queues.values():
            while entries and entries[-1].physical_offset >= offset:
                entries.pop()

    def pack(self, records: Sequence[MessageRecord]) -> tuple[list[tuple[int, int, int]], bytes]:
        """``records`` encoded to append at the end, as the store's ``append_batch`` does
        (queue offsets the next of their queue): where each lands (physical offset, size,
        queue offset), and the bytes to append (a blank first where one does not fit
        the segment)."""
        packed = pack_records(records, self.max_offset, self.segment_size,
                              self.queue_max_offset)
        return packed.placed, bytes(packed.data)

    # -- the consume queues (``CommitLog``'s queue calls) -----------------------------

    def _index(self) -> None:
        """Index the whole records appended since the last call."""
        if self._indexed >= len(self.data):
            return
        found = index_records(bytes(self.data[self._indexed:]), self._indexed,
                              self.segment_size)
        if found is None:  # a torn write the next role change cuts: nothing more to index
            return
        end, _, runs = found
        for topic, queue_id, first, packed in runs:
            entries = self._queues.setdefault((topic, queue_id), [])
            if first > len(entries):  # the store refuses such bytes; no master sends them
                raise AssertionError(f"{topic}:{queue_id}: queue offset {first} skips ahead "
                                     f"of its end {len(entries)}")
            del entries[first:]
            for at in range(0, len(packed), CQ_ENTRY_SIZE):
                physical, size, code = unpack_cq_entry(packed, at)
                entries.append(QueueEntry(len(entries), physical, size, code))
        self._indexed = end

    def queue_min_offset(self, topic: str, queue_id: int) -> int:
        return 0  # nothing is ever deleted

    def queue_max_offset(self, topic: str, queue_id: int) -> int:
        self._index()
        return len(self._queues.get((topic, queue_id), ()))

    def queue_entries(self, topic: str, queue_id: int, start: int, max_count: int
                      ) -> list[QueueEntry]:
        self._index()
        return self._queues.get((topic, queue_id), [])[start:start + max_count]

    def truncate_to_last_whole_record(self) -> int:
        pos = 0
        while pos + 4 <= len(self.data):
            size = int.from_bytes(self.data[pos:pos + 4], "big")
            if size <= 0 or pos + size > len(self.data):
                break
            pos += size
        self.truncate(pos)
        return pos


class EpochFile:
    """The epoch checkpoint: saved atomically, survives crashes."""

    def __init__(self) -> None:
        self.cache = EpochCache()

    def load(self) -> EpochCache:
        return self.cache

    def save(self, cache: EpochCache) -> None:
        self.cache = cache


def change_role(change: RoleChange, log: TermLog, epoch_file: EpochStore,
                end_term: Callable[[], None]) -> StartTerm:
    """Carry out ``change`` at once (the simulation's stores answer inline); the new
    term to start. ``EpochError`` as the change raises it."""
    action: RoleChangeAction = change.start()
    while not isinstance(action, StartTerm):
        if isinstance(action, EndTerm):
            end_term()
            action = change.term_ended()
        elif isinstance(action, TruncateTornTail):
            action = change.truncated(log.truncate_to_last_whole_record(), log.min_offset)
        elif isinstance(action, LoadEpochs):
            action = change.loaded(epoch_file.load())
        else:
            epoch_file.save(action.epochs)
            action = change.saved()
    return action


class Term:
    """One role held from one change to the next (ReplicasManager's ``_Term``); role
    "none" between them."""

    @classmethod
    def none(cls) -> Term:
        """No role: before the first and while changing."""
        return cls("none", -1, "", EpochCache(), -1)

    def confirmed(self, max_offset: int) -> int:
        """The confirm offset: the master term's, else the last one a master sent (-1)."""
        if self.master_term is not None:
            return self.master_term.confirm_offset(max_offset)
        return self.confirm_offset

    def __init__(self, role: str, epoch: int, master: str, epochs: EpochCache,
                 broker_id: int) -> None:
        self.role = role
        self.epoch = epoch
        self.master = master
        self.epochs = epochs
        #: The broker id the role change named this replica by (its HA handshakes').
        self.broker_id = broker_id
        self.tasks: list[int] = []
        # Master side.
        self.master_term: MasterTerm | None = None
        self.conns: dict[int, tuple[Stream, MasterConnection]] = {}
        #: Pending puts: waiter -> (where its answer goes, its flow, (offset, record bytes)
        #: per record stored).
        self.waiters: dict[object, tuple[Callable[[RemotingCommand], None], PutFlow,
                                         list[tuple[int, bytes]]]] = {}
        # Slave side.
        self.stream: Stream | None = None
        self.conn: SlaveConnection | None = None
        self.confirm_offset = -1
        self.retry_at = 0
        self.reconnect: Reconnect | None = None
