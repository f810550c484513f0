"""Name-server requests as RocketMQ's brokers and clients send them, answered by the pure core.

Headers and bodies are written out by hand from RocketMQ's request headers
(``RegisterBrokerRequestHeader`` and friends), not built by triomq's encoders.
"""

from __future__ import annotations

import json
import zlib

import pytest

from triomq.namesrv.core.processor import NameServerCore, RequestCode, ResponseCode
from triomq.protocol.remoting import RemotingCommand

TOPICS_BODY = (b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":'
               b'{"counter":1,"stateVersion":0,"timestamp":5},"topicConfigTable":{"orders":'
               b'{"attributes":{},"order":false,"perm":6,"readQueueNums":4,'
               b'"topicFilterType":"SINGLE_TAG","topicName":"orders","topicSysFlag":0,'
               b'"writeQueueNums":4}}}}')


def register(broker_id: int, address: str, body: bytes = TOPICS_BODY,
             **extra: str) -> RemotingCommand:
    fields = {"brokerName": "broker-a", "brokerAddr": address, "clusterName": "DefaultCluster",
              "haServerAddr": address.replace("10911", "10912"), "brokerId": str(broker_id),
              "compressed": "false", "bodyCrc32": str(zlib.crc32(body) & 0x7FFFFFFF),
              "enableActingMaster": "false", **extra}
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, fields, body)


def ask(core: NameServerCore, code: int, fields: dict[str, str] | None = None,
        body: bytes = b"", connection: str = "c0", now: int = 0) -> RemotingCommand:
    return core.handle(RemotingCommand.request(code, fields or {}, body), connection, now)


def test_register_then_route_then_cluster_info() -> None:
    core = NameServerCore()
    assert core.handle(register(0, "10.0.0.1:10911"), "m", 0).code == ResponseCode.SUCCESS
    slave = core.handle(register(1, "10.0.0.2:10911"), "s", 0)
    assert slave.code == ResponseCode.SUCCESS
    assert slave.ext_fields == {"masterAddr": "10.0.0.1:10911", "haServerAddr": "10.0.0.1:10912"}
    route = ask(core, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"})
    assert route.code == ResponseCode.SUCCESS
    assert json.loads(route.body)["brokerDatas"][0]["brokerAddrs"] == {
        "0": "10.0.0.1:10911", "1": "10.0.0.2:10911"}
    info = json.loads(ask(core, RequestCode.GET_BROKER_CLUSTER_INFO).body)
    assert info["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}
    topics = json.loads(ask(core, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).body)
    assert topics == {"topicList": ["orders"]}
    group = json.loads(ask(core, RequestCode.GET_BROKER_MEMBER_GROUP,
                           {"clusterName": "DefaultCluster", "brokerName": "broker-a"}).body)
    assert group["brokerMemberGroup"]["brokerAddrs"] == {"0": "10.0.0.1:10911",
                                                         "1": "10.0.0.2:10911"}


def test_an_unknown_topic_is_topic_not_exist() -> None:
    answer = ask(NameServerCore(), RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "nope"})
    assert answer.code == ResponseCode.TOPIC_NOT_EXIST == 17
    assert "nope" in (answer.remark or "")


def test_a_compressed_registration_is_read() -> None:
    def part(data: bytes) -> bytes:
        return len(data).to_bytes(4, "big") + data
    raw = (part(b'{"counter":2,"stateVersion":1,"timestamp":9}') + (1).to_bytes(4, "big")
           + part(b"payments 2 2 6 SINGLE_TAG {}") + part(b"[]") + (0).to_bytes(4, "big"))
    body = zlib.compress(raw)
    core = NameServerCore()
    assert core.handle(register(0, "h:10911", body, compressed="true"), "m", 0).code == 0
    route = json.loads(ask(core, RequestCode.GET_ROUTEINFO_BY_TOPIC,
                           {"topic": "payments"}).body)
    assert route["queueDatas"][0]["writeQueueNums"] == 2


def test_query_data_version_says_whether_it_changed() -> None:
    core = NameServerCore()
    core.handle(register(0, "h:10911"), "m", 0)
    fields = {"brokerName": "broker-a", "brokerAddr": "h:10911",
              "clusterName": "DefaultCluster", "brokerId": "0"}
    same = ask(core, RequestCode.QUERY_DATA_VERSION, fields,
               b'{"counter":1,"stateVersion":0,"timestamp":5}')
    assert same.ext_fields == {"changed": "false"}
    assert json.loads(same.body) == {"counter": 1, "stateVersion": 0, "timestamp": 5}
    moved = ask(core, RequestCode.QUERY_DATA_VERSION, fields,
                b'{"counter":2,"stateVersion":0,"timestamp":6}')
    assert moved.ext_fields == {"changed": "true"}


def test_a_closed_connection_and_a_scan_remove_brokers() -> None:
    core = NameServerCore()
    core.handle(register(0, "h:10911", heartbeatTimeoutMillis="1000"), "m", 0)
    core.handle(register(1, "g:10911", heartbeatTimeoutMillis="1000"), "s", 0)
    core.connection_closed("m")
    route = json.loads(ask(core, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"}).body)
    assert route["brokerDatas"][0]["brokerAddrs"] == {"1": "g:10911"}
    heartbeat = {"clusterName": "DefaultCluster", "brokerAddr": "g:10911",
                 "brokerName": "broker-a"}
    assert ask(core, RequestCode.BROKER_HEARTBEAT, heartbeat, now=900).code == 0
    core.scan(1_500)
    assert ask(core, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"}).code == 0
    core.scan(1_901)
    assert ask(core, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"}).code == 17


@pytest.mark.parametrize("request_, fragment", [
    (register(0, "h:10911", b"{not json"), "not valid JSON"),
    (register(0, "h:10911", bodyCrc32="12345"), "crc32 not match"),
    (register(0, "h:10911", brokerId="x"), "'brokerId': expected a non-negative integer"),
    (register(0, "h:10911", clusterName=""), "'clusterName': missing"),
    (register(0, "h:10911", clusterName="other"), "belongs to cluster DefaultCluster"),
    (register(0, "h:10911", brokerName="a b"), "illegal characters"),
    (RemotingCommand.request(RequestCode.BROKER_HEARTBEAT, {
        "clusterName": "DefaultCluster", "brokerAddr": "x:1", "brokerName": "broker-a"}),
     "not registered"),
    (RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {}), "'topic': missing"),
])
def test_bad_requests_get_a_code_and_a_remark_and_change_nothing(
        request_: RemotingCommand, fragment: str) -> None:
    core = NameServerCore()
    core.handle(register(0, "h:10911"), "m", 0)
    before = core.route.snapshot()
    answer = core.handle(request_, "x", 1)
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert fragment in (answer.remark or "")
    assert core.route.snapshot() == before


def test_notices_go_to_the_group_when_its_smallest_id_changes() -> None:
    core = NameServerCore()
    core.handle(register(0, "h:10911", enableActingMaster="true"), "m", 0)
    core.handle(register(1, "g:10911", enableActingMaster="true"), "s", 0)
    core.take_notices()
    core.connection_closed("m")
    (notice,) = core.take_notices()
    address, command = notice
    assert address == "g:10911"
    assert command.code == RequestCode.NOTIFY_MIN_BROKER_ID_CHANGE and command.is_oneway
    assert command.ext_fields == {"brokerName": "broker-a", "minBrokerId": "1",
                                  "minBrokerAddr": "g:10911", "offlineBrokerAddr": "h:10911"}


def test_a_member_group_query_for_an_unknown_group_is_refused() -> None:
    core = NameServerCore()
    core.handle(register(0, "h:10911"), "m", 0)
    answer = ask(core, RequestCode.GET_BROKER_MEMBER_GROUP,
                 {"clusterName": "DefaultCluster", "brokerName": "broker-x"})
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert answer.remark == ("get broker member group: no broker of group 'broker-x' in "
                             "cluster 'DefaultCluster' is registered")
