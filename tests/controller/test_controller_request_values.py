"""Controller requests read from remoting commands, and replies written back."""

from __future__ import annotations

import json

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from triomq.controller import RequestCode, ResponseCode
from triomq.controller.core.requests import (
    REQUEST_CODES,
    AlterSyncStateSet,
    ApplyBrokerId,
    BrokerHeartbeat,
    CleanBrokerData,
    ConfigValues,
    ElectAnswer,
    ElectMaster,
    GetNextBrokerId,
    GetReplicaInfo,
    GetSyncStateData,
    Malformed,
    NextBrokerId,
    RegisterBroker,
    Reply,
    SyncStateSet,
    SyncStateTable,
    UpdateControllerConfig,
    decode_request,
    read_reply,
    reply_command,
    request_frame,
)
from triomq.controller.core.results import Replica, SyncStateData
from triomq.controller.core.wire import ControllerMetadata, ReplicaInfo
from triomq.protocol.remoting import RemotingCommand

KEYS = ["clusterName", "brokerName", "brokerId", "brokerAddr", "brokerAddress", "epoch",
        "maxOffset", "confirmOffset", "electionPriority", "heartbeatTimeoutMills",
        "appliedBrokerId", "registerCheckCode", "masterBrokerId", "masterEpoch",
        "syncStateSetEpoch", "invokeTime", "designateElect",
        "brokerControllerIdsToClean", "isCleanLivingBroker"]
VALUES = st.one_of(st.text(max_size=12), st.integers(-5, 2**70).map(str),
                   st.sampled_from(["true", "false", "1;2", ";", "", "1;x"]))


BODIES = st.one_of(st.binary(max_size=40), st.builds(
    lambda ids, epoch: json.dumps({"syncStateSet": ids, "syncStateSetEpoch": epoch}).encode(),
    st.lists(st.one_of(st.integers(-2, 2**64), st.text(max_size=3))),
    st.one_of(st.integers(-2, 2**64), st.text(max_size=3), st.none())))


@given(st.sampled_from(REQUEST_CODES), st.dictionaries(st.sampled_from(KEYS), VALUES), BODIES)
def test_any_header_decodes_to_a_request_or_a_refusal(code: int, fields: dict[str, str],
                                                      body: bytes) -> None:
    request = decode_request(RemotingCommand.request(code, fields, body))
    if isinstance(request, Malformed):
        assert request.name == RequestCode(code).name and request.reason


def test_rocketmqs_requests_decode_to_their_requests() -> None:
    """Headers and bodies as RocketMQ 5.3.3's BrokerOuterAPI and mqadmin write them."""
    # A broker that has no epoch and no confirm offset yet sends -1s, and invokeTime.
    heartbeat = decode_request(RemotingCommand.request(RequestCode.BROKER_HEARTBEAT, {
        "clusterName": "c", "brokerName": "g", "brokerId": "2", "brokerAddr": "10.0.0.2:10911",
        "epoch": "-1", "maxOffset": "-1", "confirmOffset": "-1", "electionPriority": "0",
        "heartbeatTimeoutMills": "1000", "invokeTime": "1700000000000"}))
    assert heartbeat == BrokerHeartbeat("c", "g", 2, "10.0.0.2:10911", epoch=-1,
                                        max_offset=-1, confirm_offset=-1,
                                        heartbeat_timeout_ms=1000)
    # ALTER_SYNC_STATE_SET: the proposed set in a SyncStateSet body (a HashSet's order,
    # fastjson's numbers as strings too), with the epoch of the set it replaces.
    alter = decode_request(RemotingCommand.request(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, {
        "brokerName": "g", "masterBrokerId": "1", "masterEpoch": "2",
        "invokeTime": "1700000000000"}, b'{"syncStateSet":[2,"1"],"syncStateSetEpoch":"3"}'))
    assert alter == AlterSyncStateSet("g", 1, 2, 3, {1, 2})
    apply = decode_request(RemotingCommand.request(RequestCode.CONTROLLER_APPLY_BROKER_ID, {
        "clusterName": "c", "brokerName": "g", "appliedBrokerId": "2",
        "registerCheckCode": "10.0.0.2:10911;1700000000000"}))
    assert apply == ApplyBrokerId("c", "g", 2, "10.0.0.2:10911;1700000000000")
    assert apply.broker_address == "10.0.0.2:10911"
    register = decode_request(RemotingCommand.request(RequestCode.CONTROLLER_REGISTER_BROKER, {
        "clusterName": "c", "brokerName": "g", "brokerId": "2",
        "brokerAddress": "10.0.0.2:10911", "invokeTime": "1700000000000"}))
    assert register == RegisterBroker("c", "g", 2, "10.0.0.2:10911")
    elect = decode_request(RemotingCommand.request(RequestCode.CONTROLLER_ELECT_MASTER, {
        "clusterName": "c", "brokerName": "g", "designateElect": "true", "brokerId": "4"}))
    assert elect == ElectMaster("c", "g", 4, True)
    # ElectMasterRequestHeader's default brokerId is -1: no replica named.
    unnamed = decode_request(RemotingCommand.request(RequestCode.CONTROLLER_ELECT_MASTER, {
        "clusterName": "c", "brokerName": "g", "designateElect": "false", "brokerId": "-1"}))
    assert unnamed == ElectMaster("c", "g", None, False)
    for body in (b"", b"[1]", b'{"syncStateSet":[-1]}', b'{"syncStateSet":"1;2"}'):
        refused = decode_request(RemotingCommand.request(
            RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
            {"brokerName": "g", "masterBrokerId": "1", "masterEpoch": "2"}, body))
        assert isinstance(refused, Malformed) and "body" in refused.reason, refused
    # mqadmin's GET_SYNC_STATE_DATA: fastjson's list of names as the body.
    names = decode_request(RemotingCommand.request(RequestCode.CONTROLLER_GET_SYNC_STATE_DATA,
                                                   body=b'["b","a","b"]'))
    assert names == GetSyncStateData(("a", "b"))
    for body in (b'"a"', b"[1]", b"a;b", b"\xff"):
        refused = decode_request(RemotingCommand.request(RequestCode.CONTROLLER_GET_SYNC_STATE_DATA,
                                                         body=body))
        assert isinstance(refused, Malformed) and "JSON list of broker names" in refused.reason
    # mqadmin's UPDATE_CONTROLLER_CONFIG: MixAll.properties2String, RocketMQ's names.
    update = decode_request(RemotingCommand.request(
        RequestCode.UPDATE_CONTROLLER_CONFIG,
        body=b"requestTimeout=5\nenableElectUncleanMaster=true\n"))
    assert update == UpdateControllerConfig({"request_timeout": 5,
                                             "enable_elect_unclean_master": True})
    for body, reason in ((b"listenPort=9878\n", "unknown property 'listenPort'"),
                         (b"requestTimeout=soon\n", "requestTimeout: expected an integer"),
                         (b"notifyBrokerRoleChanged=1\n", "expected true or false")):
        refused = decode_request(RemotingCommand.request(RequestCode.UPDATE_CONTROLLER_CONFIG,
                                                         body=body))
        assert isinstance(refused, Malformed) and reason in refused.reason
        assert refused.code == ResponseCode.CONTROLLER_INVALID_REQUEST
    # As RocketMQ refuses its black-listed names.
    refused = decode_request(RemotingCommand.request(
        RequestCode.UPDATE_CONTROLLER_CONFIG, body=b"requestTimeout=5\nconfigStorePath=/x\n"))
    assert refused == Malformed("UPDATE_CONTROLLER_CONFIG",
                                "Can not update config in black list.",
                                ResponseCode.NO_PERMISSION)


def test_a_missing_key_is_named() -> None:
    request = decode_request(RemotingCommand.request(RequestCode.CONTROLLER_ELECT_MASTER, {}))
    assert request == Malformed("CONTROLLER_ELECT_MASTER",
                                "CONTROLLER_ELECT_MASTER: header field 'brokerName': missing")


INFO = ReplicaInfo("g", 1, "tcp://h:1", 2, {1, 2}, 3, ((1, "tcp://h:1"), (2, "tcp://h:2")))


def test_a_replica_info_reply_is_rocketmqs_header_and_sync_state_set() -> None:
    """REGISTER_BROKER's and GET_REPLICA_INFO's answers: the master in the header (as
    RegisterBrokerToControllerResponseHeader and GetReplicaInfoResponseHeader name it),
    the SyncStateSet in the body; the member group does not travel."""
    command = reply_command(Reply(7, ResponseCode.SUCCESS, payload=INFO))
    assert command.ext_fields == {"brokerName": "g", "masterBrokerId": "1",
                                  "masterAddress": "h:1", "masterEpoch": "2",
                                  "syncStateSetEpoch": "3"}
    assert json.loads(command.body) == {"syncStateSet": [1, 2], "syncStateSetEpoch": 3}
    masterless = reply_command(Reply(7, 0, payload=ReplicaInfo("g", None, None, 2, {1}, 3)))
    assert masterless.ext_fields == {"brokerName": "g", "masterEpoch": "2",
                                     "syncStateSetEpoch": "3"}


@pytest.mark.parametrize(("payload", "read", "expected"), [
    (SyncStateTable([SyncStateData("g", None, None, 0, 1, (),
                                   (Replica(1, "tcp://h:1", alive=False),))]),
     json.loads, {"replicasInfoTable": {"g": {
         "masterEpoch": 0, "syncStateSetEpoch": 1, "inSyncReplicas": [],
         "notInSyncReplicas": [{"brokerName": "g", "brokerId": 1, "brokerAddress": "h:1",
                                "alive": False}]}}}),
    (SyncStateTable([]), json.loads, {"replicasInfoTable": {}}),
    (SyncStateSet({2, 1}, 4), json.loads, {"syncStateSet": [1, 2], "syncStateSetEpoch": 4}),
    (ConfigValues({"b": "x:1", "a": "1"}), bytes, b"a=1\nb=x:1\n"),
])
def test_reply_bodies(payload, read, expected) -> None:
    command = reply_command(Reply(7, ResponseCode.SUCCESS, payload=payload))
    assert command.is_response and command.code == ResponseCode.SUCCESS
    assert read(command.body) == expected


def test_a_metadata_reply_is_rocketmqs_response_header() -> None:
    """GetMetaDataResponseHeader's fields in extFields, no body; nulls left out."""
    metadata = ControllerMetadata("group1", "2", "tcp://10.0.0.2:9878", False,
                                  (("1", "tcp://10.0.0.1:9878"), ("2", "tcp://10.0.0.2:9878")))
    command = reply_command(Reply(7, ResponseCode.SUCCESS, payload=metadata))
    assert command.body == b""
    assert command.ext_fields == {
        "group": "group1", "controllerLeaderId": "2",
        "controllerLeaderAddress": "10.0.0.2:9878", "isLeader": "false",
        "peers": "1:10.0.0.1:9878;2:10.0.0.2:9878;"}
    leaderless = ControllerMetadata("group1", None, None, False, ())
    assert reply_command(Reply(7, 0, payload=leaderless)).ext_fields == {
        "group": "group1", "isLeader": "false", "peers": ""}


def test_a_not_leader_reply_names_the_leader_in_its_header() -> None:
    command = reply_command(Reply(1, ResponseCode.CONTROLLER_NOT_LEADER, "not the leader",
                                  leader_id=2, leader_address="tcp://c2:9878"))
    assert command.ext_fields == {"leaderId": "2", "leaderAddress": "tcp://c2:9878"}
    assert command.remark == "not the leader" and command.body == b""
    unknown = reply_command(Reply(1, ResponseCode.CONTROLLER_NOT_LEADER))
    assert unknown.ext_fields == {"leaderId": "", "leaderAddress": ""}
    refused = reply_command(Reply(1, ResponseCode.CONTROLLER_INVALID_REQUEST, "bad"))
    assert refused.ext_fields == {} and refused.remark == "bad"
    # GetNextBrokerIdResponseHeader and AlterSyncStateSetResponseHeader: in the header.
    assert reply_command(Reply(1, 0, payload=NextBrokerId(4))).ext_fields == {
        "nextBrokerId": "4"}
    assert reply_command(Reply(1, 0, payload=SyncStateSet({1}, 5))).ext_fields == {
        "newSyncStateSetEpoch": "5"}


# -- the client's side: the frames a broker sends, the payloads it reads back -------

FRAMES = [
    (GetNextBrokerId("c", "g"), RequestCode.CONTROLLER_GET_NEXT_BROKER_ID,
     {"clusterName": "c", "brokerName": "g"}),
    (ApplyBrokerId("c", "g", 2, "10.0.0.2:10911;1700000000000"),
     RequestCode.CONTROLLER_APPLY_BROKER_ID,
     {"clusterName": "c", "brokerName": "g", "appliedBrokerId": "2",
      "registerCheckCode": "10.0.0.2:10911;1700000000000"}),
    (RegisterBroker("c", "g", 2, "10.0.0.2:10911"), RequestCode.CONTROLLER_REGISTER_BROKER,
     {"clusterName": "c", "brokerName": "g", "brokerId": "2",
      "brokerAddress": "10.0.0.2:10911"}),
    (BrokerHeartbeat("c", "g", 2, "10.0.0.2:10911", epoch=3, max_offset=10,
                     confirm_offset=-1, heartbeat_timeout_ms=1000),
     RequestCode.BROKER_HEARTBEAT,
     {"clusterName": "c", "brokerName": "g", "brokerId": "2", "brokerAddr": "10.0.0.2:10911",
      "epoch": "3", "maxOffset": "10", "confirmOffset": "0", "electionPriority": "0",
      "heartbeatTimeoutMills": "1000"}),
    (ElectMaster("c", "g", 2), RequestCode.CONTROLLER_ELECT_MASTER,
     {"clusterName": "c", "brokerName": "g", "brokerId": "2", "designateElect": "false"}),
    (ElectMaster("c", "g"), RequestCode.CONTROLLER_ELECT_MASTER,
     {"clusterName": "c", "brokerName": "g", "designateElect": "false"}),
    (GetReplicaInfo("g"), RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "g"}),
    (CleanBrokerData(None, "g", frozenset({3}), True), RequestCode.CLEAN_BROKER_DATA,
     {"brokerName": "g", "brokerControllerIdsToClean": "3", "isCleanLivingBroker": "true"}),
]


@pytest.mark.parametrize(("request_value", "code", "fields"), FRAMES,
                         ids=[type(frame[0]).__name__ for frame in FRAMES])
def test_a_request_is_written_as_rocketmqs_header_and_read_back(
        request_value, code: int, fields: dict[str, str]) -> None:
    assert request_frame(request_value) == (code, fields, b"")
    read = decode_request(RemotingCommand.request(code, fields))
    # The heartbeat's negative confirm offset travels as 0, as RocketMQ's broker sends it.
    expected = (attrs.evolve(request_value, confirm_offset=0)
                if isinstance(request_value, BrokerHeartbeat) else request_value)
    assert read == expected


def test_alter_sync_state_set_sends_the_set_in_a_body_as_rocketmqs_broker_does() -> None:
    code, fields, body = request_frame(AlterSyncStateSet("g", 1, 2, 3, {2, 1}))
    assert (code, fields) == (RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
                              {"brokerName": "g", "masterBrokerId": "1", "masterEpoch": "2"})
    assert json.loads(body) == {"syncStateSet": [1, 2], "syncStateSetEpoch": 3}


def test_get_sync_state_data_names_its_groups_in_the_body_as_mqadmin_does() -> None:
    code, fields, body = request_frame(GetSyncStateData(("b", "a", "b")))
    assert (code, fields, json.loads(body)) == (
        RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, {}, ["a", "b"])


def test_answers_are_read_back_as_the_cores_payloads() -> None:
    def answer(body: bytes, code: int = ResponseCode.SUCCESS, **fields: str) -> RemotingCommand:
        return RemotingCommand.response(code, ext_fields=fields or None, body=body)

    # RocketMQ 5.3.3's controller's answers, written by hand.
    assert read_reply(GetNextBrokerId("c", "g"), answer(
        b"", clusterName="c", brokerName="g", nextBrokerId="4")) == NextBrokerId(4)
    assert read_reply(AlterSyncStateSet("g", 1, 2, 3, {1}), answer(
        b'{"syncStateSet":[2,1],"syncStateSetEpoch":4}', newSyncStateSetEpoch="4")) \
        == SyncStateSet({1, 2}, 4)
    registered = read_reply(RegisterBroker("c", "g", 2, "tcp://h:2"), answer(
        b'{"syncStateSet":[1,2],"syncStateSetEpoch":6}', clusterName="c", brokerName="g",
        masterBrokerId="1", masterAddress="h:1", masterEpoch="5", syncStateSetEpoch="6"))
    assert registered == ReplicaInfo("g", 1, "tcp://h:1", 5, {1, 2}, 6)
    # No alive master: RocketMQ leaves the master and both epochs out of the header.
    assert read_reply(RegisterBroker("c", "g", 2, "tcp://h:2"), answer(
        b'{"syncStateSet":[1],"syncStateSetEpoch":6}', clusterName="c", brokerName="g")) \
        == ReplicaInfo("g", None, None, 0, {1}, 6)
    assert read_reply(GetReplicaInfo("g"), answer(
        b'{"syncStateSet":[1,2],"syncStateSetEpoch":6}', masterBrokerId="1",
        masterAddress="h:1", masterEpoch="5")) == ReplicaInfo("g", 1, "tcp://h:1", 5, {1, 2}, 6)
    # The master stays: RocketMQ's ElectMasterResponseBody has no BrokerMemberGroup.
    stays = read_reply(ElectMaster("c", "g", 2), answer(
        b'{"syncStateSet":[1,2]}', ResponseCode.CONTROLLER_MASTER_STILL_EXIST,
        masterBrokerId="1", masterAddress="h:1", masterEpoch="5", syncStateSetEpoch="6"))
    assert stays == ElectAnswer("c", ReplicaInfo("g", 1, "tcp://h:1", 5, {1, 2}, 6))
    # A new master: with the BrokerMemberGroup, its ids fastjson's bare Long keys.
    elected = read_reply(ElectMaster("c", "g", 2), answer(
        b'{"brokerMemberGroup":{"brokerAddrs":{1:"h:1",2:"h:2"},"brokerName":"g",'
        b'"cluster":"c"},"syncStateSet":[2]}',
        masterBrokerId="2", masterAddress="h:2", masterEpoch="6", syncStateSetEpoch="7"))
    assert elected == ElectAnswer("c", ReplicaInfo(
        "g", 2, "tcp://h:2", 6, {2}, 7, ((1, "tcp://h:1"), (2, "tcp://h:2"))))
    refused = answer(b"", ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE)
    assert read_reply(ElectMaster("c", "g", 2), refused) is None
    assert read_reply(GetReplicaInfo("g"), refused) is None
    assert read_reply(ApplyBrokerId("c", "g", 2, "h:2;1"), answer(b"")) is None


def test_a_malformed_request_is_not_sent() -> None:
    with pytest.raises(ValueError, match="not a request a client sends"):
        request_frame(Malformed("X", "bad"))


def test_a_broker_writes_its_tcp_address_as_host_and_port() -> None:
    _, fields, _ = request_frame(RegisterBroker("c", "g", 2, "tcp://10.0.0.2:10911"))
    assert fields["brokerAddress"] == "10.0.0.2:10911"
    _, fields, _ = request_frame(BrokerHeartbeat("c", "g", 2, "inproc://b2"))
    assert fields["brokerAddr"] == "inproc://b2"
