"""KV config, name-server config, topic lists and write permissions, as RocketMQ's
mqadmin and clients ask: headers and bodies written by hand from RocketMQ's
request headers (``PutKVConfigRequestHeader`` and friends), answered by the pure core."""

from __future__ import annotations

import json

import pytest

from tests.namesrv.test_processor import TOPICS_BODY, ask, register
from triomq.namesrv.config import NamesrvConfig
from triomq.namesrv.core.config_properties import NamesrvFacts
from triomq.namesrv.core.processor import NameServerCore, RequestCode, ResponseCode

ORDER = "ORDER_TOPIC_CONFIG"


def put(core: NameServerCore, namespace: str, key: str, value: str) -> None:
    answer = ask(core, RequestCode.PUT_KV_CONFIG,
                 {"namespace": namespace, "key": key, "value": value})
    assert (answer.code, answer.remark) == (ResponseCode.SUCCESS, None)


def test_put_get_delete_a_kv_config() -> None:
    core = NameServerCore()
    put(core, ORDER, "orders", "broker-a:4")
    answer = ask(core, RequestCode.GET_KV_CONFIG, {"namespace": ORDER, "key": "orders"})
    assert answer.code == ResponseCode.SUCCESS
    assert answer.ext_fields == {"value": "broker-a:4"}
    answer = ask(core, RequestCode.DELETE_KV_CONFIG, {"namespace": ORDER, "key": "orders"})
    assert answer.code == ResponseCode.SUCCESS
    answer = ask(core, RequestCode.GET_KV_CONFIG, {"namespace": ORDER, "key": "orders"})
    assert answer.code == ResponseCode.QUERY_NOT_FOUND == 22
    assert answer.remark == "No config item, Namespace: ORDER_TOPIC_CONFIG Key: orders"
    # Deleting what is not there succeeds, as in RocketMQ.
    answer = ask(core, RequestCode.DELETE_KV_CONFIG, {"namespace": "x", "key": "y"})
    assert answer.code == ResponseCode.SUCCESS


def test_an_empty_value_is_a_value() -> None:
    core = NameServerCore()
    put(core, "ns", "k", "")
    answer = ask(core, RequestCode.GET_KV_CONFIG, {"namespace": "ns", "key": "k"})
    assert (answer.code, answer.ext_fields) == (ResponseCode.SUCCESS, {"value": ""})


def test_the_kv_list_of_a_namespace() -> None:
    core = NameServerCore()
    answer = ask(core, RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": ORDER})
    assert answer.code == ResponseCode.QUERY_NOT_FOUND
    assert answer.remark == "No config item, Namespace: ORDER_TOPIC_CONFIG"
    put(core, ORDER, "orders", "broker-a:4")
    put(core, ORDER, "payments", "broker-a:2;broker-b:2")
    answer = ask(core, RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": ORDER})
    assert answer.code == ResponseCode.SUCCESS
    assert json.loads(answer.body) == {"table": {"orders": "broker-a:4",
                                                 "payments": "broker-a:2;broker-b:2"}}


@pytest.mark.parametrize(("code", "fields", "missing"), [
    (RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k"}, "value"),
    (RequestCode.PUT_KV_CONFIG, {"key": "k", "value": "v"}, "namespace"),
    (RequestCode.GET_KV_CONFIG, {"namespace": "ns"}, "key"),
    (RequestCode.DELETE_KV_CONFIG, {"key": "k"}, "namespace"),
    (RequestCode.GET_KVLIST_BY_NAMESPACE, {}, "namespace"),
    (RequestCode.GET_TOPICS_BY_CLUSTER, {}, "cluster"),
    (RequestCode.WIPE_WRITE_PERM_OF_BROKER, {}, "brokerName"),
    (RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokername": "broker-a"}, "brokerName"),
])
def test_a_missing_header_field_is_a_system_error_naming_it(
        code: int, fields: dict[str, str], missing: str) -> None:
    core = NameServerCore()
    answer = ask(core, code, fields)
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert f"header field '{missing}': missing" in (answer.remark or "")
    assert core.kv.version == 0


def test_an_ordered_topics_route_carries_its_order_conf_when_enabled() -> None:
    core = NameServerCore(config=NamesrvConfig(order_message_enable=True))
    core.handle(register(0, "10.0.0.1:10911"), "m", 0)
    route = ask(core, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"})
    assert "orderTopicConf" not in json.loads(route.body)
    put(core, ORDER, "orders", "broker-a:4")
    route = json.loads(ask(core, RequestCode.GET_ROUTEINFO_BY_TOPIC,
                           {"topic": "orders"}).body)
    assert route["orderTopicConf"] == "broker-a:4"
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": "10.0.0.1:10911"}
    # Off (RocketMQ's default): the route says nothing of it.
    core = NameServerCore()
    core.handle(register(0, "10.0.0.1:10911"), "m", 0)
    put(core, ORDER, "orders", "broker-a:4")
    route = json.loads(ask(core, RequestCode.GET_ROUTEINFO_BY_TOPIC,
                           {"topic": "orders"}).body)
    assert "orderTopicConf" not in route


def test_a_registration_is_answered_with_the_order_confs() -> None:
    core = NameServerCore()
    assert core.handle(register(0, "10.0.0.1:10911"), "m", 0).body == b""
    put(core, ORDER, "orders", "broker-a:4")
    answer = core.handle(register(0, "10.0.0.1:10911"), "m", 1)
    assert answer.body == b'{"table":{"orders":"broker-a:4"}}'
    core = NameServerCore(config=NamesrvConfig(return_order_topic_config_to_broker=False))
    put(core, ORDER, "orders", "broker-a:4")
    assert core.handle(register(0, "10.0.0.1:10911"), "m", 0).body == b""


def test_topics_by_cluster_and_system_topics() -> None:
    core = NameServerCore()
    core.handle(register(0, "10.0.0.1:10911"), "m", 0)
    answer = ask(core, RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "DefaultCluster"})
    assert (answer.code, answer.body) == (ResponseCode.SUCCESS, b'{"topicList":["orders"]}')
    answer = ask(core, RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "Other"})
    assert (answer.code, answer.body) == (ResponseCode.SUCCESS, b'{"topicList":[]}')
    answer = ask(core, RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS)
    assert answer.code == ResponseCode.SUCCESS
    assert answer.body == (b'{"brokerAddr":"10.0.0.1:10911",'
                           b'"topicList":["DefaultCluster","broker-a"]}')
    assert ask(NameServerCore(), RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS).body == (
        b'{"topicList":[]}')


def test_topic_lists_answer_disable_when_turned_off() -> None:
    core = NameServerCore(config=NamesrvConfig(enable_all_topic_list=False,
                                               enable_topic_list=False))
    for code, fields in ((RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, {}),
                         (RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "c"})):
        answer = ask(core, code, fields)
        assert (answer.code, answer.remark) == (ResponseCode.SYSTEM_ERROR, "disable")


def test_wipe_and_add_write_permission_of_a_broker() -> None:
    core = NameServerCore()
    core.handle(register(0, "10.0.0.1:10911"), "m", 0)
    answer = ask(core, RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
    assert (answer.code, answer.ext_fields) == (ResponseCode.SUCCESS, {"wipeTopicCount": "1"})
    route = json.loads(ask(core, RequestCode.GET_ROUTEINFO_BY_TOPIC,
                           {"topic": "orders"}).body)
    assert route["queueDatas"][0]["perm"] == 4
    # The broker's next registration with the same DataVersion keeps it wiped.
    core.handle(register(0, "10.0.0.1:10911", TOPICS_BODY), "m", 1)
    answer = ask(core, RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
    assert (answer.code, answer.ext_fields) == (ResponseCode.SUCCESS, {"addTopicCount": "1"})
    route = json.loads(ask(core, RequestCode.GET_ROUTEINFO_BY_TOPIC,
                           {"topic": "orders"}).body)
    assert route["queueDatas"][0]["perm"] == 6
    answer = ask(core, RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "nope"})
    assert answer.ext_fields == {"wipeTopicCount": "0"}


def test_get_and_update_the_name_server_config() -> None:
    core = NameServerCore(facts=NamesrvFacts(listen_port=9876))
    answer = ask(core, RequestCode.GET_NAMESRV_CONFIG)
    assert answer.code == ResponseCode.SUCCESS
    assert answer.body == (b"deleteTopicWithBrokerRegistration=false\n"
                           b"enableAllTopicList=true\n"
                           b"enableTopicList=true\n"
                           b"listenPort=9876\n"
                           b"orderMessageEnable=false\n"
                           b"returnOrderTopicConfigToBroker=true\n"
                           b"scanNotActiveBrokerInterval=1000\n"
                           b"supportActingMaster=false\n")
    answer = ask(core, RequestCode.UPDATE_NAMESRV_CONFIG,
                 body=b"orderMessageEnable=true\nsupportActingMaster=true\n")
    assert (answer.code, answer.remark) == (ResponseCode.SUCCESS, None)
    assert core.config.order_message_enable and core.route.support_acting_master
    assert b"orderMessageEnable=true\n" in ask(core, RequestCode.GET_NAMESRV_CONFIG).body
    # No body: nothing to change.
    assert ask(core, RequestCode.UPDATE_NAMESRV_CONFIG).code == ResponseCode.SUCCESS


@pytest.mark.parametrize(("body", "code", "remark"), [
    (b"kvConfigPath=/tmp/x\n", ResponseCode.NO_PERMISSION,
     "Can not update config in black list."),
    (b"configBlackList=\norderMessageEnable=true\n", ResponseCode.NO_PERMISSION,
     "Can not update config in black list."),
    (b"listenPort=1\n", ResponseCode.INVALID_PARAMETER,
     "read-only while the name server runs: listenPort"),
    (b"clusterTest=true\n", ResponseCode.INVALID_PARAMETER,
     "unknown name server config: clusterTest; known: "),
    (b"enableTopicList=maybe\n", ResponseCode.INVALID_PARAMETER,
     "enableTopicList: expected true or false, got 'maybe'"),
    (b"orderMessageEnable=\\u00zz\n", ResponseCode.SYSTEM_ERROR,
     "UPDATE_NAMESRV_CONFIG body: malformed \\uxxxx escape"),
])
def test_an_update_that_cannot_be_applied_changes_nothing(
        body: bytes, code: int, remark: str) -> None:
    core = NameServerCore(facts=NamesrvFacts(listen_port=9876))
    answer = ask(core, RequestCode.UPDATE_NAMESRV_CONFIG, body=body)
    assert answer.code == code
    assert (answer.remark or "").startswith(remark), answer.remark
    assert core.config == NamesrvConfig()
