"""The broker's controller-mode flow, driven by hand (no I/O, no clock)."""

from __future__ import annotations

import pytest

from triomq.broker.core.identity import BrokerIdentity
from triomq.broker.core.role import BrokerRole
from triomq.broker.replication.core.controller_flow import (
    Call,
    ControllerAnswer,
    ControllerModeFlow,
    FlowSettings,
    LearnSyncStateSet,
    Log,
    ProposalOutcome,
    Registered,
    SaveIdentity,
    SendHeartbeat,
    TakeMaster,
    TakeSlave,
)
from triomq.controller.core.codes import ResponseCode
from triomq.controller.core.requests import (
    AlterSyncStateSet,
    ApplyBrokerId,
    ElectAnswer,
    ElectMaster,
    GetNextBrokerId,
    GetReplicaInfo,
    NextBrokerId,
    RegisterBroker,
    SyncStateSet,
)
from triomq.controller.core.wire import ReplicaInfo
from triomq.errors import ConfigError

Code = ResponseCode
SETTINGS = FlowSettings(cluster_name="c", broker_name="g", address="me",
                        controllers=("c1", "c2"), broker_heartbeat_interval=100,
                        sync_controller_metadata_period=300)
REPLICAS = ((1, "other"), (2, "me"))
OK = ControllerAnswer(Code.SUCCESS)


def info(master: int | None, epoch: int, members=(1, 2), set_epoch: int = 1) -> ReplicaInfo:
    address = dict(REPLICAS).get(master) if master is not None else None
    return ReplicaInfo("g", master, address, epoch, frozenset(members), set_epoch, REPLICAS)


def calls(outputs) -> list[Call]:
    return [out for out in outputs if isinstance(out, Call)]


def only_call(flow: ControllerModeFlow) -> Call:
    [call] = calls(flow.outputs())
    return call


def registered(saved_id: int = 2, answer: ReplicaInfo | None = None) -> ControllerModeFlow:
    """A flow registered as ``saved_id``; its outputs drained."""
    flow = ControllerModeFlow(SETTINGS)
    flow.start(0, BrokerIdentity("c", "g", saved_id, "me;1"), 0, "me;2")
    call = only_call(flow)
    assert call.request == RegisterBroker("c", "g", saved_id, "me")
    flow.answered(0, call.id, ControllerAnswer(Code.SUCCESS, payload=answer or info(1, 1)))
    flow.outputs()
    return flow


def test_a_new_replica_claims_an_id_and_saves_it_before_registering():
    flow = ControllerModeFlow(SETTINGS)
    flow.start(0, None, 0, "me;42")
    call = only_call(flow)
    assert call.request == GetNextBrokerId("c", "g")
    flow.answered(0, call.id, ControllerAnswer(Code.SUCCESS, payload=NextBrokerId(2)))
    call = only_call(flow)
    assert call.request == ApplyBrokerId("c", "g", 2, "me;42")
    flow.answered(0, call.id, OK)
    assert flow.outputs() == [SaveIdentity(BrokerIdentity("c", "g", 2, "me;42"))]
    flow.identity_saved(0)
    call = only_call(flow)
    assert call.request == RegisterBroker("c", "g", 2, "me")
    flow.answered(0, call.id, ControllerAnswer(Code.SUCCESS, payload=info(1, 3)))
    out = flow.outputs()
    assert Registered(2) in out
    assert [o.controller for o in out if isinstance(o, SendHeartbeat)] == ["c1", "c2"]
    assert TakeSlave("other", 3, 2) in out
    assert flow.broker_id == 2 and flow.registered


def test_an_id_another_replica_claimed_first_is_no_failure_and_the_next_is_asked_at_once():
    flow = ControllerModeFlow(SETTINGS)
    flow.start(0, None, 0, "me;42")
    flow.answered(0, only_call(flow).id, ControllerAnswer(Code.SUCCESS, payload=NextBrokerId(1)))
    call = only_call(flow)
    assert call.request == ApplyBrokerId("c", "g", 1, "me;42")
    flow.answered(5, call.id, ControllerAnswer(Code.CONTROLLER_BROKER_ID_INVALID,
                                     "broker id 1 of group 'g' is owned by another broker"))
    out = flow.outputs()
    assert [(o.text, o.warning) for o in out if isinstance(o, Log)] == [
        ("broker me: broker id 1 went to a replica that claimed it first; asking the "
         "controllers for the next free id", False)]
    assert [c.request for c in calls(out)] == [GetNextBrokerId("c", "g")]
    flow.answered(5, calls(out)[0].id, ControllerAnswer(Code.SUCCESS, payload=NextBrokerId(2)))
    call = only_call(flow)
    assert call.request == ApplyBrokerId("c", "g", 2, "me;42")
    flow.answered(5, call.id, OK)
    assert flow.outputs() == [SaveIdentity(BrokerIdentity("c", "g", 2, "me;42"))]


def test_a_saved_identity_of_another_group_is_refused():
    flow = ControllerModeFlow(SETTINGS)
    with pytest.raises(ConfigError, match="belongs to c/h"):
        flow.start(0, BrokerIdentity("c", "h", 1, "x"), 0, "me;1")
    with pytest.raises(ConfigError, match="belongs to d/g"):
        flow.start(0, BrokerIdentity("d", "g", 1, "x"), 0, "me;1")


def test_failed_registration_is_retried_after_the_metadata_period():
    flow = ControllerModeFlow(SETTINGS)
    flow.start(0, BrokerIdentity("c", "g", 2, "me;1"), 0, "me;2")
    call = only_call(flow)
    flow.answered(10, call.id, None, "no leader")
    assert [o.text for o in flow.outputs() if isinstance(o, Log)] == [
        "broker me: registration with the controllers failed: no leader"]
    assert flow.next_deadline() == 310
    flow.tick(309)
    assert flow.outputs() == []
    flow.tick(310)
    assert only_call(flow).request == RegisterBroker("c", "g", 2, "me")


def test_a_forgotten_replica_claims_its_id_again_with_its_check_code():
    flow = ControllerModeFlow(SETTINGS)
    flow.start(0, BrokerIdentity("c", "g", 2, "me;1"), 0, "me;2")
    call = only_call(flow)
    flow.answered(0, call.id, ControllerAnswer(Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED))
    call = only_call(flow)
    assert call.request == ApplyBrokerId("c", "g", 2, "me;1")
    flow.answered(0, call.id, OK)
    call = only_call(flow)
    assert call.request == RegisterBroker("c", "g", 2, "me")
    flow.answered(0, call.id, ControllerAnswer(Code.SUCCESS, payload=info(2, 1)))
    assert TakeMaster(1, 2, frozenset({1, 2}), 1) in flow.outputs()


def test_no_master_asks_an_election_and_says_why_once_per_reason():
    flow = ControllerModeFlow(SETTINGS)
    flow.start(0, BrokerIdentity("c", "g", 2, "me;1"), 0, "me;2")
    flow.answered(0, only_call(flow).id, ControllerAnswer(Code.SUCCESS, payload=info(None, 1)))
    logs = []
    for now in (0, 300, 600):
        call = next(c for c in calls(flow.outputs()) if c.request == ElectMaster("c", "g", 2))
        flow.answered(now, call.id,
            ControllerAnswer(Code.CONTROLLER_MASTER_NOT_AVAILABLE, "unclean off"))
        assert flow.no_master_reason == "unclean off"
        logs += [o.text for o in flow.outputs() if isinstance(o, Log)]
        assert flow.next_deadline() == now + 300
        flow.tick(now + 300)  # the poll
        flow.answered(now, only_call(flow).id,
            ControllerAnswer(Code.SUCCESS, payload=info(None, 1)))
    assert logs == ["broker me: group g has no master: unclean off"]
    assert not flow.group_has_master  # its slaves serve reads meanwhile
    call = only_call(flow)
    flow.answered(0, call.id, ControllerAnswer(Code.CONTROLLER_MASTER_STILL_EXIST,
                                      payload=ElectAnswer("c", info(2, 2))))
    assert flow.no_master_reason == ""
    assert TakeMaster(2, 2, frozenset({1, 2}), 1) in flow.outputs()


def test_role_changes_one_at_a_time_towards_the_newest_info():
    flow = registered()
    assert flow.role is BrokerRole.NONE
    flow.notified(0, info(2, 2))
    flow.notified(0, info(1, 1))  # older: ignored
    assert flow.replica_info == info(2, 2)
    flow.notified(0, info(1, 3))
    assert flow.outputs() == []  # TakeSlave(1) is still under way
    flow.followed(0, BrokerRole.SLAVE, 1)
    assert flow.outputs() == [TakeSlave("other", 3, 2)]
    flow.followed(0, BrokerRole.SLAVE, 3)
    flow.notified(0, info(1, 3))
    assert flow.outputs() == []  # already its slave
    assert flow.group_has_master


def test_a_failed_role_change_is_retried_after_the_metadata_period():
    flow = registered(answer=info(2, 4))
    flow.followed(50, BrokerRole.NONE, -1, "epoch 4 is older than 5")
    assert any(isinstance(o, Log) and "epoch 4 failed" in o.text for o in flow.outputs())
    flow.notified(60, info(2, 4, set_epoch=2))
    assert flow.outputs() == []
    flow.tick(349)
    assert not any(isinstance(o, TakeMaster) for o in flow.outputs())
    flow.tick(350)
    assert TakeMaster(4, 2, frozenset({1, 2}), 2) in flow.outputs()


def test_the_masters_poll_hands_it_the_committed_set_of_its_term():
    flow = registered(answer=info(2, 4, members=(2,), set_epoch=3))
    flow.followed(0, BrokerRole.MASTER, 4)
    assert flow.sync_state_set_epoch == 3
    flow.notified(0, info(2, 4, members=(1, 2), set_epoch=3))
    assert flow.outputs() == [LearnSyncStateSet(frozenset({1, 2}))]
    flow.sync_state_set_epoch = 5
    flow.notified(0, info(2, 4, members=(2,), set_epoch=4))
    assert flow.outputs() == []  # older than what it knows


def test_heartbeats_go_out_one_interval_after_the_last():
    flow = registered()  # the first heartbeats went out at 0
    flow.heartbeat_sent(20, "c1")
    flow.tick(99)
    assert flow.outputs() == []
    flow.tick(100)
    assert flow.outputs() == [SendHeartbeat("c1", 2, 0)]
    flow.heartbeat_sent(130, "c1")
    flow.tick(199)
    assert flow.outputs() == []
    flow.tick(200)
    assert flow.outputs() == [SendHeartbeat("c1", 2, 0)]


def test_a_heartbeat_answered_late_is_followed_by_the_next_at_once():
    # The broker (or the controller) was stalled for 3 s after the heartbeat went out:
    # the next goes as soon as the answer is in, not one more interval later.
    def heartbeats() -> list[SendHeartbeat]:
        return [out for out in flow.outputs() if isinstance(out, SendHeartbeat)]

    flow = registered()
    flow.heartbeat_sent(3000, "c1")
    assert flow.next_deadline() <= 3000
    flow.tick(3000)
    assert heartbeats() == [SendHeartbeat("c1", 2, 0)]
    # A broker stalled while waiting for its timer sends as soon as it runs again.
    flow.heartbeat_sent(3010, "c2")
    flow.tick(6000)
    assert heartbeats() == [SendHeartbeat("c2", 2, 0)]


def test_a_poll_of_a_forgotten_group_registers_again():
    flow = registered()
    flow.tick(flow.next_deadline())
    call = only_call(flow)
    flow.answered(0, call.id, ControllerAnswer(Code.CONTROLLER_BROKER_METADATA_NOT_EXIST))
    assert only_call(flow).request == RegisterBroker("c", "g", 2, "me")


def master_flow() -> ControllerModeFlow:
    flow = registered(answer=info(2, 4, members=(2,), set_epoch=3))
    flow.followed(0, BrokerRole.MASTER, 4)
    return flow


def test_a_proposal_is_fenced_by_both_epochs():
    flow = master_flow()
    token = flow.propose(0, frozenset({1, 2}), 4)
    call = only_call(flow)
    assert call.request == AlterSyncStateSet("g", 2, 4, 3, frozenset({1, 2}))
    flow.answered(0, call.id,
        ControllerAnswer(Code.SUCCESS, payload=SyncStateSet(frozenset({1, 2}), 4)))
    assert flow.outputs() == [ProposalOutcome(token, frozenset({1, 2}))]
    assert flow.sync_state_set_epoch == 4


def test_a_proposal_without_an_answer_has_an_unknown_outcome():
    flow = master_flow()
    token = flow.propose(0, frozenset({1, 2}), 4)
    flow.answered(0, only_call(flow).id, None, "no leader")
    assert ProposalOutcome(token, None) in flow.outputs()


def test_a_refused_proposal_answers_the_set_read_back():
    flow = master_flow()
    token = flow.propose(0, frozenset({2}), 4)
    flow.answered(0, only_call(flow).id,
        ControllerAnswer(Code.CONTROLLER_INVALID_REQUEST, "unchanged"))
    call = only_call(flow)
    assert call.request == GetReplicaInfo("g")
    flow.answered(0, call.id, ControllerAnswer(Code.SUCCESS, payload=info(2, 4, set_epoch=5)))
    assert ProposalOutcome(token, frozenset({1, 2})) in flow.outputs()
    assert flow.sync_state_set_epoch == 5


def test_a_proposal_refused_for_a_newer_master_fences_and_learns_it():
    flow = master_flow()
    token = flow.propose(0, frozenset({2}), 4)
    flow.answered(0, only_call(flow).id,
        ControllerAnswer(Code.CONTROLLER_FENCED_MASTER_EPOCH, "old"))
    flow.answered(0, only_call(flow).id, ControllerAnswer(Code.SUCCESS, payload=info(1, 5)))
    out = flow.outputs()
    assert TakeSlave("other", 5, 2) in out
    [outcome] = [o for o in out if isinstance(o, ProposalOutcome)]
    assert outcome.token == token and outcome.fenced == "the controller is at master epoch 5"


def test_no_proposal_before_the_replica_has_an_id():
    flow = ControllerModeFlow(SETTINGS)
    flow.start(0, None, 0, "me;1")
    flow.outputs()
    token = flow.propose(0, frozenset({2}), 1)
    assert flow.outputs() == [ProposalOutcome(token, None)]


def test_pushes_before_registration_are_ignored():
    flow = ControllerModeFlow(SETTINGS)
    flow.start(0, BrokerIdentity("c", "g", 2, "me;1"), 0, "me;2")
    flow.outputs()
    flow.notified(0, info(2, 1))
    assert flow.replica_info is None and flow.outputs() == []
