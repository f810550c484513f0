"""What one client can take from a node process: connections, topics and groups, bounded.

Idle connections from one host used to fill a name server's cap and lock
every other client out; now one host holds at most
``max_connections_per_peer`` of them and a client from elsewhere is served.
Sends to new topics and heartbeats of new groups create them only while the
broker holds fewer than its limits; beyond, a clear refusal.
"""

from __future__ import annotations

import json

import trio
from processes import broker_sections, closed_by_peer, connect_from, node_process

from triomq.config import NodeConfig
from triomq.protocol.heartbeat import ConsumerData, HeartbeatData, SubscriptionData
from triomq.rpc import RpcConnection, RpcConnectionError
from triomq.runtime import open_node
from triomq.testing.direct_send import DirectProducer, SendError

SUCCESS, TOPIC_NOT_EXIST, SUBSCRIPTION_GROUP_NOT_EXIST = 0, 17, 26
PULL_MESSAGE, UPDATE_CONSUMER_OFFSET, UPDATE_AND_CREATE_TOPIC = 11, 15, 17
GET_ALL_TOPIC_CONFIG, HEART_BEAT, GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 21, 34, 201
GET_BROKER_CLUSTER_INFO = 106

LIMITS = """
[remoting]
max_connections = 40
max_connections_per_peer = 10
"""


async def test_one_host_cannot_lock_other_clients_out_of_a_name_server(tmp_path) -> None:
    async with node_process("nameserver", "ns", tmp_path, LIMITS) as namesrv:
        held = [await trio.open_tcp_stream("127.0.0.1", namesrv.port) for _ in range(10)]
        # The flood goes on from the same host: each further connection is closed at once.
        for _ in range(5):
            stream = await trio.open_tcp_stream("127.0.0.1", namesrv.port)
            with trio.fail_after(30):
                assert await closed_by_peer(stream)
            await stream.aclose()
        # Another host (127.0.0.2, a loopback address of its own) is served.
        other = RpcConnection(await connect_from("127.0.0.2", namesrv.port))
        async with trio.open_nursery() as nursery:
            await nursery.start(other.run)
            answer = await other.invoke(GET_BROKER_CLUSTER_INFO, timeout=30)
            assert answer.code == SUCCESS
            nursery.cancel_scope.cancel()
        # The flooding host gets a connection again once one of its own closes.
        await held.pop().aclose()
        with trio.fail_after(30):
            while True:
                again = RpcConnection(await trio.open_tcp_stream("127.0.0.1", namesrv.port))
                async with trio.open_nursery() as nursery:
                    await nursery.start(again.run)
                    try:
                        answer = await again.invoke(GET_BROKER_CLUSTER_INFO, timeout=30)
                    except RpcConnectionError:  # the server had not seen the close yet
                        answer = None
                    nursery.cancel_scope.cancel()
                if answer is not None:
                    break
                await trio.sleep(0.05)
        assert answer.code == SUCCESS
        for stream in held:
            await stream.aclose()
        namesrv.check_running()
    assert "connections open from 127.0.0.1, the cap per peer" in namesrv.log.read_text()


CREATION_LIMITS = """
auto_create_topic_limit = 30
auto_create_subscription_group_limit = 12
"""


def heartbeat(groups: list[str]) -> bytes:
    return HeartbeatData("10.0.0.1@1", (), tuple(
        ConsumerData(group, consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                     subscriptions=(SubscriptionData.build("t", "*", 1),))
        for group in groups)).encode()


async def test_auto_created_topics_and_groups_stop_at_their_limits(tmp_path) -> None:
    sections = broker_sections(tmp_path, CREATION_LIMITS)
    async with (node_process("broker", "b", tmp_path, sections) as broker,
                open_node(NodeConfig(name="client")) as client):
        producer = DirectProducer(client.rpc, broker.address)

        async def topic_count() -> int:
            answer = await client.rpc.invoke(broker.address, GET_ALL_TOPIC_CONFIG)
            return len(json.loads(answer.body)["topicConfigTable"])

        created, refusal = [], None
        for i in range(40):
            try:
                await producer.send(f"new-{i}", b"m")
            except SendError as exc:
                refusal = exc
                break
            created.append(f"new-{i}")
        assert created and refusal is not None
        assert refusal.code == TOPIC_NOT_EXIST
        assert "not created: the broker holds 30 topics, its auto_create_topic_limit" in str(
            refusal)
        assert await topic_count() == 30
        # Topics held keep taking messages; an admin may still create one.
        assert (await producer.send(created[0], b"again")).queue_offset == 1
        answer = await client.rpc.invoke(broker.address, UPDATE_AND_CREATE_TOPIC, {
            "topic": "by-admin", "defaultTopic": "TBW102", "readQueueNums": "1",
            "writeQueueNums": "1", "perm": "6", "topicFilterType": "SINGLE_TAG"})
        assert answer.code == SUCCESS, answer.remark
        assert await topic_count() == 31

        # Groups: 8 system ones, then consumers' heartbeats create up to 12 in all.
        groups = [f"group-{i}" for i in range(10)]
        answer = await client.rpc.invoke(broker.address, HEART_BEAT, body=heartbeat(groups))
        assert answer.code == SUCCESS
        answer = await client.rpc.invoke(broker.address, GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        held = set(json.loads(answer.body)["subscriptionGroupTable"])
        assert len(held) == 12 and set(groups[:4]) <= held and not set(groups[4:]) & held
        # A group not created is refused where it would be used.
        answer = await client.rpc.invoke(broker.address, UPDATE_CONSUMER_OFFSET, {
            "consumerGroup": "group-9", "topic": created[0], "queueId": "0",
            "commitOffset": "1"})
        assert answer.code == SUBSCRIPTION_GROUP_NOT_EXIST
        answer = await client.rpc.invoke(broker.address, UPDATE_CONSUMER_OFFSET, {
            "consumerGroup": "group-0", "topic": created[0], "queueId": "0",
            "commitOffset": "1"})
        assert answer.code == SUCCESS, answer.remark
        broker.check_running()
    assert "its auto_create_subscription_group_limit" in broker.log.read_text()
