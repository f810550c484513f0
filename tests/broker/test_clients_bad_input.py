"""Bad client requests: each refusal has its code and names the field; nothing leaks."""

from __future__ import annotations

import json

import pytest
from broker_nodes import Cluster
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_clients import heartbeat

from triomq.broker.consume.group_names import GROUP_FIELDS, check_group_fields
from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.protocol.heartbeat import BodyError, parse_heartbeat
from triomq.protocol.remoting import RemotingCommand

GOOD = json.loads(heartbeat("c1", producer="pg"))


def with_field(path: list, value) -> bytes:
    """GOOD with the field at ``path`` set to ``value``."""
    obj = json.loads(json.dumps(GOOD))
    at = obj
    for key in path[:-1]:
        at = at[key]
    at[path[-1]] = value
    return json.dumps(obj).encode()


BAD = [
    (b"", "body: missing"),
    (b"{not json", "body: not valid JSON"),
    (b"[1, 2]", "expected a JSON object, got list"),
    (with_field(["clientID"], None), "'clientID': missing"),
    (with_field(["clientID"], 5), "'clientID': expected a string"),
    (with_field(["consumerDataSet"], {}), "'consumerDataSet': expected an array"),
    (with_field(["consumerDataSet", 0, "groupName"], "bad group"),
     "'consumerDataSet[0].groupName': The specified group: 'bad group', contains illegal"),
    (with_field(["consumerDataSet", 0, "consumeType"], "EAGER"),
     "'consumerDataSet[0].consumeType': 'EAGER' is not one of"),
    (with_field(["consumerDataSet", 0, "messageModel"], 1),
     "'consumerDataSet[0].messageModel': expected a string"),
    (with_field(["consumerDataSet", 0, "subscriptionDataSet", 0, "topic"], "a b"),
     "'consumerDataSet[0].subscriptionDataSet[0].topic'"),
    (with_field(["consumerDataSet", 0, "subscriptionDataSet", 0, "codeSet"], [2**40]),
     "'consumerDataSet[0].subscriptionDataSet[0].codeSet[0]': expected a 32-bit integer"),
    (with_field(["consumerDataSet", 0, "subscriptionDataSet", 0, "subVersion"], True),
     "'consumerDataSet[0].subscriptionDataSet[0].subVersion': expected an integer"),
    (with_field(["producerDataSet"], [{"groupName": ""}]),
     "'producerDataSet[0].groupName': The specified group is blank"),
]


async def test_bad_heartbeats_are_refused_by_field_and_the_connection_serves_on(tmp_path
                                                                                ) -> None:
    cluster = Cluster("inproc", tmp_path)
    async with cluster.broker("a") as a, cluster.client() as client:
        for body, fragment in BAD:
            answer = await client.rpc.invoke(a.node.address, RequestCode.HEART_BEAT, {}, body)
            assert answer.code == ResponseCode.INVALID_PARAMETER, (body, answer.remark)
            assert answer.remark.startswith("HEART_BEAT: body")
            assert fragment in answer.remark, (fragment, answer.remark)
        for code, fields, remark in [
            (RequestCode.UNREGISTER_CLIENT, {}, "UNREGISTER_CLIENT: header field 'clientID': "
                                                "missing"),
            (RequestCode.GET_CONSUMER_LIST_BY_GROUP, {},
             "GET_CONSUMER_LIST_BY_GROUP: header field 'consumerGroup': missing"),
        ]:
            answer = await client.rpc.invoke(a.node.address, code, fields)
            assert (answer.code, answer.remark) == (ResponseCode.INVALID_PARAMETER, remark)
        good = await client.rpc.invoke(a.node.address, RequestCode.HEART_BEAT, {},
                                       heartbeat("c1"))
        assert good.code == ResponseCode.SUCCESS
        assert a.clients.group_known("cg")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["clientID", "groupName", "topic", "consumeType", "subVersion",
                         "codeSet", "tagsSet", "subscriptionDataSet", "consumerDataSet",
                         "producerDataSet", "unitMode", "x"]), inner, max_size=5),
    max_leaves=20)
bodies = st.one_of(
    st.binary(max_size=200),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.tuples(st.sampled_from([["clientID"], ["consumerDataSet", 0, "groupName"],
                               ["consumerDataSet", 0, "subscriptionDataSet", 0, "topic"],
                               ["consumerDataSet", 0, "subscriptionDataSet"],
                               ["producerDataSet", 0]]), json_values).map(
        lambda pv: with_field(*pv)))


@given(body=bodies)
@settings(max_examples=300, deadline=None)
def test_parse_heartbeat_refuses_with_a_body_error_only(body: bytes) -> None:
    try:
        parse_heartbeat(body)
    except BodyError as exc:
        assert "Traceback" not in str(exc)


@settings(max_examples=5, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.lists(bodies, min_size=1, max_size=40))
async def test_every_heartbeat_gets_a_specific_answer(tmp_path, batch) -> None:
    cluster = Cluster("inproc", tmp_path)
    async with cluster.broker("a") as a, cluster.client() as client:
        for body in batch:
            answer = await client.rpc.invoke(a.node.address, RequestCode.HEART_BEAT, {}, body)
            remark = answer.remark or ""
            assert answer.code in (ResponseCode.SUCCESS, ResponseCode.INVALID_PARAMETER), remark
            assert str(tmp_path) not in remark and "Traceback" not in remark


@pytest.mark.parametrize("code, key", [(code, key) for code, keys in GROUP_FIELDS.items()
                                       for key in keys])
@pytest.mark.parametrize("group", ["../x", "a\0b", "g" * 121, " ", "名前"])
def test_every_header_naming_a_group_has_it_checked(code: int, key: str, group: str) -> None:
    refusal = check_group_fields(RemotingCommand.request(code, {key: group}))
    assert refusal is not None and refusal.code == ResponseCode.INVALID_PARAMETER
    assert refusal.remark.startswith(f"header field {key!r}: The specified group")
    assert check_group_fields(RemotingCommand.request(code, {key: "%RETRY%ok_group-1"})) is None
    assert check_group_fields(RemotingCommand.request(code, {key: ""})) is None  # the handler's
