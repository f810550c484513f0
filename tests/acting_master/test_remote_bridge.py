"""The ``remote`` escape bridge: the conformance suite over TCP, and its refusals."""

from __future__ import annotations

from contextlib import asynccontextmanager

import pytest
from acting_nodes import Groups, SlaveBridgeTarget, create_topic, route, wait_for

from triomq.broker.core.codes import ResponseCode
from triomq.broker.core.escape_bridge import EscapedMessage, EscapeResult
from triomq.broker.core.remote_escape import (
    RETRIES,
    Escaped,
    QueryRoute,
    RemoteEscape,
    SendTo,
    escape_targets,
    send_fields,
)
from triomq.broker.service import Broker
from triomq.protocol.route import BrokerData, QueueData, TopicRouteData
from triomq.testing import EscapeBridgeConformance
from triomq.testing.cluster import open_cluster
from triomq.testing.escape_bridge_suite import TOPIC

MAX_MESSAGE_SIZE = 2048


def remote_target(slave: Broker, master: Broker | None) -> SlaveBridgeTarget:
    """Slave ``a1``'s ``remote`` bridge, onto master ``b0``."""
    return SlaveBridgeTarget("remote", slave, master, max_message_size=MAX_MESSAGE_SIZE,
                        keeps_born_host=False)


@asynccontextmanager
async def slave_and(tmp_path, *masters: str, remote: bool = True):
    async with open_cluster(tmp_path, transport="tcp", controllers=0, brokers=0,
                            namesrvs=1) as cluster:
        await cluster.start_namesrvs()
        groups = Groups(cluster, max_message_size=MAX_MESSAGE_SIZE,
                        enable_remote_escape=remote)
        client = await cluster.start("client")
        (namesrv,) = cluster.namesrv_addresses.values()
        for name in masters:
            await groups.start(name)
            await create_topic(client, cluster.node(name).address, TOPIC, queues=8)

        async def routed() -> bool:
            answer = await client.rpc.invoke(namesrv, 105, {"topic": TOPIC})
            return answer.code == 0 and len((await route(client, namesrv, TOPIC))
                                            ["brokerDatas"]) == len(masters)
        if masters:
            await wait_for(routed)
        await groups.start("a1")
        yield cluster


class TestRemoteEscapeBridge(EscapeBridgeConformance):
    @pytest.fixture
    async def target(self, tmp_path):
        async with slave_and(tmp_path, "b0") as cluster:
            yield remote_target(cluster.broker("a1"), cluster.broker("b0"))

    @pytest.fixture
    async def masterless(self, tmp_path):
        async with slave_and(tmp_path) as cluster:
            yield remote_target(cluster.broker("a1"), None)


async def test_without_enable_remote_escape_nothing_is_sent(tmp_path):
    async with slave_and(tmp_path, "b0", remote=False) as cluster:
        target = remote_target(cluster.broker("a1"), cluster.broker("b0"))
        end = await target.end_offset()
        result = await target.bridge.put_message(EscapedMessage(topic=TOPIC, queue_id=0,
                                                                body=b"x"))
        assert (result.code, result.stored) == (ResponseCode.SERVICE_NOT_AVAILABLE, False)
        assert result.remark == "enable_remote_escape is off: no escape to another group's master"
        assert await target.end_offset() == end


def test_targets_are_other_groups_masters_that_take_writes_in_name_order() -> None:
    def group(name: str, *ids: int, cluster: str = "DefaultCluster") -> BrokerData:
        return BrokerData(cluster, name, {i: f"{name}-{i}:10911" for i in ids})

    route = TopicRouteData(
        (QueueData("broker-a", 4, 4, 6), QueueData("broker-c", 2, 2, 6),
         QueueData("broker-b", 4, 4, 6), QueueData("broker-d", 4, 4, 4),
         QueueData("broker-e", 4, 4, 6), QueueData("broker-f", 4, 4, 6)),
        (group("broker-a", 0, 1), group("broker-c", 0), group("broker-b", 0, 1),
         group("broker-d", 0), group("broker-e", 1), group("broker-f", 0, cluster="other")))
    targets = escape_targets(route, own_group="broker-a", cluster="DefaultCluster", queue_id=3)
    # Not its own group, not a read-only one, not one without a master, not another cluster's;
    # a group with fewer queues takes the message's queue modulo its own.
    assert [(t.broker_name, t.address, t.queue_id) for t in targets] == [
        ("broker-b", "broker-b-0:10911", 3), ("broker-c", "broker-c-0:10911", 1)]


def test_a_message_keeps_its_fields_and_gets_a_unique_key_if_it_has_none() -> None:
    message = EscapedMessage(topic="t", queue_id=5, body=b"x", flag=3, sys_flag=0,
                             born_timestamp=0, reconsume_times=2, properties={"K": "v"})
    fields = send_fields(message, producer_group="InnerProducerGroup_broker-a_1",
                         queue_id=1, unique_id="U1", now_ms=1234)
    assert {k: fields[k] for k in "abeghj"} == {
        "a": "InnerProducerGroup_broker-a_1", "b": "t", "e": "1", "g": "1234", "h": "3",
        "j": "2"}
    assert "UNIQ_KEY\x01U1" in fields["i"] and "K\x01v" in fields["i"]


def _flow(enabled: bool = True) -> RemoteEscape:
    return RemoteEscape(EscapedMessage(topic="t", queue_id=0, body=b"x"), enabled=enabled,
                        own_group="broker-a", cluster="DefaultCluster",
                        producer_group="InnerProducerGroup_broker-a_1", unique_id="U1")


def _route(*groups: str) -> TopicRouteData:
    return TopicRouteData(tuple(QueueData(g, 4, 4, 6) for g in groups),
                          tuple(BrokerData("DefaultCluster", g, {0: f"{g}:10911"})
                                for g in groups))


def test_the_flow_refuses_without_sending_when_it_is_off_or_nothing_takes_the_topic() -> None:
    assert _flow(enabled=False).start() == Escaped(EscapeResult(
        ResponseCode.SERVICE_NOT_AVAILABLE,
        "enable_remote_escape is off: no escape to another group's master"))
    flow = _flow()
    assert flow.start() == QueryRoute("t")
    assert flow.routed(None, 5).result.remark == "no name server routes topic t"
    flow = _flow()
    flow.start()
    assert flow.routed(_route("broker-a"), 5).result.remark == (
        "no master of another group of cluster DefaultCluster takes topic t")


def test_the_flow_tries_the_next_master_until_one_stores_the_message() -> None:
    flow = _flow()
    flow.start()
    first = flow.routed(_route("broker-a", "broker-c", "broker-b"), 5)
    assert isinstance(first, SendTo) and first.target.broker_name == "broker-b"
    assert first.fields["b"] == "t" and "UNIQ_KEY\x01U1" in first.fields["i"]
    second = flow.failed("connection refused", 6)
    assert isinstance(second, SendTo) and second.target.broker_name == "broker-c"
    stored = EscapeResult(ResponseCode.FLUSH_DISK_TIMEOUT, msg_id="M", queue_id=0,
                          queue_offset=3)
    # Stored (even if its flush then timed out): never sent again.
    assert flow.answered(stored, 7) == Escaped(stored)


def test_the_flow_gives_up_after_its_retries_with_the_last_refusal() -> None:
    flow = _flow()
    flow.start()
    step = flow.routed(_route(*(f"broker-{g}" for g in "abcdef")), 5)
    tried = []
    while isinstance(step, SendTo):
        tried.append(step.target.broker_name)
        step = flow.answered(EscapeResult(ResponseCode.SYSTEM_BUSY, "busy"), 6)
    assert tried == ["broker-b", "broker-c", "broker-d"][:RETRIES]
    assert step == Escaped(EscapeResult(ResponseCode.SYSTEM_BUSY, "busy"))
    flow = _flow()
    flow.start()
    flow.routed(_route("broker-b"), 5)
    assert flow.failed("timed out", 6).result.remark == "broker-b (broker-b:10911): timed out"
