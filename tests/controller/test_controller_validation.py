"""The controller's input rules by hand: names, broker ids, addresses, check codes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from triomq.controller import ResponseCode
from triomq.controller.core.requests import (
    AlterSyncStateSet,
    ApplyBrokerId,
    BrokerHeartbeat,
    CleanBrokerData,
    ElectMaster,
    GetControllerConfig,
    GetMetadata,
    GetNextBrokerId,
    GetReplicaInfo,
    GetSyncStateData,
    Malformed,
    RegisterBroker,
    UpdateControllerConfig,
)
from triomq.controller.core.validation import MAX_BROKER_ID, check_address, check_request

CLUSTER, GROUP, ADDRESS = "DefaultCluster", "broker-a", "10.0.0.1:10911"
Code = ResponseCode


@pytest.mark.parametrize("address", [
    "10.0.0.1:10911", "broker-a.example.com:1", "[::1]:65535", "tcp://10.0.0.1:10911",
    "tcp://[fe80::1%eth0]:9", "inproc://broker-a-0", "inproc://b:1"])
def test_addresses_a_broker_may_have(address):
    assert check_address(address) is None


@pytest.mark.parametrize(("address", "reason"), [
    ("10.0.0.1", "host:port"), ("10.0.0.1:", "port"), ("10.0.0.1:0", "port"),
    ("10.0.0.1:65536", "port"), ("10.0.0.1:99999999", "port"), ("h:1x", "port"),
    (":10911", "host"), ("a b:1", "blanks"), ("h:1\n", "blanks"), ("h/../x:1", "host"),
    ("tcp://h", "host:port"), ("tcp://h:0", "port"), ("inproc://b:0", "port"),
    ("TCP://h:1", "scheme://location"), ("tcp://", "scheme://location"),
    ("h" * 300 + ":1", "longer than 255")])
def test_addresses_refused_say_why(address, reason):
    assert reason in check_address(address)


def refused(request) -> tuple[int, str]:
    invalid = check_request(request)
    assert invalid is not None, request
    return invalid.code, invalid.remark


@pytest.mark.parametrize(("request_", "code", "named"), [
    (GetNextBrokerId("Default Cluster", GROUP), Code.CONTROLLER_INVALID_REQUEST,
     "GET_NEXT_BROKER_ID: header field 'clusterName' 'Default Cluster'"),
    (GetNextBrokerId(CLUSTER, "b" * 128), Code.CONTROLLER_INVALID_REQUEST,
     "header field 'brokerName' 'bbbb"),
    (ApplyBrokerId(CLUSTER, GROUP, 0, f"{ADDRESS};code"), Code.CONTROLLER_BROKER_ID_INVALID,
     "APPLY_BROKER_ID: header field 'appliedBrokerId' 0"),
    (ApplyBrokerId(CLUSTER, GROUP, 1, "h:0;code"), Code.CONTROLLER_INVALID_REQUEST,
     "header field 'registerCheckCode', its address 'h:0'"),
    (ApplyBrokerId(CLUSTER, GROUP, 1, f"{ADDRESS};" + "x" * 256),
     Code.CONTROLLER_INVALID_REQUEST,
     "header field 'registerCheckCode'"),
    (ApplyBrokerId(CLUSTER, GROUP, 1, f"{ADDRESS};a\x00b"), Code.CONTROLLER_INVALID_REQUEST,
     "'registerCheckCode' '10.0.0.1:10911;a\\x00b'"),
    (RegisterBroker(CLUSTER, "broker/a", 1, ADDRESS), Code.CONTROLLER_INVALID_REQUEST,
     "REGISTER_BROKER: header field 'brokerName' 'broker/a'"),
    (RegisterBroker(CLUSTER, GROUP, MAX_BROKER_ID + 1, ADDRESS),
     Code.CONTROLLER_BROKER_ID_INVALID, f"'brokerId' {MAX_BROKER_ID + 1}"),
    (BrokerHeartbeat(CLUSTER, GROUP, 1, "10.0.0.1"), Code.CONTROLLER_INVALID_REQUEST,
     "BROKER_HEARTBEAT: header field 'brokerAddr' '10.0.0.1'"),
    (AlterSyncStateSet(GROUP, 1, 1, 1, {1, 0}), Code.CONTROLLER_BROKER_ID_INVALID,
     "body 'syncStateSet': 0:"),
    (AlterSyncStateSet(GROUP, 0, 1, 1, {1}), Code.CONTROLLER_BROKER_ID_INVALID,
     "'masterBrokerId' 0"),
    (ElectMaster(CLUSTER, GROUP, 0, designate=True), Code.CONTROLLER_BROKER_ID_INVALID,
     "ELECT_MASTER: header field 'brokerId' 0"),
    (ElectMaster(CLUSTER, "", None), Code.CONTROLLER_INVALID_REQUEST, "'brokerName' ''"),
    (GetReplicaInfo("gruppé"), Code.CONTROLLER_INVALID_REQUEST, "'brokerName' 'gruppé'"),
    (GetSyncStateData(("broker-a", "bad name")), Code.CONTROLLER_INVALID_REQUEST,
     "GET_SYNC_STATE_DATA: body: 'bad name':"),
    (CleanBrokerData(CLUSTER, GROUP, frozenset({0})), Code.CONTROLLER_BROKER_ID_INVALID,
     "'brokerControllerIdsToClean': 0:"),
])
def test_each_bad_field_is_refused_naming_the_field_and_the_value(request_, code, named):
    got_code, remark = refused(request_)
    assert got_code == code
    assert named in remark, remark


def test_good_requests_and_those_without_names_pass():
    for request in (GetNextBrokerId(CLUSTER, GROUP),
                    ApplyBrokerId(CLUSTER, GROUP, 1, "10.0.0.1:10911;1700000000000"),
                    RegisterBroker(CLUSTER, "%RETRY%|x_y-1", 3, ADDRESS),
                    BrokerHeartbeat(CLUSTER, GROUP, MAX_BROKER_ID, "inproc://b"),
                    AlterSyncStateSet(GROUP, 1, 1, 1, {1, 2}), ElectMaster(CLUSTER, GROUP),
                    GetSyncStateData(), CleanBrokerData(CLUSTER, GROUP), GetMetadata(),
                    GetControllerConfig(), UpdateControllerConfig({"x": 1}),
                    Malformed("REGISTER_BROKER", "header field 'brokerId': missing")):
        assert check_request(request) is None, request


def test_a_long_value_is_quoted_cut_short():
    code, remark = refused(GetNextBrokerId(CLUSTER, "x" * 100_000))
    assert code == Code.CONTROLLER_INVALID_REQUEST
    assert len(remark) < 300 and "..." in remark and "longer than 127" in remark


@given(st.text(max_size=200))
def test_any_name_is_judged_without_raising(name):
    invalid = check_request(RegisterBroker(CLUSTER, name, 1, ADDRESS))
    assert (invalid is None) == (0 < len(name) <= 127 and all(
        c.isascii() and (c.isalnum() or c in "%|_-") for c in name))


@given(st.text(max_size=80))
def test_any_address_is_judged_without_raising(address):
    reason = check_address(address)
    assert reason is None or isinstance(reason, str)
