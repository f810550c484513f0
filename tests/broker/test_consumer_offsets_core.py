"""The pure consumer-offset table: commits, versions, consumerOffset.json, a slave's copy."""

from __future__ import annotations

import json

import pytest

from triomq.broker.consume.core.consumer_offsets import (
    ConsumerOffsetTable,
    OffsetHeader,
    parse_offset_header,
    query_answer,
)
from triomq.broker.core.headers import HeaderError
from triomq.protocol.route import DataVersion, RouteDataError


def test_commits_query_and_the_version_step() -> None:
    table = ConsumerOffsetTable(version_step=3)
    assert table.query("cg", "orders", 0) is None
    for offset in (5, 6):
        table.commit("cg", "orders", 0, offset, now_ms=100)
    assert table.query("cg", "orders", 0) == 6 and table.query("other", "orders", 0) is None
    assert table.data_version == DataVersion() and table.revision == 2
    table.commit("cg", "orders", 1, 9, now_ms=200)  # the third commit steps the version
    assert table.data_version == DataVersion(0, 200, 1)
    assert table.offsets() == {"orders@cg": {0: 6, 1: 9}}


def test_the_file_is_rocketmqs_and_fastjsons_bare_keys_read() -> None:
    table = ConsumerOffsetTable({"orders@cg": {1: 7, 0: 5}, "%RETRY%cg@cg": {0: 0}},
                                DataVersion(2, 1700000000000, 3))
    # As RocketMQ's ConsumerOffsetManager writes it (queue ids quoted: fastjson reads both).
    expected = {"dataVersion": {"counter": 3, "stateVersion": 2, "timestamp": 1700000000000},
                "offsetTable": {"%RETRY%cg@cg": {"0": 0}, "orders@cg": {"0": 5, "1": 7}}}
    assert json.loads(table.encode()) == expected
    assert ConsumerOffsetTable.decode(table.encode()) == table
    fastjson = (b'{"offsetTable":{"orders@cg":{0:5,1:7},"%RETRY%cg@cg":{0:0}},'
                b'"dataVersion":{"counter":3,"stateVersion":2,"timestamp":1700000000000}}')
    assert ConsumerOffsetTable.decode(fastjson) == table
    assert ConsumerOffsetTable.decode(b"{}") == ConsumerOffsetTable()
    for bad in (b"[]", b"x", b'{"offsetTable":[]}', b'{"offsetTable":{"a@b":{"x":1}}}',
                b'{"offsetTable":{"a@b":{"0":"1"}}}', b'{"offsetTable":{"a@b":3}}'):
        with pytest.raises(RouteDataError):
            ConsumerOffsetTable.decode(bad)


def test_a_slave_takes_its_masters_offsets_and_keeps_its_own_others() -> None:
    slave = ConsumerOffsetTable({"orders@cg": {0: 1}, "local@cg": {0: 4}})
    master = ConsumerOffsetTable({"orders@cg": {0: 9, 1: 2}}, DataVersion(0, 5, 1))
    assert slave.adopt_master(master)
    assert slave.offsets() == {"orders@cg": {0: 9, 1: 2}, "local@cg": {0: 4}}
    assert slave.data_version == master.data_version
    assert not slave.adopt_master(master)


def test_offset_headers_and_the_query_answer() -> None:
    fields = {"consumerGroup": "cg", "topic": "orders", "queueId": "1", "commitOffset": "42"}
    assert parse_offset_header(fields, commit=True) == OffsetHeader("cg", "orders", 1, 42)
    assert parse_offset_header({**fields, "setZeroIfNotFound": "FALSE"},
                               commit=False).set_zero_if_not_found is False
    for key, value in [("queueId", None), ("commitOffset", "x"), ("consumerGroup", "")]:
        bad = {k: v for k, v in {**fields, key: value}.items() if v is not None}
        with pytest.raises(HeaderError) as caught:
            parse_offset_header(bad, commit=True)
        assert caught.value.field == key
    query = OffsetHeader("cg", "orders", 1)
    assert query_answer(7, query, queue_min_offset=0, first_message_in_memory=True).offset == 7
    fresh = query_answer(None, query, queue_min_offset=0, first_message_in_memory=True)
    assert (fresh.code, fresh.offset) == (0, 0)
    for answer in (query_answer(None, query, queue_min_offset=3, first_message_in_memory=True),
                   query_answer(None, query, queue_min_offset=0,
                                first_message_in_memory=False),
                   query_answer(None, OffsetHeader("cg", "orders", 1, None, False),
                                queue_min_offset=0, first_message_in_memory=True)):
        assert (answer.code, answer.offset) == (22, None) and answer.remark


def test_which_groups_stored_offsets_for_a_topic_and_a_groups_removal() -> None:
    table = ConsumerOffsetTable()
    for group, topic in (("cg", "orders"), ("cg", "audit"), ("other", "orders")):
        table.commit(group, topic, 0, 1, now_ms=100)
    assert table.groups_of("orders") == {"cg", "other"} and table.groups_of("nope") == set()
    revision = table.revision
    assert table.remove_group("cg") and table.revision == revision + 1
    assert table.offsets() == {"orders@other": {0: 1}}
    assert not table.remove_group("cg") and table.revision == revision + 1
