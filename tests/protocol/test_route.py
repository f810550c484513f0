"""RocketMQ's route JSON and REGISTER_BROKER bodies, checked against hand-written forms.

The expected documents are written out here from RocketMQ's beans
(``TopicRouteData``, ``QueueData``, ``BrokerData``, ``ClusterInfo``,
``TopicConfig``, ``DataVersion``, ``RegisterBrokerBody``) as its fastjson
writes them, not produced by triomq's encoder.
"""

from __future__ import annotations

import contextlib
import json
import struct
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from triomq.protocol.route import (
    BrokerData,
    BrokerMemberGroup,
    ClusterInfo,
    DataVersion,
    QueueData,
    RegisterBrokerBody,
    RouteDataError,
    TopicConfig,
    TopicRouteData,
    decode_register_broker_body,
    encode_register_broker_body,
    loads,
)
from triomq.protocol.topic_rules import IllegalName, check_group, check_topic

# A route as a RocketMQ 5 name server's fastjson writes it: bare integer keys.
JAVA_ROUTE = (b'{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},'
              b'"brokerName":"broker-a","cluster":"DefaultCluster","enableActingMaster":false}],'
              b'"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,'
              b'"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}')


def test_a_java_route_with_bare_integer_keys_reads() -> None:
    route = TopicRouteData.decode(JAVA_ROUTE)
    assert route.queue_datas == (QueueData("broker-a", 4, 4, 6, 0),)
    assert route.broker_datas == (
        BrokerData("DefaultCluster", "broker-a", {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}),)


def test_the_route_we_write_has_rocketmqs_fields() -> None:
    route = TopicRouteData((QueueData("broker-a", 4, 4, 6),),
                           (BrokerData("DefaultCluster", "broker-a", {1: "h:2", 0: "h:1"}),))
    assert json.loads(route.encode()) == {
        "brokerDatas": [{"brokerAddrs": {"0": "h:1", "1": "h:2"}, "brokerName": "broker-a",
                         "cluster": "DefaultCluster", "enableActingMaster": False}],
        "filterServerTable": {},
        "queueDatas": [{"brokerName": "broker-a", "perm": 6, "readQueueNums": 4,
                        "topicSysFlag": 0, "writeQueueNums": 4}],
    }
    assert TopicRouteData.decode(route.encode()) == route


def test_bare_keys_inside_strings_are_left_alone() -> None:
    text = b'{"a":"{1:2}","b":{7:"x"}}'
    assert loads(text) == {"a": "{1:2}", "b": {"7": "x"}}


def test_cluster_info_and_member_group_shapes() -> None:
    info = ClusterInfo({"broker-a": BrokerData("c1", "broker-a", {0: "h:1"})},
                       {"c1": frozenset({"broker-a"})})
    assert json.loads(info.encode()) == {
        "brokerAddrTable": {"broker-a": {"brokerAddrs": {"0": "h:1"}, "brokerName": "broker-a",
                                         "cluster": "c1", "enableActingMaster": False}},
        "clusterAddrTable": {"c1": ["broker-a"]}}
    java = (b'{"brokerMemberGroup":{"brokerAddrs":{1:"h:2",2:"h:3"},"brokerName":"broker-a",'
            b'"cluster":"c1"}}')
    assert BrokerMemberGroup.decode(java) == BrokerMemberGroup("c1", "broker-a",
                                                               {1: "h:2", 2: "h:3"})


def test_data_version_orders_by_state_version_then_counter_then_timestamp() -> None:
    assert DataVersion(1, 0, 0).newer_than(DataVersion(0, 99, 99))
    assert DataVersion(0, 0, 2).newer_than(DataVersion(0, 99, 1))
    assert DataVersion(0, 5, 1).newer_than(DataVersion(0, 4, 1))
    assert not DataVersion(0, 4, 1).newer_than(DataVersion(0, 4, 1))
    assert DataVersion(3, 10, 1).next(20) == DataVersion(3, 20, 2)
    assert DataVersion.from_json({"counter": 7, "stateVersion": 2, "timestamp": 5}) == (
        DataVersion(2, 5, 7))


def _java_compressed_body(version: bytes, lines: list[bytes], filters: bytes) -> bytes:
    # RegisterBrokerBody.encode(true): a zlib (Deflater) stream of int32-prefixed parts.
    def part(data: bytes) -> bytes:
        return struct.pack(">i", len(data)) + data
    raw = part(version) + struct.pack(">i", len(lines))
    raw += b"".join(part(line) for line in lines) + part(filters) + struct.pack(">i", 0)
    return zlib.compress(raw)


def test_a_compressed_register_body_built_by_hand_decodes() -> None:
    data = _java_compressed_body(
        b'{"counter":3,"stateVersion":2,"timestamp":1700000000000}',
        [b'orders 8 8 6 SINGLE_TAG {}', b'TBW102 8 8 7 SINGLE_TAG {"+message.type":"NORMAL"}'],
        b'[]')
    body = decode_register_broker_body(data, compressed=True)
    assert body.data_version == DataVersion(2, 1700000000000, 3)
    assert body.topic_config_table["orders"] == TopicConfig("orders", 8, 8, 6)
    assert body.topic_config_table["TBW102"].perm == 7
    assert body.topic_config_table["TBW102"].attributes == {"+message.type": "NORMAL"}


def test_a_json_register_body_decodes() -> None:
    data = (b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":'
            b'{"counter":1,"stateVersion":0,"timestamp":5},"topicConfigTable":{"orders":'
            b'{"attributes":{},"order":false,"perm":6,"readQueueNums":4,'
            b'"topicFilterType":"SINGLE_TAG","topicName":"orders","topicSysFlag":0,'
            b'"writeQueueNums":4}}}}')
    body = decode_register_broker_body(data, compressed=False)
    assert body == RegisterBrokerBody(DataVersion(0, 5, 1), {"orders": TopicConfig("orders", 4, 4)})


@pytest.mark.parametrize("data, compressed, fragment", [
    (b"{not json", False, "not valid JSON"),
    (b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"t":{"readQueueNums":4}}}}',
     False, "topicConfigTable.t.topicName: missing"),
    (b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"t":{"topicName":"t",'
     b'"perm":"rw"}}}}', False, "perm: expected an integer"),
    (b"garbage", True, "not a deflate stream"),
    (zlib.compress(struct.pack(">i", 100) + b"{}"), True, "runs past the end"),
    (zlib.compress(struct.pack(">i", 2) + b"{}" + struct.pack(">i", 1)
                   + struct.pack(">i", 3) + b"a b"), True, "expected 5 space-separated"),
])
def test_bad_register_bodies_name_what_is_wrong(data: bytes, compressed: bool,
                                                fragment: str) -> None:
    with pytest.raises(RouteDataError, match=fragment):
        decode_register_broker_body(data, compressed=compressed)


@given(st.binary(max_size=200), st.booleans())
def test_any_register_body_decodes_or_raises_route_data_error(data: bytes,
                                                              compressed: bool) -> None:
    with contextlib.suppress(RouteDataError):
        decode_register_broker_body(data, compressed=compressed)


@given(st.binary(max_size=200))
def test_any_route_body_decodes_or_raises_route_data_error(data: bytes) -> None:
    with contextlib.suppress(RouteDataError):
        TopicRouteData.decode(data)


names = st.text(alphabet="abcXYZ019_-%|", min_size=1, max_size=10)
configs = st.builds(TopicConfig, names, st.integers(0, 64), st.integers(0, 64),
                    st.integers(0, 15))


@given(st.dictionaries(names, configs, max_size=5), st.booleans())
def test_register_bodies_survive_both_encodings(table: dict[str, TopicConfig],
                                                compressed: bool) -> None:
    table = {c.topic_name: c for c in table.values()}
    body = RegisterBrokerBody(DataVersion(1, 2, 3), table)
    assert decode_register_broker_body(encode_register_broker_body(body, compressed=compressed),
                                       compressed=compressed) == body


@pytest.mark.parametrize("topic", ["orders", "%RETRY%g", "a|b", "x" * 127, "A-Z_0"])
def test_legal_topics(topic: str) -> None:
    check_topic(topic)


@pytest.mark.parametrize("topic, fragment", [
    ("", "blank"), ("a b", "illegal characters"), ("a*", "illegal characters"),
    ("x\n", "illegal characters"), ("caf\u00e9", "illegal characters"),
    ("x" * 128, "max length: 127"), ("%DLQ%" + "g" * 251, "max length: 255"),
])
def test_illegal_topics_say_why(topic: str, fragment: str) -> None:
    with pytest.raises(IllegalName, match=fragment):
        check_topic(topic)


def test_group_names_are_at_most_120() -> None:
    check_group("g" * 120)
    with pytest.raises(IllegalName, match="max length: 120"):
        check_group("g" * 121)
