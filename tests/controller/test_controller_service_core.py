"""The controller service's core by hand: requests, Raft outcomes and time in; outputs out."""

from __future__ import annotations

import logging

import pytest
from core_pump import CLUSTER, GROUP, INACTIVE, SCAN, TIMEOUT, Pump, address

from triomq.controller import ResponseCode
from triomq.controller.core.requests import (
    AlterSyncStateSet,
    ApplyBrokerId,
    ConfigValues,
    ElectMaster,
    GetControllerConfig,
    GetMetadata,
    GetNextBrokerId,
    GetReplicaInfo,
    GetSyncStateData,
    Malformed,
    NextBrokerId,
    Reply,
    SyncStateTable,
    UpdateControllerConfig,
)
from triomq.controller.core.results import Replica
from triomq.controller.core.service_core import (
    Applied,
    Elected,
    LostLeadership,
    NotCommitted,
    Notify,
    Propose,
    ReadBarrier,
)
from triomq.controller.core.wire import ControllerMetadata, ReplicaInfo


@pytest.fixture
def pump() -> Pump:
    pump = Pump()
    pump.lead()
    return pump


def test_a_follower_answers_not_leader_naming_the_leader() -> None:
    pump = Pump()
    pump.lead(term=3, leader=2)
    rid = pump.request(GetReplicaInfo(GROUP))
    reply = pump.reply(rid)
    assert reply.code == ResponseCode.CONTROLLER_NOT_LEADER
    assert (reply.leader_id, reply.leader_address) == (2, "tcp://c2:9878")
    assert "the leader is 2 at tcp://c2:9878" in reply.remark
    pump.lead(term=4, leader=0)
    reply = pump.reply(pump.request(ApplyBrokerId(CLUSTER, GROUP, 1, f"{address(1)};c")))
    assert reply.code == ResponseCode.CONTROLLER_NOT_LEADER
    assert (reply.leader_id, reply.leader_address) == (0, "")
    assert "the leader is unknown" in reply.remark
    assert not pump.of(ReadBarrier) and not pump.of(Propose)


def test_writes_take_a_barrier_once_per_term_and_reads_every_time(pump: Pump) -> None:
    rid = pump.request(ApplyBrokerId(CLUSTER, GROUP, 1, f"{address(1)};c"))
    assert len(pump.open(ReadBarrier)) == 1 and not pump.of(Propose)
    pump.pass_barriers()
    assert len(pump.open(Propose)) == 1 and pump.reply(rid) is None
    pump.commit()
    assert pump.reply(rid).ok
    # Same term: the next write proposes at once.
    pump.request(ApplyBrokerId(CLUSTER, GROUP, 2, f"{address(2)};c2"))
    assert len(pump.of(ReadBarrier)) == 1 and len(pump.open(Propose)) == 1
    pump.commit()
    # Reads always take one.
    pump.request(GetReplicaInfo(GROUP))
    pump.request(GetReplicaInfo(GROUP))
    assert len(pump.open(ReadBarrier)) == 2
    pump.pass_barriers()
    # A new term: writes take a barrier again.
    pump.lead(term=2)
    pump.request(ElectMaster(CLUSTER, GROUP, 1))
    assert len(pump.open(ReadBarrier)) == 1 and not pump.open(Propose)


def test_state_changes_are_served_one_at_a_time(pump: Pump) -> None:
    first = pump.request(ApplyBrokerId(CLUSTER, GROUP, 1, f"{address(1)};c1"))
    second = pump.request(ApplyBrokerId(CLUSTER, GROUP, 2, f"{address(2)};c2"))
    pump.pass_barriers()
    assert len(pump.open(Propose)) == 1  # only the first's event
    pump.commit()
    assert pump.reply(first).ok and pump.reply(second) is None
    # The second was validated against the first's effect: id 2 is next.
    assert len(pump.open(Propose)) == 1
    pump.commit()
    assert pump.reply(second).ok
    assert pump.manager.group(GROUP).broker_ids == {1, 2}


def test_an_event_that_no_longer_applies_is_refused(pump: Pump) -> None:
    rid = pump.request(ApplyBrokerId(CLUSTER, GROUP, 1, f"{address(1)};c"))
    pump.pass_barriers()
    proposal = pump.open(Propose)[0]
    pump.settle(proposal.ticket, Applied(False))
    reply = pump.reply(rid)
    assert reply.code == ResponseCode.CONTROLLER_INVALID_REQUEST
    assert "no longer applied" in reply.remark


def test_raft_failures_answer_not_leader_or_internal_error(pump: Pump) -> None:
    lost = pump.request(ApplyBrokerId(CLUSTER, GROUP, 1, f"{address(1)};c"))
    pump.pass_barriers()
    pump.lead(term=1, leader=2)
    pump.settle(pump.open(Propose)[0].ticket, LostLeadership())
    assert pump.reply(lost).code == ResponseCode.CONTROLLER_NOT_LEADER
    assert pump.reply(lost).leader_id == 2
    pump.lead(term=2)
    failed = pump.request(ApplyBrokerId(CLUSTER, GROUP, 1, f"{address(1)};c"))
    pump.pass_barriers()
    pump.settle(pump.open(Propose)[0].ticket, NotCommitted("TERM_CHANGED: replaced"))
    reply = pump.reply(failed)
    assert reply.code == ResponseCode.CONTROLLER_JRAFT_INTERNAL_ERROR
    assert reply.remark == "not committed: TERM_CHANGED: replaced"


def test_requests_time_out_and_the_next_one_is_served() -> None:
    pump = Pump(scan_not_active_broker_interval=10 * TIMEOUT)
    pump.lead()
    barrier = pump.request(GetReplicaInfo(GROUP))
    write = pump.request(ApplyBrokerId(CLUSTER, GROUP, 1, f"{address(1)};c"))
    queued = pump.request(ApplyBrokerId(CLUSTER, GROUP, 1, f"{address(1)};c"))
    read_ticket = pump.open(ReadBarrier)[0].ticket
    pump.settle(pump.open(ReadBarrier)[1].ticket, Applied())  # the write's barrier
    stale = pump.open(Propose)[0].ticket
    assert pump.core.next_deadline() == TIMEOUT
    pump.advance(TIMEOUT - 1)
    assert pump.reply(barrier) is None and pump.reply(write) is None
    pump.advance(1)
    assert pump.reply(barrier).code == ResponseCode.CONTROLLER_JRAFT_INTERNAL_ERROR
    assert pump.reply(barrier).remark == "the read barrier timed out"
    assert pump.reply(write).code == ResponseCode.CONTROLLER_JRAFT_INTERNAL_ERROR
    assert "not committed in time" in pump.reply(write).remark
    # Late outcomes change nothing; the queued write goes on.
    pump.settle(read_ticket, Applied())
    pump.settle(stale, NotCommitted("WAIT_QUORUM_ACK_TIMEOUT: late"))
    assert len(pump.of(Reply)) == 2
    pump.commit()
    assert pump.reply(queued).ok


def test_heartbeats_are_recorded_on_every_controller() -> None:
    pump = Pump()
    pump.lead()
    broker_id = pump.join()
    follower = Pump()
    follower.manager = pump.manager
    follower.core.manager = pump.manager
    follower.lead(term=1, leader=2)
    assert follower.beat(broker_id).ok
    assert follower.core.heartbeats.get(CLUSTER, GROUP, broker_id).max_offset == 100
    assert follower.beat(9).code == ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED


def test_the_scan_elects_for_a_silent_master_and_notifies_the_group(
        pump: Pump, caplog: pytest.LogCaptureFixture) -> None:
    first, second = pump.join(), pump.join()
    rid = pump.request(ElectMaster(CLUSTER, GROUP, first))
    pump.run()
    assert pump.reply(rid).payload.info.master_broker_id == first
    rid = pump.request(AlterSyncStateSet(GROUP, first, 1, 1, {first, second}))
    pump.run()
    assert pump.reply(rid).ok
    assert [e.info.master_broker_id for e in pump.of(Elected)] == [first]
    caplog.set_level(logging.INFO, "triomq.controller")
    # The master goes silent; the other replica keeps beating.
    for _ in range(INACTIVE // SCAN):
        pump.beat(second)
        pump.advance(SCAN)
        pump.run()
    assert len(pump.of(Elected)) == 1
    pump.beat(second)
    pump.advance(SCAN)
    pump.run()
    elected = pump.of(Elected)[1:]
    assert [e.info.master_broker_id for e in elected] == [second]
    assert pump.core.elections == 2
    notified = pump.of(Notify)[-2:]
    assert {n.address for n in notified} == {address(first), address(second)}
    assert all(n.info == elected[0].info for n in notified)
    record = next(r for r in caplog.records if "elected in epoch 2" in r.getMessage())
    assert record.levelno == logging.INFO
    # The next scans find the new master alive: no election.
    for _ in range(3):
        pump.beat(second)
        pump.advance(SCAN)
        pump.run()
    assert len(pump.of(Elected)) == 2


def test_a_group_left_without_master_is_logged_as_a_warning(
        pump: Pump, caplog: pytest.LogCaptureFixture) -> None:
    first = pump.join()
    pump.request(ElectMaster(CLUSTER, GROUP, first))
    pump.run()
    caplog.set_level(logging.INFO, "triomq.controller")
    for _ in range((INACTIVE + 2 * SCAN) // SCAN):
        pump.advance(SCAN)
        pump.run()
    assert pump.manager.group(GROUP).master_broker_id is None
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert any("no master in epoch 2" in r.getMessage() for r in warnings)


def test_the_scan_waits_for_leadership(pump: Pump) -> None:
    first = pump.join()
    pump.request(ElectMaster(CLUSTER, GROUP, first))
    pump.run()
    pump.lead(term=2, leader=2)
    for _ in range(20):
        pump.advance(SCAN)
        pump.run()
    assert pump.core.next_deadline() == pump.now + SCAN
    assert len(pump.of(Elected)) == 1
    # Leader again: the master is given one timeout from now before the scan elects.
    pump.core.heartbeats.remove(CLUSTER, GROUP, None)
    pump.lead(term=3)
    for _ in range(INACTIVE // SCAN + 1):
        pump.advance(SCAN)
        pump.run()
    assert len(pump.of(Elected)) == 1
    pump.advance(SCAN)
    pump.run()
    assert [e.info.master_broker_id for e in pump.of(Elected)[1:]] == [None]


def test_an_election_for_another_cluster_is_refused(pump: Pump) -> None:
    pump.join()
    reply = pump.reply(pump.request(ElectMaster("OtherCluster", GROUP, 1)))
    assert reply.code == ResponseCode.CONTROLLER_INVALID_REQUEST
    assert "belongs to cluster 'DefaultCluster'" in reply.remark


def test_malformed_requests_are_refused(pump: Pump) -> None:
    reply = pump.reply(pump.request(Malformed("REGISTER_BROKER", "header field 'brokerId'")))
    assert reply.code == ResponseCode.CONTROLLER_INVALID_REQUEST
    assert reply.remark == "header field 'brokerId'"


def test_config_and_metadata_are_answered_by_any_controller() -> None:
    pump = Pump()
    pump.lead(term=5, leader=2)
    config = pump.reply(pump.request(GetControllerConfig())).payload
    assert isinstance(config, ConfigValues)
    assert config.properties["requestTimeout"] == str(TIMEOUT)
    assert config.properties["controllerDLegerPeers"] == "1-c1:9878;2-c2:9878"
    assert config.properties["controllerDLegerGroup"] == "DefaultControllerGroup"
    assert pump.reply(pump.request(GetMetadata())).payload == ControllerMetadata(
        "DefaultControllerGroup", "2", "tcp://c2:9878", False,
        (("1", "tcp://c1:9878"), ("2", "tcp://c2:9878")))
    pump.lead(term=6, leader=0)
    metadata = pump.reply(pump.request(GetMetadata())).payload
    assert (metadata.leader_id, metadata.leader_address, metadata.is_leader) == (
        None, None, False)
    refused = pump.reply(pump.request(UpdateControllerConfig({"node_id": 3})))
    assert refused.code == ResponseCode.CONTROLLER_INVALID_REQUEST
    assert "cannot change at run time" in refused.remark
    bad = pump.reply(pump.request(UpdateControllerConfig({"election_policy": "nope"})))
    assert bad.code == ResponseCode.CONTROLLER_INVALID_REQUEST and "nope" in bad.remark
    ok = pump.reply(pump.request(UpdateControllerConfig({"enable_elect_unclean_master": True,
                                                         "request_timeout": 50})))
    assert ok.ok
    assert pump.core.config.enable_elect_unclean_master
    assert pump.core.config.request_timeout == 50


def test_replies_carry_their_payloads(pump: Pump) -> None:
    broker_id = pump.join()
    rid = pump.request(GetNextBrokerId(CLUSTER, GROUP))
    pump.run()
    assert pump.reply(rid).payload == NextBrokerId(broker_id + 1)
    rid = pump.request(GetReplicaInfo(GROUP))
    pump.run()
    info = pump.reply(rid).payload
    assert isinstance(info, ReplicaInfo)
    assert info.replicas == ((broker_id, address(broker_id)),)
    rid = pump.request(GetReplicaInfo("missing"))
    pump.run()
    assert pump.reply(rid).code == ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST
    # Replicas alive by the heartbeats this controller recorded.
    rid = pump.request(GetSyncStateData((GROUP, "missing")))
    pump.run()
    table = pump.reply(rid).payload
    assert isinstance(table, SyncStateTable) and len(table.groups) == 1
    group = table.groups[0]  # registered, no master elected yet: not in sync
    assert (group.in_sync_replicas, group.not_in_sync_replicas) == (
        (), (Replica(broker_id, address(broker_id), alive=True),))
    pump.run_for(INACTIVE + 1)
    rid = pump.request(GetSyncStateData((GROUP,)))
    pump.run()
    assert not pump.reply(rid).payload.groups[0].not_in_sync_replicas[0].alive
