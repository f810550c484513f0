"""Which replica of a group acts for its absent master: a slave's view of its group (pure).

Seed 003's "knowing the group": a broker with ``enable_slave_acting_master``
learns which members of its replica group are alive from the name servers,
two ways, as RocketMQ 5's brokers do:

- it polls GET_BROKER_MEMBER_GROUP (901) every ``sync_period`` (RocketMQ's
  ``syncBrokerMemberGroupPeriod``), asking the name servers in turn until
  one answers; an answer naming no member (a name server that forgot the
  group, or never heard of it) teaches nothing, as in RocketMQ;
- a name server tells it NOTIFY_MIN_BROKER_ID_CHANGE (905) when the group's
  smallest alive brokerId changes.

The name server drops a broker that stopped heartbeating (904, sent by the
registration flow) after ``broker_not_active_timeout``, or at once when its
connection closes, so the smallest id it names is the smallest alive one.

A slave acts for the master while it is a slave and its id is that
smallest one: the master (id 0) is gone and no smaller slave is alive.
``StartActing`` then begins the acting term (the broker runs its
acting-term components, RocketMQ's ``changeSpecialServiceStatus(true)``);
``StopActing`` ends it as soon as the master or a smaller slave is back,
or the replica stops being a slave (a controller elected it, or a role
change is under way). Until an answer came, the group is taken to have its
master (RocketMQ starts with ``minBrokerIdInGroup`` 0): a slave that cannot
reach a name server never acts.

The driver calls ``start``, feeds answers (``member_group``), notices
(``min_broker_id_changed``) and role changes (``role_changed``), calls
``poll`` at ``next_wakeup()`` and carries out what each returns. Times are
milliseconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

__all__ = [
    "MASTER_ID",
    "GroupAction",
    "GroupWatch",
    "QueryMemberGroup",
    "StartActing",
    "StopActing",
]

#: The brokerId of a group's master.
MASTER_ID = 0


@attrs.frozen
class QueryMemberGroup:
    """Send GET_BROKER_MEMBER_GROUP to ``namesrv``; report with ``member_group``."""

    namesrv: str


@attrs.frozen
class StartActing:
    """Begin the acting term: this slave acts for the group's absent master."""

    min_broker_id: int


@attrs.frozen
class StopActing:
    """End the acting term; ``why`` says what changed (for the log)."""

    why: str


GroupAction = QueryMemberGroup | StartActing | StopActing


class GroupWatch:
    """One slave's knowledge of its group's smallest alive brokerId, and whether it acts."""

    def __init__(self, namesrvs: Sequence[str], *, broker_id: int, sync_period: int) -> None:
        if not namesrvs:
            raise ValueError("an acting master needs name servers to learn its group from")
        self.namesrvs = tuple(namesrvs)
        self.broker_id = broker_id
        self.sync_period = sync_period
        #: The group's smallest alive brokerId as last learnt (the master's until then).
        self.min_broker_id = MASTER_ID
        self.is_slave = False
        self.acting = False
        self._query_at: int | None = None
        #: The name server the round in flight asks, by index (None: none in flight).
        self._asking: int | None = None

    # -- inputs -----------------------------------------------------------------------------

    def start(self, now: int) -> list[GroupAction]:
        """The first query goes out at once."""
        self._query_at = now
        return self.poll(now)

    def role_changed(self, *, is_slave: bool, broker_id: int, now: int) -> list[GroupAction]:
        """The replica's role (and, in controller mode, its id) after a change."""
        self.is_slave, self.broker_id = is_slave, broker_id
        return self._decide("the replica's role changed")

    def member_group(self, namesrv: str, broker_addrs: Mapping[int, str] | None,
                     now: int) -> list[GroupAction]:
        """GET_BROKER_MEMBER_GROUP's answer from ``namesrv``: the alive members by id,
        or None if none came (the next name server is asked)."""
        if self._asking is None or self.namesrvs[self._asking] != namesrv:
            return []  # an answer to a round already over
        if broker_addrs is None and self._asking + 1 < len(self.namesrvs):
            self._asking += 1
            return [QueryMemberGroup(self.namesrvs[self._asking])]
        self._asking = None
        self._query_at = now + self.sync_period
        if not broker_addrs:
            return []
        self.min_broker_id = min(broker_addrs)
        return self._decide(f"the group's smallest alive brokerId is {self.min_broker_id}")

    def min_broker_id_changed(self, min_broker_id: int, now: int) -> list[GroupAction]:
        """NOTIFY_MIN_BROKER_ID_CHANGE from a name server."""
        self.min_broker_id = min_broker_id
        return self._decide(f"a name server says the smallest alive brokerId is {min_broker_id}")

    def poll(self, now: int) -> list[GroupAction]:
        """The query due at ``now``, if any (one round in flight at a time)."""
        if self._asking is not None or self._query_at is None or now < self._query_at:
            return []
        self._asking = 0
        return [QueryMemberGroup(self.namesrvs[0])]

    def next_wakeup(self) -> int | None:
        """When ``poll`` has a query to send (None while a round is in flight)."""
        return None if self._asking is not None else self._query_at

    # -- the rule ---------------------------------------------------------------------------

    @property
    def should_act(self) -> bool:
        """A slave whose id is the smallest alive one (so the master's is not alive)."""
        return (self.is_slave and self.broker_id != MASTER_ID
                and self.min_broker_id == self.broker_id)

    def _decide(self, why: str) -> list[GroupAction]:
        if self.should_act and not self.acting:
            self.acting = True
            return [StartActing(self.min_broker_id)]
        if self.acting and not self.should_act:
            self.acting = False
            return [StopActing(why)]
        return []
