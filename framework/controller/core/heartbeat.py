"""The active controller's table of broker heartbeats (RocketMQ's BrokerLiveInfo table).

Brokers send BROKER_HEARTBEAT with their live info; the controller records
it here and periodically scans for brokers that went silent, electing a new
master for groups whose master did. Pure: the caller passes the time
(``now_ms``, a monotonic millisecond clock of its choice) and the timeouts.
The table is not replicated: every controller keeps its own from the
heartbeats it receives (brokers send one to each). Silence is counted in
the time the controller ran: ``pause`` leaves out a stall of the
controller's own, and ``restart`` gives every broker a whole timeout when
a controller becomes leader.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from triomq.controller.core.election import BrokerLiveInfo, LiveInfoLookup
from triomq.controller.core.group import BrokerGroup


@attrs.frozen
class HeartbeatRecord:
    """The latest heartbeat of one broker replica.

    ``heartbeat_timeout_ms`` is the broker's own timeout when it sent one;
    otherwise the scan's default applies.
    """

    cluster_name: str
    broker_name: str
    broker_id: int
    broker_address: str
    last_update_ms: int
    epoch: int = 0
    max_offset: int = 0
    confirm_offset: int = 0
    election_priority: int = 0
    heartbeat_timeout_ms: int | None = None

    def is_active(self, now_ms: int, timeout_ms: int) -> bool:
        """Whether the broker was heard from within its timeout at ``now_ms``."""
        timeout = timeout_ms if self.heartbeat_timeout_ms is None else self.heartbeat_timeout_ms
        return now_ms - self.last_update_ms <= timeout

    def live_info(self, now_ms: int, timeout_ms: int) -> BrokerLiveInfo:
        """This heartbeat as the election policy sees it at ``now_ms``."""
        return BrokerLiveInfo(
            broker_id=self.broker_id,
            alive=self.is_active(now_ms, timeout_ms),
            epoch=self.epoch,
            max_offset=self.max_offset,
            confirm_offset=self.confirm_offset,
            election_priority=self.election_priority,
        )


_Key = tuple[str, str, int]


class BrokerHeartbeatTable:
    """Latest heartbeat per ``(cluster_name, broker_name, broker_id)``."""

    def __init__(self) -> None:
        self._beats: dict[_Key, HeartbeatRecord] = {}

    def heartbeat(
        self,
        now_ms: int,
        cluster_name: str,
        broker_name: str,
        broker_id: int,
        broker_address: str,
        *,
        epoch: int | None = None,
        max_offset: int | None = None,
        confirm_offset: int | None = None,
        election_priority: int | None = None,
        heartbeat_timeout_ms: int | None = None,
    ) -> HeartbeatRecord:
        """Record a heartbeat received at ``now_ms`` and return the stored record.

        Live-info fields left ``None`` keep their previous value (0 for a new
        broker). A heartbeat never moves ``last_update_ms`` backwards.
        """
        key = (cluster_name, broker_name, broker_id)
        previous = self._beats.get(key)
        if previous is None:
            previous = HeartbeatRecord(cluster_name, broker_name, broker_id, broker_address, now_ms)

        def pick(new: int | None, old: int) -> int:
            return old if new is None else new

        record = HeartbeatRecord(
            cluster_name=cluster_name,
            broker_name=broker_name,
            broker_id=broker_id,
            broker_address=broker_address,
            last_update_ms=max(now_ms, previous.last_update_ms),
            epoch=pick(epoch, previous.epoch),
            max_offset=pick(max_offset, previous.max_offset),
            confirm_offset=pick(confirm_offset, previous.confirm_offset),
            election_priority=pick(election_priority, previous.election_priority),
            heartbeat_timeout_ms=(
                previous.heartbeat_timeout_ms
                if heartbeat_timeout_ms is None
                else heartbeat_timeout_ms
            ),
        )
        self._beats[key] = record
        return record

    def get(self, cluster_name: str, broker_name: str, broker_id: int) -> HeartbeatRecord | None:
        """The latest heartbeat of a broker, if it has one."""
        return self._beats.get((cluster_name, broker_name, broker_id))

    def is_active(
        self, now_ms: int, timeout_ms: int, cluster_name: str, broker_name: str, broker_id: int
    ) -> bool:
        """Whether the broker is known and was heard from within its timeout."""
        record = self.get(cluster_name, broker_name, broker_id)
        return record is not None and record.is_active(now_ms, timeout_ms)

    def live_info(
        self, now_ms: int, timeout_ms: int, cluster_name: str, broker_name: str
    ) -> LiveInfoLookup:
        """The live-info lookup for one group at ``now_ms``, for requests and policies."""

        def lookup(broker_id: int) -> BrokerLiveInfo | None:
            record = self.get(cluster_name, broker_name, broker_id)
            return None if record is None else record.live_info(now_ms, timeout_ms)

        return lookup

    def scan(self, now_ms: int, timeout_ms: int) -> list[HeartbeatRecord]:
        """Remove and return the brokers silent for longer than their timeout.

        Ordered by ``(cluster_name, broker_name, broker_id)``. The caller
        elects a new master for every group whose master is among them.
        """
        inactive = [
            record
            for _, record in sorted(self._beats.items())
            if not record.is_active(now_ms, timeout_ms)
        ]
        for record in inactive:
            del self._beats[(record.cluster_name, record.broker_name, record.broker_id)]
        return inactive

    def pause(self, now_ms: int, unseen_ms: int) -> None:
        """Leave ``unseen_ms`` out of every broker's silence at ``now_ms``.

        The controller did not run for that long (a stall of its own: a GC
        pause, a starved host), so it heard nobody: each broker's silence
        resumes where it stood when the stall began. Only the stall is left
        out, never the time the controller ran, so a broker that really
        stopped is still found inactive however often the controller stalls.
        """
        for key, record in list(self._beats.items()):
            self._beats[key] = attrs.evolve(
                record, last_update_ms=min(now_ms, record.last_update_ms + unseen_ms))

    def restart(self, now_ms: int, timeout_ms: int) -> None:
        """Count every broker active at ``now_ms`` as just heard from.

        A controller that becomes leader gives each broker a whole timeout
        from then; one already silent for its whole timeout stays so (the
        new leader does not bring back a broker its own records found gone).
        """
        for key, record in list(self._beats.items()):
            if record.is_active(now_ms, timeout_ms):
                self._beats[key] = attrs.evolve(
                    record, last_update_ms=max(now_ms, record.last_update_ms))

    def expect_masters(self, now_ms: int, groups: Iterable[BrokerGroup]) -> None:
        """Count every recorded master never heard from as just heard from.

        A controller that became leader (or restarted) gives each master one
        timeout to show up before its silence counts as the master being gone.
        """
        for group in groups:
            master = group.master_broker_id
            if master is not None and self.get(
                    group.cluster_name, group.broker_name, master) is None:
                self.heartbeat(now_ms, group.cluster_name, group.broker_name, master,
                               group.master_address or "")

    def remove(
        self, cluster_name: str | None, broker_name: str, broker_ids: frozenset[int] | None
    ) -> None:
        """Forget some brokers of a group (``None``: all), after CleanBrokerData; a
        ``cluster_name`` of None matches any (a group's name is unique among clusters)."""
        for key in list(self._beats):
            if key[1] == broker_name and cluster_name in (None, key[0]) and (
                broker_ids is None or key[2] in broker_ids
            ):
                del self._beats[key]

    def __len__(self) -> int:
        return len(self._beats)
