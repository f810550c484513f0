"""The controller's history, replayed from the Raft logs its replicas left on disk.

Pure: callers read each controller's snapshot and entries (through a store
plugin) into ``triomq.consensus.core.log.RaftLog`` values; this module finds
how far the group's log is surely committed (``commit_point``) and replays
the committed controller events (``replay``) into the groups' state, every
master change and every SyncStateSet change, each with the Raft index and
term it was committed at.

**The commit point on disk.** Raft keeps the commit index in memory only:
a data directory holds the hard state (term, vote), the entries and the
latest snapshot. Two facts are certain from disk:

- a snapshot covers applied, hence committed, entries only;
- with the logs of *every* member (each voter and learner the
  configurations name), let ``T`` be the newest term of any entry. The
  leader of ``T`` is the last leader ever elected (any later one would
  have an entry of its term in its own log). An entry of term ``T`` held
  by a quorum of every configuration is committed: a future candidate
  needs a vote from that quorum, and such a voter only grants it to a log
  ending in term ``T`` at least as far, which holds the entry (entries of
  one term come from one leader, in order). Entries before it are
  committed with it.

Directory names do not say which node wrote them, so the quorum is counted
without node ids: of ``n`` logs, at least ``n - (|H| - 1) // 2`` must hold
the entry, for each half ``H`` of each configuration in the logs, which
makes a majority of every half whichever logs miss it. With fewer logs
than members, or when the newest term's entries are not on such a quorum
(a leader elected just before the stop), only the snapshots count.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from triomq.consensus.core.log import EntryKind, RaftLog
from triomq.controller.core.events import EventDecodeError, decode_event
from triomq.controller.core.group import BrokerGroup
from triomq.controller.core.replicas_info import ReplicasInfoManager

__all__ = [
    "CommitPoint",
    "ControllerHistory",
    "MasterChange",
    "SyncStateSetChange",
    "commit_point",
    "replay",
]


@attrs.frozen
class CommitPoint:
    """How far the logs are surely committed: up to ``index`` (of ``term``).

    ``source`` is the position (in the logs given) of a log holding every
    entry from its snapshot to ``index``: the one to replay. ``basis`` is
    ``"quorum"`` (the newest term's entries on a quorum of the logs) or
    ``"snapshot"`` (only the snapshots were certain).
    """

    index: int
    term: int
    source: int
    basis: str


@attrs.frozen
class MasterChange:
    """A group's master changed at Raft ``index`` / ``term``.

    ``broker_id`` and ``address`` are ``None`` when the change left the group
    without a master. ``event`` names the controller event (``ElectMaster``,
    ``CleanBrokerData``...) or ``"snapshot"`` for the master a snapshot held.
    """

    cluster_name: str
    broker_name: str
    master_epoch: int
    sync_state_set_epoch: int
    broker_id: int | None
    address: str | None
    event: str
    index: int
    term: int


@attrs.frozen
class SyncStateSetChange:
    """A group's SyncStateSet changed at Raft ``index`` / ``term`` (``event`` as above)."""

    cluster_name: str
    broker_name: str
    master_epoch: int
    sync_state_set_epoch: int
    sync_state_set: frozenset[int]
    event: str
    index: int
    term: int


@attrs.frozen
class ControllerHistory:
    """The replayed state as of ``commit.index`` and the changes that led to it.

    The changes start at the snapshot the replayed log starts from (its
    groups appear once, as ``"snapshot"`` changes); ``undecodable`` counts
    committed entries that were not controller events (ignored, as the
    controllers ignore them).
    """

    commit: CommitPoint
    groups: dict[str, BrokerGroup]
    master_changes: tuple[MasterChange, ...]
    sync_state_set_changes: tuple[SyncStateSetChange, ...]
    undecodable: int


def _quorum_misses(log: RaftLog) -> int:
    """How many logs may lack an entry that a quorum of every configuration holds."""
    halves = [half.voters for config in log.configurations_since(log.snapshot.index)
              for half in (config.voters.incoming, config.voters.outgoing) if half.voters]
    return min(((len(h) - 1) // 2 for h in halves), default=0)


def commit_point(logs: Sequence[RaftLog]) -> CommitPoint:
    """The index up to which ``logs`` (one per controller) are surely committed."""
    if not logs:
        raise ValueError("no Raft log given")
    by_snapshot = max(range(len(logs)), key=lambda i: logs[i].snapshot.index)
    fallback = CommitPoint(logs[by_snapshot].snapshot.index, logs[by_snapshot].snapshot.term,
                           by_snapshot, "snapshot")
    members = frozenset().union(*(log.known_ids() for log in logs))
    if len(logs) < len(members):
        return fallback
    newest = max(log.last_term for log in logs)
    # Where each log's entries of the newest term end (logs without any: none).
    ends = sorted(((log.last_index, i) for i, log in enumerate(logs)
                   if log.last_term == newest and log.last_index > log.snapshot.index),
                  reverse=True)
    needed = len(logs) - min(_quorum_misses(log) for log in logs)
    if len(ends) < needed or needed <= 0:
        return fallback
    index = ends[needed - 1][0]
    if index <= fallback.index:
        return fallback
    holders = [i for end, i in ends if end >= index]
    # Replay from the holder whose snapshot is oldest: the longest history.
    source = min(holders, key=lambda i: logs[i].snapshot.index)
    return CommitPoint(index, newest, source, "quorum")


def _master_key(group: BrokerGroup | None) -> tuple[int | None, int]:
    # A group not yet known reads as one without a master, in epoch 0.
    return (None, 0) if group is None else (group.master_broker_id, group.master_epoch)


def _sync_key(group: BrokerGroup | None) -> tuple[frozenset[int], int]:
    return (frozenset(), 0) if group is None else (group.sync_state_set,
                                                     group.sync_state_set_epoch)


def _changes(before: BrokerGroup | None, after: BrokerGroup, event: str, index: int,
             term: int) -> tuple[MasterChange | None, SyncStateSetChange | None]:
    master = sync = None
    if _master_key(before) != _master_key(after):
        master = MasterChange(
            after.cluster_name, after.broker_name, after.master_epoch,
            after.sync_state_set_epoch, after.master_broker_id, after.master_address,
            event, index, term)
    if _sync_key(before) != _sync_key(after):
        sync = SyncStateSetChange(
            after.cluster_name, after.broker_name, after.master_epoch,
            after.sync_state_set_epoch, after.sync_state_set, event, index, term)
    return master, sync


def replay(logs: Sequence[RaftLog], commit: CommitPoint | None = None) -> ControllerHistory:
    """Replay the committed controller events of ``logs`` (default: up to ``commit_point``).

    Raises ``SnapshotError`` when the snapshot the replay starts from is malformed.
    """
    commit = commit_point(logs) if commit is None else commit
    log = logs[commit.source]
    manager = ReplicasInfoManager()
    if log.snapshot.data:
        manager.restore(log.snapshot.data)
    masters: list[MasterChange] = []
    syncs: list[SyncStateSetChange] = []

    def record(before: dict[str, BrokerGroup], event: str, index: int, term: int) -> None:
        for name, group in sorted(manager.groups.items()):
            master, sync = _changes(before.get(name), group, event, index, term)
            if master is not None:
                masters.append(master)
            if sync is not None:
                syncs.append(sync)

    record({}, "snapshot", log.snapshot.index, log.snapshot.term)
    undecodable = 0
    for entry in log.slice(log.first_index, commit.index):
        if entry.kind is not EntryKind.NORMAL:
            continue
        try:
            event = decode_event(entry.data)
        except EventDecodeError:
            undecodable += 1
            continue
        before = dict(manager.groups)
        if manager.apply(event):
            record(before, type(event).__name__.removesuffix("Event"), entry.index, entry.term)
    return ControllerHistory(commit, dict(manager.groups), tuple(masters), tuple(syncs),
                             undecodable)
