"""``triomq admin`` topic and route commands against a running name server."""

from __future__ import annotations

import io
import json
import zlib

from triomq.cli import build_parser
from triomq.namesrv.core.processor import RequestCode
from triomq.plugin_manager import PluginManager
from triomq.plugins.namesrv.cli import run_admin

BODY = (b'{"topicConfigSerializeWrapper":{"dataVersion":{"counter":1,"stateVersion":0,'
        b'"timestamp":5},"topicConfigTable":{"orders":{"topicName":"orders","perm":6,'
        b'"readQueueNums":4,"writeQueueNums":4}}}}')


def register_fields(broker_id: int, address: str) -> dict[str, str]:
    return {"brokerName": "broker-a", "brokerAddr": address, "clusterName": "DefaultCluster",
            "haServerAddr": "", "brokerId": str(broker_id), "compressed": "false",
            "bodyCrc32": str(zlib.crc32(BODY) & 0x7FFFFFFF)}


async def admin(node, *argv: str) -> tuple[int, str]:
    args = build_parser(PluginManager.discover()).parse_args(["admin", *argv])
    out = io.StringIO()
    code = await run_admin(args, node.rpc, out)
    return code, out.getvalue()


async def test_topic_list_route_and_cluster_list(temporary_node, autojump_clock) -> None:
    async with temporary_node("ns", role="nameserver", listen="inproc://ns") as ns, \
            temporary_node("b0") as b0:
        for broker_id, address in ((0, "10.0.0.1:10911"), (1, "10.0.0.2:10911")):
            answer = await b0.rpc.invoke("inproc://ns", RequestCode.REGISTER_BROKER,
                                         register_fields(broker_id, address), BODY)
            assert answer.code == 0, answer.remark
        code, out = await admin(ns, "topic-list", "-n", "inproc://ns")
        assert code == 0 and out.split() == ["orders"]
        code, out = await admin(ns, "topic-route", "-n", "inproc://ns", "-t", "orders",
                                "--json")
        route = json.loads(out)
        assert code == 0 and route["brokerDatas"][0]["brokerAddrs"] == {
            "0": "10.0.0.1:10911", "1": "10.0.0.2:10911"}
        code, out = await admin(ns, "topic-route", "-n", "inproc://ns", "-t", "orders")
        assert code == 0 and "10.0.0.2:10911" in out and "readQueueNums" in out
        code, out = await admin(ns, "cluster-list", "-n", "inproc://ns")
        assert code == 0
        assert out.splitlines()[2].split() == ["DefaultCluster", "broker-a", "0",
                                               "10.0.0.1:10911"]


async def test_an_unknown_topic_and_an_unknown_cluster_exit_1_saying_why(
        temporary_node, autojump_clock) -> None:
    async with temporary_node("ns", role="nameserver", listen="inproc://ns") as ns:
        code, out = await admin(ns, "topic-route", "-n", "inproc://ns", "-t", "nope")
        assert code == 1 and "code 17" in out and "nope" in out
        code, out = await admin(ns, "update-topic", "-n", "inproc://ns", "-c", "Elsewhere",
                                "-t", "orders")
        assert code == 1 and "knows no such cluster" in out
        code, out = await admin(ns, "topic-list", "-n", "inproc://nobody;inproc://ns")
        assert code == 0 and out.strip() == ""
