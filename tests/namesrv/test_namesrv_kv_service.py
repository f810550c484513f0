"""The name server's KV config as a node keeps it: saved as RocketMQ's kvConfig.json under
the store path, read back on start, and guarded as an admin request."""

from __future__ import annotations

import json

import pytest

from triomq.config import SecurityConfig, StoreConfig
from triomq.namesrv.core.processor import RequestCode
from triomq.namesrv.service import namesrv_of
from triomq.runtime import ServiceStartFailed

PUT = {"namespace": "ORDER_TOPIC_CONFIG", "key": "orders", "value": "broker-a:4"}
GET = {"namespace": "ORDER_TOPIC_CONFIG", "key": "orders"}


async def test_the_kv_config_is_saved_before_the_answer_and_read_on_start(
        temporary_node, tmp_path) -> None:
    # The real clock: the file is written in a thread, which a mock clock would jump past.
    path = tmp_path / "ns" / "kvConfig.json"
    async with temporary_node("ns", role="nameserver", listen="inproc://ns") as ns, \
            temporary_node("app") as app:
        answer = await app.rpc.invoke("inproc://ns", RequestCode.PUT_KV_CONFIG, PUT)
        assert answer.code == 0, answer.remark
        assert json.loads(path.read_bytes()) == {
            "configTable": {"ORDER_TOPIC_CONFIG": {"orders": "broker-a:4"}}}
        config = (await app.rpc.invoke("inproc://ns", RequestCode.GET_NAMESRV_CONFIG)).body
        assert f"kvConfigPath={path}\n".encode() in config
    async with temporary_node("ns", role="nameserver", listen="inproc://ns") as ns, \
            temporary_node("app") as app:
        answer = await app.rpc.invoke("inproc://ns", RequestCode.GET_KV_CONFIG, GET)
        assert (answer.code, answer.ext_fields) == (0, {"value": "broker-a:4"})
        answer = await app.rpc.invoke("inproc://ns", RequestCode.DELETE_KV_CONFIG, GET)
        assert answer.code == 0
        assert json.loads(path.read_bytes()) == {"configTable": {"ORDER_TOPIC_CONFIG": {}}}
        assert namesrv_of(ns).kv.namespace("ORDER_TOPIC_CONFIG") == {}


async def test_without_a_store_path_the_kv_config_lives_in_memory(
        temporary_node, tmp_path, autojump_clock) -> None:
    async with temporary_node("ns", role="nameserver", listen="inproc://ns",
                              store=StoreConfig()), \
            temporary_node("app") as app:
        assert (await app.rpc.invoke("inproc://ns", RequestCode.PUT_KV_CONFIG, PUT)).code == 0
        answer = await app.rpc.invoke("inproc://ns", RequestCode.GET_KV_CONFIG, GET)
        assert answer.ext_fields == {"value": "broker-a:4"}
        config = (await app.rpc.invoke("inproc://ns", RequestCode.GET_NAMESRV_CONFIG)).body
        assert b"kvConfigPath" not in config
    assert not list(tmp_path.rglob("kvConfig.json"))


async def test_a_damaged_kv_config_stops_the_start(temporary_node, tmp_path,
                                                   autojump_clock) -> None:
    (tmp_path / "ns").mkdir()
    (tmp_path / "ns" / "kvConfig.json").write_bytes(b'{"configTable":{"ns":[]}}')
    with pytest.raises(ServiceStartFailed, match=r"kvConfig.json: configTable.ns: expected"):
        async with temporary_node("ns", role="nameserver", listen="inproc://ns"):
            pass


@pytest.mark.parametrize(("code", "fields", "body"), [
    (RequestCode.PUT_KV_CONFIG, PUT, b""),
    (RequestCode.DELETE_KV_CONFIG, GET, b""),
    (RequestCode.UPDATE_NAMESRV_CONFIG, {}, b"orderMessageEnable=true\n"),
    (RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}, b""),
    (RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}, b""),
])
async def test_changes_are_admin_requests_reads_stay_open(
        temporary_node, autojump_clock, code, fields, body) -> None:
    security = SecurityConfig(admin_access_key="ops", admin_secret_key="12345678")
    async with temporary_node("ns", role="nameserver", listen="inproc://ns",
                              security=security) as ns, \
            temporary_node("app") as app:
        answer = await app.rpc.invoke("inproc://ns", code, fields, body)
        assert answer.code == 16, answer.remark
        assert namesrv_of(ns).kv.version == 0
        assert not namesrv_of(ns).config.order_message_enable
        for read, read_fields in ((RequestCode.GET_KV_CONFIG, GET),
                                  (RequestCode.GET_NAMESRV_CONFIG, {})):
            assert (await app.rpc.invoke("inproc://ns", read, read_fields)).code in (0, 22)
