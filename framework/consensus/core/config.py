"""``RaftConfig``: how a node runs its Raft group (identity, peers, timers, storage).

Timers count in ticks of ``tick_interval_ms``. The defaults aim at
sub-second failover on a LAN: a heartbeat every 50 ms, an election after
400-750 ms of leader silence (a random timeout in ``[election_ticks,
2 * election_ticks - 1]`` ticks), so a new leader is usually elected well
within a second of losing the old one. RocketMQ's DLedger defaults (2 s
heartbeats, ~10 s failover) are in DESIGN.md for comparison.

In code::

    RaftConfig(node_id=1, peers={1: "tcp://10.0.0.1:9870", 2: "tcp://10.0.0.2:9870",
                                 3: "tcp://10.0.0.3:9870"}, path="/data/raft")

From TOML, ``peers`` is a table whose keys are the node ids as strings.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

from triomq.consensus.core import raft
from triomq.errors import ConfigError
from triomq.settings import positive, setting


def _positive_int(value: Any) -> str | None:
    return None if type(value) is int and value >= 1 else "must be an integer >= 1"


def _non_negative_int(value: Any) -> str | None:
    return None if type(value) is int and value >= 0 else "must be an integer >= 0"


def _peer_map(value: Mapping[Any, str]) -> dict[int, str]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"expected a table of id -> address, got {value!r}", "peers")
    peers: dict[int, str] = {}
    for key, address in value.items():
        try:
            node_id = int(key)
        except (TypeError, ValueError):
            raise ConfigError(f"node id {key!r} is not an integer", f"peers.{key}") from None
        if node_id < 1 or isinstance(key, bool):
            raise ConfigError(f"node id {key!r} must be >= 1", f"peers.{key}")
        if not isinstance(address, str) or "://" not in address:
            raise ConfigError(
                f"expected an address like 'tcp://host:port', got {address!r}", f"peers.{key}"
            )
        peers[node_id] = address
    return peers


@attrs.frozen
class RaftConfig:
    """``[raft]``: one node's membership in a Raft group."""

    node_id: int = setting(
        doc="This node's id in the group (an integer >= 1).", check=_positive_int
    )
    peers: dict[int, str] = attrs.field(
        factory=dict,
        converter=_peer_map,
        metadata={
            "doc": "Every node that is or may become a member, id -> RPC address "
            "(this node may be listed too). Founders are all of them unless "
            "'members' says otherwise."
        },
    )
    members: tuple[int, ...] = setting(
        (),
        doc="The founding voters of a new group; empty: every id in peers plus this "
        "node. Only used when the log is empty and 'join' is false.",
    )
    join: bool = setting(
        False,
        doc="Start with an empty log and wait to be added by a membership change "
        "(a node joining an existing group) instead of founding one.",
    )
    tick_interval_ms: float = setting(
        50.0, doc="Length of one Raft tick, in milliseconds.", check=positive
    )
    election_ticks: int = setting(
        8,
        doc="Ticks without a leader before a follower campaigns (randomized up to twice "
        "as many); also the check-quorum window of a leader.",
        check=_positive_int,
    )
    heartbeat_ticks: int = setting(
        1, doc="Ticks between the leader's heartbeats.", check=_positive_int
    )
    push_timeout_ticks: int = setting(
        6,
        doc="Ticks before an unacknowledged push is retried (maxPushTimeOutMs).",
        check=_positive_int,
    )
    max_wait_ack_ticks: int = setting(
        50,
        doc="Ticks a proposal may wait for a quorum before failing with "
        "WAIT_QUORUM_ACK_TIMEOUT (maxWaitAckTimeMs).",
        check=_positive_int,
    )
    max_pending_size: int = setting(
        1000, doc="Pushes in flight per peer (DLedger's maxPendingSize).", check=_positive_int
    )
    push_quota_bytes: int = setting(
        2 * 1024 * 1024,
        doc="Bytes pushed to one peer per tick (DLedger's peerPushQuota).",
        check=_positive_int,
    )
    max_batch_entries: int = setting(
        256, doc="Entries carried by one APPEND push.", check=_positive_int
    )
    pre_vote: bool = setting(True, doc="Run a pre-vote before each election.")
    check_quorum: bool = setting(
        True, doc="A leader without a quorum of heartbeat answers for election_ticks steps down."
    )
    store_scheme: str = setting(
        "mmap", doc="Store plugin for the entry log and the snapshot: 'mmap' or 'lmdb'."
    )
    path: str = setting(
        "", doc="Directory of the entry log and snapshot; empty: '<store.path>/raft' of the node."
    )
    store_options: dict[str, Any] = setting(
        factory=dict, doc="Options for the store plugin (see its documentation)."
    )
    fsync: bool = setting(
        True,
        doc="Make appended entries durable (fsync, in a worker thread) before "
        "acknowledging them; false leaves it to the OS (faster, but a machine "
        "crash may lose acknowledged entries).",
    )
    snapshot_entries: int = setting(
        10_000,
        doc="Compact the log with a state-machine snapshot every this many applied "
        "entries; 0 never compacts.",
        check=_non_negative_int,
    )
    send_queue_size: int = setting(
        4096,
        doc="Messages queued per peer while its connection is slow; more are dropped "
        "(Raft retries them).",
        check=_positive_int,
    )

    def __attrs_post_init__(self) -> None:
        if self.heartbeat_ticks >= self.election_ticks:
            raise ConfigError("must be smaller than election_ticks", "heartbeat_ticks")
        unknown = sorted(set(self.members) - set(self.peers) - {self.node_id})
        if unknown:
            raise ConfigError(f"member {unknown[0]} has no address in peers", "members")

    @property
    def tick_interval(self) -> float:
        """The tick length in seconds."""
        return self.tick_interval_ms / 1000

    def founders(self) -> tuple[int, ...]:
        """The voters a new group starts with."""
        return tuple(sorted(set(self.members or self.peers) | {self.node_id}))

    def ticks(self, seconds: float) -> int:
        """How many ticks cover ``seconds`` (at least one)."""
        return max(1, math.ceil(seconds / self.tick_interval))

    def raft_config(self) -> raft.RaftSettings:
        """The state machine's own settings (in ticks)."""
        return raft.RaftSettings(
            election_ticks=self.election_ticks,
            heartbeat_ticks=self.heartbeat_ticks,
            pre_vote=self.pre_vote,
            check_quorum=self.check_quorum,
            max_pending_size=self.max_pending_size,
            max_batch_entries=self.max_batch_entries,
            push_quota_bytes=self.push_quota_bytes,
            push_timeout_ticks=self.push_timeout_ticks,
            max_wait_ack_ticks=self.max_wait_ack_ticks,
        )
