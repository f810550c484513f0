"""What the controller knows about one broker replica group.

A broker group (RocketMQ's "broker set") is every replica sharing a
``broker_name`` within a cluster. The controller keeps, per group: the
registered replicas (id, address and the check code they registered with),
the master and its ``master_epoch``, and the SyncStateSet with its
``sync_state_set_epoch``. Values are immutable; the replicas-info state
machine replaces a group's value when an event changes it.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

#: The first broker id the controller hands out (RocketMQ's ``FIRST_SLAVE_ID``).
#: In controller mode every replica starts as a slave; ids are not roles.
FIRST_BROKER_ID = 1


@attrs.frozen
class BrokerMember:
    """One registered replica of a group.

    ``register_check_code`` is what the broker sent with ApplyBrokerId
    (RocketMQ: ``"<address>;<timestamp>"``); it proves on restart that the
    broker claiming ``broker_id`` is the one that applied for it.
    """

    broker_id: int
    address: str
    register_check_code: str


def _sorted_members(members: Iterable[BrokerMember]) -> tuple[BrokerMember, ...]:
    return tuple(sorted(members, key=lambda member: member.broker_id))


@attrs.frozen
class BrokerGroup:
    """The replica info of one broker group.

    ``members`` is sorted by broker id. ``master_broker_id`` is ``None``
    while the group has no master (never elected, or its master died and no
    replica could be elected). ``next_broker_id`` only grows, so the id of a
    cleaned broker is never handed out again.
    """

    cluster_name: str
    broker_name: str
    members: tuple[BrokerMember, ...] = attrs.field(default=(), converter=_sorted_members)
    master_broker_id: int | None = None
    master_epoch: int = 0
    sync_state_set: frozenset[int] = attrs.field(default=frozenset(), converter=frozenset)
    sync_state_set_epoch: int = 0
    next_broker_id: int = FIRST_BROKER_ID

    @property
    def broker_ids(self) -> frozenset[int]:
        """Ids of every registered replica."""
        return frozenset(member.broker_id for member in self.members)

    def member(self, broker_id: int) -> BrokerMember | None:
        """The replica registered as ``broker_id``, if any."""
        for member in self.members:
            if member.broker_id == broker_id:
                return member
        return None

    def address_of(self, broker_id: int | None) -> str | None:
        """The address of ``broker_id``, or ``None`` when unknown or ``None``."""
        member = None if broker_id is None else self.member(broker_id)
        return None if member is None else member.address

    @property
    def master_address(self) -> str | None:
        """The master's address, or ``None`` while there is no master."""
        return self.address_of(self.master_broker_id)

    @property
    def addresses(self) -> dict[int, str]:
        """Broker id -> address for every replica (RocketMQ's BrokerMemberGroup)."""
        return {member.broker_id: member.address for member in self.members}
