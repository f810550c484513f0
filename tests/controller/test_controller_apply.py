"""Applying committed events: what each does, and which are ignored as stale."""

from __future__ import annotations

import pytest
from controller_helpers import CLUSTER, GROUP, address, check_code

from triomq.controller import (
    AlterSyncStateSetEvent,
    ApplyBrokerIdEvent,
    CleanBrokerDataEvent,
    ElectMasterEvent,
    UpdateBrokerAddressEvent,
)

# The group built by h.build(3): master 1 at master epoch 1, SyncStateSet {1,2,3} at epoch 2.


@pytest.mark.parametrize(("event", "field", "value"), [
    (ApplyBrokerIdEvent(CLUSTER, GROUP, 5, address(5), check_code(5)), "broker_ids",
     {1, 2, 3, 5}),
    (ApplyBrokerIdEvent(CLUSTER, GROUP, 5, address(5), check_code(5)), "next_broker_id", 6),
    (UpdateBrokerAddressEvent(CLUSTER, GROUP, 2, "h:2"), "addresses",
     {1: address(1), 2: "h:2", 3: address(3)}),
    (AlterSyncStateSetEvent(GROUP, 1, {1, 3}, 3), "sync_state_set", {1, 3}),
    (AlterSyncStateSetEvent(GROUP, 1, {1, 3}, 3), "sync_state_set_epoch", 3),
    (ElectMasterEvent(GROUP, 2, 2, 3), "master_broker_id", 2),
    (ElectMasterEvent(GROUP, 2, 2, 3), "sync_state_set", {2}),
    (ElectMasterEvent(GROUP, None, 2, 2), "master_broker_id", None),
    (ElectMasterEvent(GROUP, None, 2, 2), "master_epoch", 2),
    (ElectMasterEvent(GROUP, None, 2, 2), "sync_state_set", {1, 2, 3}),
    (CleanBrokerDataEvent(GROUP, {3, 9}), "broker_ids", {1, 2}),
])
def test_event_effects(h, event, field, value):
    h.build(3)
    assert h.manager.apply(event)
    assert getattr(h.group(), field) == value


@pytest.mark.parametrize(("label", "event"), [
    ("id already owned", ApplyBrokerIdEvent(CLUSTER, GROUP, 2, "h:9", "other")),
    ("id below the first", ApplyBrokerIdEvent(CLUSTER, GROUP, 0, "h:0", "c")),
    ("group of another cluster", ApplyBrokerIdEvent("other", GROUP, 7, "h:7", "c")),
    ("address of unknown broker", UpdateBrokerAddressEvent(CLUSTER, GROUP, 9, "h:9")),
    ("address unchanged", UpdateBrokerAddressEvent(CLUSTER, GROUP, 2, address(2))),
    ("address in another cluster", UpdateBrokerAddressEvent("other", GROUP, 2, "h:2")),
    ("address in unknown group", UpdateBrokerAddressEvent(CLUSTER, "nope", 2, "h:2")),
    ("alter: stale master epoch", AlterSyncStateSetEvent(GROUP, 0, {1, 2}, 3)),
    ("alter: stale set epoch", AlterSyncStateSetEvent(GROUP, 1, {1, 2}, 2)),
    ("alter: skipped set epoch", AlterSyncStateSetEvent(GROUP, 1, {1, 2}, 4)),
    ("alter: without master", AlterSyncStateSetEvent(GROUP, 1, {2, 3}, 3)),
    ("alter: unknown broker", AlterSyncStateSetEvent(GROUP, 1, {1, 8}, 3)),
    ("alter: unknown group", AlterSyncStateSetEvent("nope", 1, {1}, 3)),
    ("elect: replayed epoch", ElectMasterEvent(GROUP, 2, 1, 3)),
    ("elect: skipped epoch", ElectMasterEvent(GROUP, 2, 3, 3)),
    ("elect: stale set epoch", ElectMasterEvent(GROUP, 2, 2, 2)),
    ("elect: unknown broker", ElectMasterEvent(GROUP, 8, 2, 3)),
    ("elect: unknown group", ElectMasterEvent("nope", 1, 1, 1)),
    ("no master: set epoch moved", ElectMasterEvent(GROUP, None, 2, 3)),
    ("clean: unknown brokers only", CleanBrokerDataEvent(GROUP, {8, 9})),
    ("clean: unknown group", CleanBrokerDataEvent("nope", None)),
])
def test_stale_or_misfit_events_are_ignored(h, label, event):
    h.build(3)
    before = h.manager.snapshot()
    assert not h.manager.apply(event), label
    assert h.manager.snapshot() == before


def test_applying_the_same_event_twice_changes_state_once(h):
    h.build(3)
    event = ElectMasterEvent(GROUP, 3, 2, 3)
    assert h.manager.apply(event)
    after_first = h.manager.snapshot()
    assert not h.manager.apply(event)
    assert h.manager.snapshot() == after_first


def test_apply_rejects_non_events(h):
    with pytest.raises(TypeError, match="not a controller event"):
        h.manager.apply("ElectMaster")  # type: ignore[arg-type]
