"""GetNextBrokerId, ApplyBrokerId (check codes), RegisterBroker and heartbeat admission."""

from __future__ import annotations

import pytest
from controller_helpers import CLUSTER, GROUP, address, check_code

from triomq.controller import (
    FIRST_BROKER_ID,
    ApplyBrokerIdEvent,
    BrokerGroup,
    BrokerMember,
    ResponseCode,
    UpdateBrokerAddressEvent,
)

Code = ResponseCode


def test_first_replica_of_a_new_group(h):
    result = h.manager.get_next_broker_id(CLUSTER, GROUP)
    assert result.ok and result.events == ()
    assert result.payload.next_broker_id == FIRST_BROKER_ID == 1

    applied = h.manager.apply_broker_id(CLUSTER, GROUP, 1, address(1), check_code(1))
    assert applied.ok
    assert applied.events == (ApplyBrokerIdEvent(CLUSTER, GROUP, 1, address(1), check_code(1)),)
    assert h.manager.group(GROUP) is None  # requests never change the state
    h.commit(applied)
    assert h.group() == BrokerGroup(
        CLUSTER, GROUP, (BrokerMember(1, address(1), check_code(1)),), next_broker_id=2
    )


def test_ids_are_handed_out_in_order_and_never_reused(h):
    assert [h.join() for _ in range(3)] == [1, 2, 3]
    h.commit(h.manager.clean_broker_data(CLUSTER, GROUP, h.live, broker_ids=[3],
                                         clean_living_broker=True))
    assert h.group().broker_ids == {1, 2}
    assert h.manager.get_next_broker_id(CLUSTER, GROUP).payload.next_broker_id == 4


def test_reapplying_own_id_succeeds_without_event(h):
    h.join()
    result = h.manager.apply_broker_id(CLUSTER, GROUP, 1, address(1), check_code(1))
    assert result.ok and result.events == ()
    assert result.payload.broker_id == 1


def test_any_free_id_may_be_applied_for_in_an_existing_group(h):
    h.join()
    result = h.commit(h.manager.apply_broker_id(CLUSTER, GROUP, 7, address(7), check_code(7)))
    assert result.ok
    assert h.group().broker_ids == {1, 7}
    assert h.group().next_broker_id == 8


@pytest.mark.parametrize(("setup", "request_args", "code", "fragment"), [
    # A new group's first replica must take the first id.
    (0, (CLUSTER, GROUP, 2, address(2), check_code(2)),
     Code.CONTROLLER_BROKER_ID_INVALID, "must apply for id 1"),
    # Check-code mismatch: broker 1 is owned by someone else.
    (1, (CLUSTER, GROUP, 1, address(9), check_code(9)),
     Code.CONTROLLER_BROKER_ID_INVALID, "check code mismatch"),
    (1, (CLUSTER, GROUP, 0, address(0), check_code(0)),
     Code.CONTROLLER_BROKER_ID_INVALID, "below the first id"),
    (1, ("OtherCluster", GROUP, 2, address(2), check_code(2)),
     Code.CONTROLLER_INVALID_REQUEST, "belongs to cluster"),
])
def test_apply_broker_id_rejections(h, setup, request_args, code, fragment):
    for _ in range(setup):
        h.join()
    before = h.manager.snapshot()
    result = h.manager.apply_broker_id(*request_args)
    h.assert_rejected(result, code)
    assert fragment in result.remark
    assert h.manager.snapshot() == before


def test_next_broker_id_for_a_group_of_another_cluster(h):
    h.join()
    h.assert_rejected(h.manager.get_next_broker_id("OtherCluster", GROUP),
                      Code.CONTROLLER_INVALID_REQUEST)


def test_register_reports_the_alive_master_and_epochs(h):
    h.build(3)
    result = h.manager.register_broker(CLUSTER, GROUP, 2, address(2), h.live)
    assert result.ok and result.events == ()
    payload = result.payload
    assert (payload.master_broker_id, payload.master_address) == (1, address(1))
    assert (payload.master_epoch, payload.sync_state_set_epoch) == (1, 2)
    assert payload.sync_state_set == {1, 2, 3}


def test_register_hides_a_dead_master(h):
    h.build(3)
    h.live.down(1)
    payload = h.manager.register_broker(CLUSTER, GROUP, 2, address(2), h.live).payload
    assert payload.master_broker_id is None and payload.master_address is None
    assert payload.master_epoch == 1


def test_register_at_a_new_address_updates_it(h):
    h.build(2)
    result = h.manager.register_broker(CLUSTER, GROUP, 2, "10.9.9.9:10911", h.live)
    assert result.events == (UpdateBrokerAddressEvent(CLUSTER, GROUP, 2, "10.9.9.9:10911"),)
    h.commit(result)
    assert h.group().address_of(2) == "10.9.9.9:10911"
    assert h.group().member(2).register_check_code == check_code(2)


def test_master_registering_at_a_new_address_reports_it(h):
    h.build(2)
    result = h.manager.register_broker(CLUSTER, GROUP, 1, "10.9.9.1:10911", h.live)
    assert result.payload.master_address == "10.9.9.1:10911"


@pytest.mark.parametrize(("cluster", "name", "broker_id", "code"), [
    (CLUSTER, "unknown-group", 1, Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED),
    (CLUSTER, GROUP, 9, Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED),
    ("OtherCluster", GROUP, 1, Code.CONTROLLER_INVALID_REQUEST),
])
def test_register_rejections(h, cluster, name, broker_id, code):
    h.build(2)
    before = h.manager.snapshot()
    h.assert_rejected(
        h.manager.register_broker(cluster, name, broker_id, address(broker_id), h.live), code
    )
    assert h.manager.snapshot() == before


@pytest.mark.parametrize(("cluster", "name", "broker_id", "code"), [
    (CLUSTER, GROUP, 1, Code.SUCCESS),
    (CLUSTER, "unknown-group", 1, Code.CONTROLLER_BROKER_METADATA_NOT_EXIST),
    (CLUSTER, GROUP, 5, Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED),
    ("OtherCluster", GROUP, 1, Code.CONTROLLER_INVALID_REQUEST),
])
def test_heartbeat_admission(h, cluster, name, broker_id, code):
    h.build(2)
    result = h.manager.check_heartbeat(cluster, name, broker_id)
    assert result.code == code
    assert result.events == ()
