"""GetReplicaInfo, GetSyncStateData, GetMetadata and CleanBrokerData."""

from __future__ import annotations

import pytest
from controller_helpers import CLUSTER, GROUP, address

from triomq.controller import CleanBrokerDataEvent, ResponseCode
from triomq.controller.core.results import Replica

Code = ResponseCode


def test_get_replica_info(h):
    h.build(3)
    h.commit(h.manager.alter_sync_state_set(GROUP, 1, 1, {1, 3}, 2, h.live))
    result = h.manager.get_replica_info(GROUP)
    assert result.ok and result.events == ()
    payload = result.payload
    assert (payload.master_broker_id, payload.master_address) == (1, address(1))
    assert (payload.master_epoch, payload.sync_state_set, payload.sync_state_set_epoch) == (
        1, {1, 3}, 3
    )
    h.assert_rejected(h.manager.get_replica_info("nope"),
                      Code.CONTROLLER_BROKER_METADATA_NOT_EXIST)


def test_get_sync_state_data_splits_in_and_out_of_sync(h):
    h.build(3, "broker-a")
    h.build(2, "broker-b")
    h.commit(h.manager.alter_sync_state_set("broker-a", 1, 1, {1, 3}, 2, h.live))
    h.live.down(3)
    asked = []

    def live_info(cluster_name, broker_name):
        asked.append((cluster_name, broker_name))
        return h.live if broker_name == "broker-a" else lambda broker_id: None

    result = h.manager.get_sync_state_data(["broker-b", "broker-a", "unknown"], live_info)
    assert result.ok and asked == [(CLUSTER, "broker-a"), (CLUSTER, "broker-b")]
    a, b = result.payload
    assert a.broker_name == "broker-a"
    assert a.in_sync_replicas == (Replica(1, address(1), alive=True),
                                  Replica(3, address(3), alive=False))
    assert a.not_in_sync_replicas == (Replica(2, address(2), alive=True),)
    assert (a.master_broker_id, a.master_epoch, a.sync_state_set_epoch) == (1, 1, 3)
    assert b.broker_name == "broker-b" and b.not_in_sync_replicas == ()
    assert not any(r.alive for r in b.in_sync_replicas)


def test_get_metadata_lists_every_group(h):
    h.build(2, "broker-b")
    h.build(1, "broker-a")
    groups = h.manager.get_metadata().payload
    assert [g.broker_name for g in groups] == ["broker-a", "broker-b"]
    assert groups[1] == h.group("broker-b")


def test_clean_dead_replicas(h):
    h.build(3)
    h.live.down(3)
    result = h.manager.clean_broker_data(CLUSTER, GROUP, h.live, broker_ids=[3])
    assert result.ok and result.events == (CleanBrokerDataEvent(GROUP, frozenset({3})),)
    h.commit(result)
    group = h.group()
    assert group.broker_ids == {1, 2} and group.sync_state_set == {1, 2}
    assert group.master_broker_id == 1


def test_clean_a_whole_group_without_master(h):
    h.build(2)
    h.live.down(1)
    h.live.down(2)
    h.commit(h.manager.elect_master(GROUP, h.live))
    h.commit(h.manager.clean_broker_data(CLUSTER, GROUP, h.live))
    assert h.manager.group(GROUP) is None
    assert h.manager.get_next_broker_id(CLUSTER, GROUP).payload.next_broker_id == 1


def test_force_clean_of_the_master_leaves_no_master(h):
    h.build(3)
    h.commit(h.manager.clean_broker_data(CLUSTER, GROUP, h.live, broker_ids=[1],
                                         clean_living_broker=True))
    group = h.group()
    assert group.master_broker_id is None
    assert group.sync_state_set == {2, 3}
    assert group.master_epoch == 1


def test_cleaning_every_replica_removes_the_group(h):
    h.build(2)
    h.commit(h.manager.clean_broker_data(CLUSTER, GROUP, h.live, broker_ids=[1, 2],
                                         clean_living_broker=True))
    assert h.manager.group(GROUP) is None


@pytest.mark.parametrize(("cluster", "name", "kwargs", "fragment"), [
    (CLUSTER, "nope", {}, "not registered"),
    ("OtherCluster", GROUP, {}, "belongs to cluster"),
    (CLUSTER, GROUP, {}, "still has master 1"),
    (CLUSTER, GROUP, {"broker_ids": [2]}, "[2] of group 'broker-a' are still alive"),
    (CLUSTER, GROUP, {"broker_ids": [8]}, "brokers [8] are not registered"),
    (CLUSTER, GROUP, {"broker_ids": []}, "no broker ids"),
])
def test_clean_rejections(h, cluster, name, kwargs, fragment):
    h.build(3)
    before = h.manager.snapshot()
    result = h.manager.clean_broker_data(cluster, name, h.live, **kwargs)
    expected = (Code.CONTROLLER_INVALID_REQUEST if cluster != CLUSTER
                else Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA)
    h.assert_rejected(result, expected)
    assert fragment in result.remark
    assert h.manager.snapshot() == before
