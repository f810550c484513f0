"""The broker heartbeat table: updates, liveness at a given time, scans for silent brokers."""

from __future__ import annotations

from controller_helpers import CLUSTER, GROUP, address

from triomq.controller import BrokerHeartbeatTable, BrokerLiveInfo, default_election_policy

TIMEOUT = 1000


def _beat(table, now_ms, broker_id, name=GROUP, **fields):
    return table.heartbeat(now_ms, CLUSTER, name, broker_id, address(broker_id), **fields)


def test_heartbeat_records_live_info_and_keeps_unsent_fields():
    table = BrokerHeartbeatTable()
    _beat(table, 100, 1, epoch=2, max_offset=500, confirm_offset=400, election_priority=3)
    record = _beat(table, 200, 1, max_offset=600)
    assert (record.last_update_ms, record.epoch, record.max_offset, record.confirm_offset,
            record.election_priority) == (200, 2, 600, 400, 3)
    assert table.get(CLUSTER, GROUP, 1) == record
    assert table.get(CLUSTER, GROUP, 2) is None
    assert len(table) == 1


def test_a_late_heartbeat_never_moves_time_backwards():
    table = BrokerHeartbeatTable()
    _beat(table, 500, 1)
    assert _beat(table, 300, 1).last_update_ms == 500


def test_liveness_is_judged_at_the_given_time():
    table = BrokerHeartbeatTable()
    _beat(table, 1000, 1)
    assert table.is_active(2000, TIMEOUT, CLUSTER, GROUP, 1)
    assert not table.is_active(2001, TIMEOUT, CLUSTER, GROUP, 1)
    assert not table.is_active(0, TIMEOUT, CLUSTER, GROUP, 2)


def test_a_brokers_own_timeout_wins():
    table = BrokerHeartbeatTable()
    _beat(table, 0, 1, heartbeat_timeout_ms=5000)
    _beat(table, 0, 2)
    assert table.is_active(4000, TIMEOUT, CLUSTER, GROUP, 1)
    assert not table.is_active(4000, TIMEOUT, CLUSTER, GROUP, 2)
    assert _beat(table, 10, 1).heartbeat_timeout_ms == 5000


def test_scan_removes_and_returns_silent_brokers_in_order():
    table = BrokerHeartbeatTable()
    _beat(table, 0, 3)
    _beat(table, 0, 1, name="broker-b")
    _beat(table, 0, 2)
    _beat(table, 900, 4)
    inactive = table.scan(1500, TIMEOUT)
    assert [(r.broker_name, r.broker_id) for r in inactive] == [
        (GROUP, 2), (GROUP, 3), ("broker-b", 1)
    ]
    assert len(table) == 1
    assert table.scan(1500, TIMEOUT) == []


def test_live_info_lookup_feeds_the_election_policy(h):
    group = h.build(3)
    table = BrokerHeartbeatTable()
    _beat(table, 0, 1, epoch=1, max_offset=100)
    _beat(table, 900, 2, epoch=1, max_offset=100)
    _beat(table, 900, 3, epoch=1, max_offset=300)
    lookup = table.live_info(1500, TIMEOUT, CLUSTER, GROUP)
    assert lookup(1) == BrokerLiveInfo(1, False, 1, 100, 0, 0)
    assert lookup(3).alive
    assert lookup(7) is None
    assert default_election_policy(group, lookup, None, False) == 3


def test_remove_after_clean_broker_data():
    table = BrokerHeartbeatTable()
    for broker_id in (1, 2, 3):
        _beat(table, 0, broker_id)
    _beat(table, 0, 1, name="broker-b")
    table.remove(CLUSTER, GROUP, frozenset({2}))
    assert table.get(CLUSTER, GROUP, 2) is None and len(table) == 3
    table.remove(CLUSTER, GROUP, None)
    assert len(table) == 1 and table.get(CLUSTER, "broker-b", 1) is not None


def test_expect_masters_gives_an_unheard_master_one_timeout():
    from triomq.controller.core.group import BrokerGroup, BrokerMember

    group = BrokerGroup(
        cluster_name=CLUSTER, broker_name=GROUP,
        members=[BrokerMember(1, address(1), "code-1"), BrokerMember(2, address(2), "code-2")],
        master_broker_id=1, master_epoch=1, sync_state_set=frozenset({1}),
        sync_state_set_epoch=1, next_broker_id=3)
    table = BrokerHeartbeatTable()
    _beat(table, 500, 2)
    table.expect_masters(1_000, [group])
    assert table.get(CLUSTER, GROUP, 1).last_update_ms == 1_000
    assert table.get(CLUSTER, GROUP, 2).last_update_ms == 500
    # The master gets a whole timeout from the moment it was expected.
    assert [b.broker_id for b in table.scan(1_000 + 10, timeout_ms=100)] == [2]
    assert [b.broker_id for b in table.scan(1_000 + 200, timeout_ms=100)] == [1]


def test_restart_gives_every_active_broker_one_timeout():
    table = BrokerHeartbeatTable()
    _beat(table, 950, 1)
    _beat(table, 0, 2)  # silent for longer than the timeout already
    table.restart(1_000, 100)
    assert table.get(CLUSTER, GROUP, 1).last_update_ms == 1_000
    assert table.get(CLUSTER, GROUP, 2).last_update_ms == 0
    assert [b.broker_id for b in table.scan(1_000 + 100, timeout_ms=100)] == [2]
    assert [b.broker_id for b in table.scan(1_000 + 101, timeout_ms=100)] == [1]


def test_pause_leaves_a_stall_out_of_every_silence():
    table = BrokerHeartbeatTable()
    _beat(table, 900, 1)
    _beat(table, 500, 2)
    # The controller did not run from 1000 to 4000.
    table.pause(4_000, 3_000)
    assert table.get(CLUSTER, GROUP, 1).last_update_ms == 3_900
    assert table.get(CLUSTER, GROUP, 2).last_update_ms == 3_500
    assert table.is_active(4_000, TIMEOUT, CLUSTER, GROUP, 1)
    assert table.is_active(4_000, TIMEOUT, CLUSTER, GROUP, 2)
    # Broker 2's silence resumes at the 500 ms it had reached.
    assert not table.is_active(4_501, TIMEOUT, CLUSTER, GROUP, 2)
    # Never past the present.
    table.pause(4_100, 5_000)
    assert table.get(CLUSTER, GROUP, 1).last_update_ms == 4_100
