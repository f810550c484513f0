"""The name server's KV config table, pure (RocketMQ's KVConfigManager)."""

from __future__ import annotations

import json

import pytest

from triomq.namesrv.core.kv_config import KVConfig, KVConfigError, encode_kv_table


def test_put_get_delete_by_namespace_and_key() -> None:
    kv = KVConfig()
    kv.put("ORDER_TOPIC_CONFIG", "orders", "broker-a:4")
    kv.put("ORDER_TOPIC_CONFIG", "orders", "broker-a:8")
    kv.put("other", "orders", "x")
    assert kv.get("ORDER_TOPIC_CONFIG", "orders") == "broker-a:8"
    assert kv.get("ORDER_TOPIC_CONFIG", "payments") is None
    assert kv.get("nowhere", "orders") is None
    assert kv.delete("ORDER_TOPIC_CONFIG", "orders")
    assert not kv.delete("ORDER_TOPIC_CONFIG", "orders")
    assert not kv.delete("nowhere", "orders")
    assert kv.get("ORDER_TOPIC_CONFIG", "orders") is None


def test_an_emptied_namespace_is_still_listed_as_rocketmq_keeps_it() -> None:
    kv = KVConfig()
    assert kv.namespace("ns") is None
    kv.put("ns", "k", "v")
    assert kv.namespace("ns") == {"k": "v"}
    kv.delete("ns", "k")
    assert kv.namespace("ns") == {}


def test_every_change_moves_the_version_and_nothing_else_does() -> None:
    kv = KVConfig()
    kv.put("ns", "k", "v")
    after_put = kv.version
    kv.get("ns", "k")
    kv.delete("ns", "missing")
    assert kv.version == after_put
    kv.delete("ns", "k")
    assert kv.version > after_put


def test_the_file_is_rocketmqs_kv_config_json() -> None:
    kv = KVConfig()
    kv.put("ORDER_TOPIC_CONFIG", "orders", "broker-a:4;broker-b:4")
    assert json.loads(kv.encode()) == {
        "configTable": {"ORDER_TOPIC_CONFIG": {"orders": "broker-a:4;broker-b:4"}}}
    # As RocketMQ writes it (fastjson, pretty or not): read back whole.
    written = (b'{\n\t"configTable":{\n\t\t"ORDER_TOPIC_CONFIG":{\n\t\t\t"orders":'
               b'"broker-a:4;broker-b:4"\n\t\t},\n\t\t"ns":{}\n\t}\n}')
    loaded = KVConfig.decode(written)
    assert loaded.get("ORDER_TOPIC_CONFIG", "orders") == "broker-a:4;broker-b:4"
    assert loaded.namespace("ns") == {}
    assert KVConfig.decode(b"{}").namespace("ORDER_TOPIC_CONFIG") is None


@pytest.mark.parametrize(("data", "says"), [
    (b"{", "not JSON"),
    (b"[]", "configTable"),
    (b'{"configTable":[]}', "configTable"),
    (b'{"configTable":{"ns":{"k":1}}}', "configTable.ns"),
    (b'{"configTable":{"ns":"v"}}', "configTable.ns"),
])
def test_a_damaged_file_is_refused_saying_what_is_wrong(data: bytes, says: str) -> None:
    with pytest.raises(KVConfigError, match=says):
        KVConfig.decode(data)


def test_the_kv_table_body() -> None:
    assert encode_kv_table({"b": "2", "a": "1"}) == b'{"table":{"a":"1","b":"2"}}'
    assert encode_kv_table({}) == b'{"table":{}}'
