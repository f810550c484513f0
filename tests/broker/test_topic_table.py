"""A broker's topic table: RocketMQ's rules, and topics.json as RocketMQ writes it."""

from __future__ import annotations

import json

import pytest

from triomq.broker.metadata.core.topic_table import INVALID_PARAMETER, TopicRefused, TopicTable
from triomq.protocol.route import DataVersion, RouteDataError, TopicConfig

# topics.json as a RocketMQ 5 broker writes it (TopicConfigAndMappingSerializeWrapper).
JAVA_TOPICS_JSON = b"""{
    "dataVersion":{"counter":3,"stateVersion":0,"timestamp":1700000000123},
    "mappingDataVersion":{"counter":0,"stateVersion":0,"timestamp":1700000000000},
    "topicConfigTable":{
        "TBW102":{"attributes":{},"order":false,"perm":7,"readQueueNums":8,
                  "topicFilterType":"SINGLE_TAG","topicName":"TBW102","topicSysFlag":0,
                  "writeQueueNums":8},
        "orders":{"attributes":{"+message.type":"NORMAL"},"order":false,"perm":6,
                  "readQueueNums":4,"topicFilterType":"SINGLE_TAG","topicName":"orders",
                  "topicSysFlag":0,"writeQueueNums":4}
    },
    "topicQueueMappingDetailMap":{},
    "topicQueueMappingInfoMap":{}
}"""


def test_a_rocketmq_topics_json_reads_field_by_field() -> None:
    table = TopicTable.decode(JAVA_TOPICS_JSON)
    assert table.data_version == DataVersion(0, 1700000000123, 3)
    assert table.get("orders") == TopicConfig("orders", 4, 4, 6,
                                              attributes={"+message.type": "NORMAL"})
    assert table.get("TBW102") == TopicConfig("TBW102", 8, 8, 7)


def test_the_topics_json_written_has_rocketmqs_fields() -> None:
    table = TopicTable([TopicConfig("orders", 4, 4, 6)], DataVersion(0, 5, 2))
    assert json.loads(table.encode()) == {
        "dataVersion": {"counter": 2, "stateVersion": 0, "timestamp": 5},
        "topicConfigTable": {"orders": {
            "attributes": {}, "order": False, "perm": 6, "readQueueNums": 4,
            "topicFilterType": "SINGLE_TAG", "topicName": "orders", "topicSysFlag": 0,
            "writeQueueNums": 4}}}
    assert TopicTable.decode(table.encode()) == table


def test_changes_move_the_data_version_and_equal_configs_do_not() -> None:
    table = TopicTable()
    assert table.update(TopicConfig("orders", 4, 4), now=10)
    assert table.data_version == DataVersion(0, 10, 1)
    assert not table.update(TopicConfig("orders", 4, 4), now=20)
    assert table.data_version == DataVersion(0, 10, 1)
    assert table.delete("orders", now=30) and not table.delete("orders", now=40)
    assert table.data_version == DataVersion(0, 30, 2)
    table.bump(now=50, state_version=7)
    assert table.data_version == DataVersion(7, 50, 3)


@pytest.mark.parametrize("config, fragment", [
    (TopicConfig("a b"), "illegal characters"),
    (TopicConfig("x" * 128), "max length: 127"),
    (TopicConfig("TBW102"), "conflict with system topic"),
    (TopicConfig("rmq_sys_x"), "conflict with system topic"),
    (TopicConfig("t", 0, 4), "readQueueNums 0 is not within 1..1024"),
    (TopicConfig("t", 4, 5000), "writeQueueNums 5000"),
    (TopicConfig("t", perm=32), "perm 32"),
    (TopicConfig("t", topic_filter_type="NONE"), "topicFilterType"),
])
def test_bad_topics_are_refused_with_invalid_parameter(config: TopicConfig,
                                                       fragment: str) -> None:
    table = TopicTable()
    with pytest.raises(TopicRefused, match=fragment) as refused:
        table.update(config, now=1)
    assert refused.value.code == INVALID_PARAMETER
    assert len(table) == 0 and table.data_version == DataVersion()


def test_system_topics_are_the_brokers_own() -> None:
    table = TopicTable.with_system_topics("c1", "broker-a", auto_create=True, now=1)
    assert {"TBW102", "SELF_TEST_TOPIC", "c1", "broker-a"} <= set(table.configs())
    with pytest.raises(TopicRefused, match="system topic"):
        table.delete("TBW102", now=2)
    assert "TBW102" not in TopicTable.with_system_topics("c1", "b", auto_create=False, now=1)


def test_a_send_to_an_unknown_topic_creates_it_from_tbw102() -> None:
    table = TopicTable.with_system_topics("c1", "broker-a", auto_create=True, now=1)
    created = table.create_on_send("fresh", "TBW102", 4, now=2)
    assert created == TopicConfig("fresh", 4, 4, 6)
    assert table.get("fresh") == created
    assert table.create_on_send("big", "TBW102", 100, now=3) == TopicConfig("big", 8, 8, 6)
    with pytest.raises(TopicRefused, match="illegal characters"):
        table.create_on_send("bad name", "TBW102", 4, now=3)
    plain = TopicTable.with_system_topics("c1", "broker-a", auto_create=False, now=1)
    assert plain.create_on_send("fresh", "TBW102", 4, now=2) is None


def test_a_slave_adopts_its_masters_table() -> None:
    table = TopicTable([TopicConfig("a")], DataVersion(0, 1, 1))
    master = {"b": TopicConfig("b", 2, 2)}
    assert table.adopt(master, DataVersion(3, 9, 9))
    assert table.configs() == master and table.data_version == DataVersion(3, 9, 9)
    assert not table.adopt(master, DataVersion(3, 9, 9))


@pytest.mark.parametrize("data, fragment", [
    (b"[]", "expected an object"),
    (b'{"topicConfigTable":[]}', "topicConfigTable: expected an object"),
    (b'{"topicConfigTable":{"t":{"perm":6}}}', "topicName: missing"),
    (b"{oops", "not valid JSON"),
])
def test_a_damaged_topics_json_says_what_is_wrong(data: bytes, fragment: str) -> None:
    with pytest.raises(RouteDataError, match=fragment):
        TopicTable.decode(data)
