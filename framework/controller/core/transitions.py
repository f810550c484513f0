"""How committed controller events change the replicas-info state.

``apply_event(groups, event)`` updates ``groups`` (broker name -> group) in
place and returns whether anything changed. It is deterministic and checks
each event against the state it lands on: an event computed for epochs
that moved since (a competing election, a replayed proposal), for an
unknown group or broker, or for an id already owned, is ignored. So every
controller replica, applying the same log, reaches the same state, and the
invariants of ``triomq.controller.core.snapshot.group_invariant_violation``
always hold.
"""

from __future__ import annotations

import attrs

from triomq.controller.core.events import (
    AlterSyncStateSetEvent,
    ApplyBrokerIdEvent,
    CleanBrokerDataEvent,
    ElectMasterEvent,
    Event,
    UpdateBrokerAddressEvent,
)
from triomq.controller.core.group import FIRST_BROKER_ID, BrokerGroup, BrokerMember

Groups = dict[str, BrokerGroup]


def apply_event(groups: Groups, event: Event) -> bool:
    """Apply ``event`` to ``groups``; return whether it changed them."""
    if isinstance(event, ApplyBrokerIdEvent):
        return _apply_broker_id(groups, event)
    if isinstance(event, UpdateBrokerAddressEvent):
        return _update_broker_address(groups, event)
    if isinstance(event, AlterSyncStateSetEvent):
        return _alter_sync_state_set(groups, event)
    if isinstance(event, ElectMasterEvent):
        return _elect_master(groups, event)
    if isinstance(event, CleanBrokerDataEvent):
        return _clean_broker_data(groups, event)
    raise TypeError(f"not a controller event: {type(event).__name__}")


def _apply_broker_id(groups: Groups, event: ApplyBrokerIdEvent) -> bool:
    if event.broker_id < FIRST_BROKER_ID:
        return False
    member = BrokerMember(event.broker_id, event.broker_address, event.register_check_code)
    group = groups.get(event.broker_name)
    if group is None:
        # The group's first replica creates it, with no master and an empty SyncStateSet.
        groups[event.broker_name] = BrokerGroup(
            event.cluster_name, event.broker_name, (member,), next_broker_id=event.broker_id + 1
        )
        return True
    if group.cluster_name != event.cluster_name or group.member(event.broker_id) is not None:
        return False
    groups[event.broker_name] = attrs.evolve(
        group,
        members=(*group.members, member),
        next_broker_id=max(group.next_broker_id, event.broker_id + 1),
    )
    return True


def _update_broker_address(groups: Groups, event: UpdateBrokerAddressEvent) -> bool:
    group = groups.get(event.broker_name)
    if group is None or group.cluster_name != event.cluster_name:
        return False
    member = group.member(event.broker_id)
    if member is None or member.address == event.broker_address:
        return False
    moved = attrs.evolve(member, address=event.broker_address)
    groups[event.broker_name] = attrs.evolve(
        group, members=[moved if m is member else m for m in group.members]
    )
    return True


def _alter_sync_state_set(groups: Groups, event: AlterSyncStateSetEvent) -> bool:
    group = groups.get(event.broker_name)
    if (
        group is None
        or event.master_epoch != group.master_epoch
        or event.sync_state_set_epoch != group.sync_state_set_epoch + 1
        or group.master_broker_id not in event.sync_state_set
        or not event.sync_state_set <= group.broker_ids
    ):
        return False
    groups[event.broker_name] = attrs.evolve(
        group,
        sync_state_set=event.sync_state_set,
        sync_state_set_epoch=event.sync_state_set_epoch,
    )
    return True


def _elect_master(groups: Groups, event: ElectMasterEvent) -> bool:
    group = groups.get(event.broker_name)
    if group is None or event.master_epoch != group.master_epoch + 1:
        return False
    new_master = event.new_master_broker_id
    if new_master is None:
        # No master elected: fence the old one by epoch, keep the SyncStateSet
        # so that its members stay the preferred candidates when they return.
        if event.sync_state_set_epoch != group.sync_state_set_epoch:
            return False
        groups[event.broker_name] = attrs.evolve(
            group, master_broker_id=None, master_epoch=event.master_epoch
        )
        return True
    if (
        event.sync_state_set_epoch != group.sync_state_set_epoch + 1
        or group.member(new_master) is None
    ):
        return False
    groups[event.broker_name] = attrs.evolve(
        group,
        master_broker_id=new_master,
        master_epoch=event.master_epoch,
        sync_state_set=frozenset({new_master}),
        sync_state_set_epoch=event.sync_state_set_epoch,
    )
    return True


def _clean_broker_data(groups: Groups, event: CleanBrokerDataEvent) -> bool:
    group = groups.get(event.broker_name)
    if group is None:
        return False
    if event.broker_ids is None:
        del groups[event.broker_name]
        return True
    removed = event.broker_ids & group.broker_ids
    if not removed:
        return False
    members = [m for m in group.members if m.broker_id not in removed]
    if not members:
        del groups[event.broker_name]
        return True
    master = group.master_broker_id
    groups[event.broker_name] = attrs.evolve(
        group,
        members=members,
        master_broker_id=None if master in removed else master,
        sync_state_set=group.sync_state_set - removed,
    )
    return True
