"""Clients of a broker: heartbeats, consumer lists, notifications, expiry, subscription groups."""

from __future__ import annotations

import json
from contextlib import AsyncExitStack

import trio
from broker_nodes import Cluster, wait_until

from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.rpc import open_rpc_client


def heartbeat(client_id: str, group: str = "cg", topics: tuple[str, ...] = ("orders",),
              producer: str | None = None) -> bytes:
    subscriptions = [{"classFilterMode": False, "codeSet": [], "expressionType": "TAG",
                      "subString": "*", "subVersion": 1700000000000, "tagsSet": [],
                      "topic": topic} for topic in topics]
    return json.dumps({
        "clientID": client_id,
        "consumerDataSet": [{"consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                             "consumeType": "CONSUME_PASSIVELY", "groupName": group,
                             "messageModel": "CLUSTERING", "subscriptionDataSet": subscriptions,
                             "unitMode": False}],
        "producerDataSet": [{"groupName": producer}] if producer else [],
    }).encode()


class Consumer:
    """One client connection that records the notifications pushed to it."""

    def __init__(self, stack: AsyncExitStack, node, address: str, client_id: str) -> None:
        self.stack = stack
        self.node = node
        self.address = address
        self.client_id = client_id
        self.notified: list[str] = []

    async def open(self) -> Consumer:
        async def notified(request, peer):
            self.notified.append(request.ext_fields["consumerGroup"])

        self.rpc = await self.stack.enter_async_context(open_rpc_client(
            self.node.connect, handlers={RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: notified}))
        return self

    async def call(self, code: int, fields=None, body: bytes = b""):
        return await self.rpc.invoke(self.address, code, fields or {}, body)

    async def beat(self, **kwargs) -> None:
        answer = await self.call(RequestCode.HEART_BEAT, body=heartbeat(self.client_id, **kwargs))
        assert answer.code == ResponseCode.SUCCESS, answer.remark


async def consumer_ids(consumer: Consumer, group: str = "cg") -> list[str] | None:
    answer = await consumer.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                                 {"consumerGroup": group})
    if answer.code != ResponseCode.SUCCESS:
        assert (answer.code, answer.remark) == (ResponseCode.SYSTEM_ERROR,
                                                f"no consumer for this group, {group}")
        return None
    return sorted(json.loads(answer.body)["consumerIdList"])


async def test_consumers_join_leave_expire_and_are_notified(tmp_path, autojump_clock) -> None:
    cluster = Cluster("inproc", tmp_path)
    async with cluster.broker("a") as a, cluster.client() as node, AsyncExitStack() as stack:
        address = a.node.address
        c1 = await Consumer(stack, node, address, "10.0.0.1@1").open()
        c2 = await Consumer(stack, node, address, "10.0.0.2@2").open()
        assert await consumer_ids(c1) is None
        await c1.beat(producer="pg")
        assert await consumer_ids(c1) == ["10.0.0.1@1"]
        assert a.clients.group_known("cg") and not a.clients.group_known("other")
        assert a.clients.subscription("cg", "orders").sub_string == "*"
        assert a.clients.table.producer_groups() == {"pg": ["10.0.0.1@1"]}
        await wait_until(lambda: c1.notified == ["cg"])  # its own joining changed the group
        # A second consumer joins: both are told.
        await c2.beat()
        await wait_until(lambda: c1.notified == ["cg"] * 2 and c2.notified == ["cg"])
        assert await consumer_ids(c1) == ["10.0.0.1@1", "10.0.0.2@2"]
        # A heartbeat that changes nothing tells nobody.
        await c1.beat(producer="pg")
        await trio.sleep(1)
        assert (c1.notified, c2.notified) == (["cg"] * 2, ["cg"])
        # Unregistering leaves the group: the one left is told.
        answer = await c2.call(RequestCode.UNREGISTER_CLIENT,
                               {"clientID": "10.0.0.2@2", "consumerGroup": "cg"})
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        await wait_until(lambda: c1.notified == ["cg"] * 3)
        assert await consumer_ids(c1) == ["10.0.0.1@1"]
        # c2 comes back, then falls silent: after 120 s (and a scan) it expires, its
        # connection is closed and c1 is told.
        await c2.beat()
        await wait_until(lambda: c1.notified == ["cg"] * 4)
        for _ in range(5):
            await trio.sleep(30)
            await c1.beat(producer="pg")
        await wait_until(lambda: c1.notified == ["cg"] * 5)
        assert await consumer_ids(c1) == ["10.0.0.1@1"]
        assert all(c.closed for c in c2.rpc._connections.values())
        # A subscription dropped is a change too.
        await c1.beat(topics=("orders", "audit"))
        await c1.beat(topics=("audit",))
        await wait_until(lambda: c1.notified == ["cg"] * 7)
        assert a.clients.subscription("cg", "orders") is None
        # The last consumer's connection closes: the group is gone.
        await c1.rpc.close(address)
        await wait_until(lambda: not a.clients.group_known("cg"))
        assert a.clients.table.producer_groups() == {}
        assert a.topics.table.get("%RETRY%cg").write_queue_nums == 1
        groups = await c1.call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        assert "cg" in json.loads(groups.body)["subscriptionGroupTable"]
    saved = json.loads((tmp_path / "a" / "config" / "subscriptionGroup.json").read_bytes())
    assert set(saved) == {"dataVersion", "forbiddenTable", "subscriptionGroupTable"}
    assert set(saved["dataVersion"]) == {"counter", "stateVersion", "timestamp"}
    assert saved["subscriptionGroupTable"]["cg"] == {
        "groupName": "cg", "consumeEnable": True, "consumeFromMinEnable": True,
        "consumeBroadcastEnable": True, "consumeMessageOrderly": False, "retryQueueNums": 1,
        "retryMaxTimes": 16, "groupRetryPolicy": {"type": "CUSTOMIZED"}, "brokerId": 0,
        "whichBrokerWhenConsumeSlowly": 1, "notifyConsumerIdsChangedEnable": True,
        "groupSysFlag": 0, "consumeTimeoutMinute": 15, "attributes": {}}
    assert "TOOLS_CONSUMER" in saved["subscriptionGroupTable"]
    async with cluster.broker("a") as a:
        assert a.clients.groups.get("cg").retry_max_times == 16
        assert not a.clients.group_known("cg")  # clients are not persisted


async def test_no_subscription_group_without_auto_creation(tmp_path, autojump_clock) -> None:
    cluster = Cluster("inproc", tmp_path)
    async with cluster.broker("a", extra="auto_create_subscription_group = false") as a, \
            cluster.client() as node, AsyncExitStack() as stack:
        c1 = await Consumer(stack, node, a.node.address, "c1").open()
        await c1.beat()
        assert await consumer_ids(c1) == ["c1"]  # registered all the same, as RocketMQ does
        assert a.clients.groups.get("cg") is None and "%RETRY%cg" not in a.topics.table


async def test_a_slave_copies_its_masters_subscription_groups(tmp_path, autojump_clock) -> None:
    cluster = Cluster("inproc", tmp_path)
    async with cluster.broker("m") as m, cluster.client() as node, \
            cluster.broker("s", broker_id=1, master=m.ha_address) as s, AsyncExitStack() as stack:
        s.master_rpc_address = lambda: m.node.address
        c1 = await Consumer(stack, node, m.node.address, "c1").open()
        await c1.beat(group="copied")
        await wait_until(lambda: s.clients.groups.get("copied") is not None, timeout=60)
        assert s.clients.groups.data_version == m.clients.groups.data_version
        assert "%RETRY%copied" in m.topics.table
        # A slave creates no topic: a consumer beating to it makes no retry topic.
        c2 = await Consumer(stack, node, s.node.address, "c2").open()
        await c2.beat(group="on-slave")
        assert await consumer_ids(c2, "on-slave") == ["c2"]
        assert "%RETRY%on-slave" not in s.topics.table
