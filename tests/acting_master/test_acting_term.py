"""A static group of three with a name server that supports acting masters.

When the master stops, the alive slave with the smallest brokerId acts for it
(its acting-term components run) and the name server routes it as a
read-only master (id 0, no write permission), so producers skip the group
while consumers keep reading. When the master returns, the term ends and the
route names the master again. Over the in-process transport and TCP; the
waits are liveness bounds, never timing assertions.
"""

from __future__ import annotations

import json

import pytest
import trio
from acting_nodes import Groups, acting_namesrv, create_topic, open_static_groups, route, wait_for

from triomq.broker.components import Component, Scope
from triomq.config import NodeConfig
from triomq.hookspecs import hookimpl
from triomq.plugin_manager import PluginManager
from triomq.settings import from_mapping
from triomq.testing.cluster import open_cluster

PERM_READ, PERM_WRITE = 4, 2


class ActingProbe:
    """An acting-term component on every broker: records its starts and cancellations."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    @hookimpl
    def triomq_broker_components(self, node, broker):
        async def run(*, task_status=trio.TASK_STATUS_IGNORED):
            self.events.append((node.name, "started"))
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                self.events.append((node.name, "cancelled"))

        return [Component("acting-probe", scope=Scope.ACTING_TERM, start=[run])]


def id0_and_perm(route_data: dict) -> tuple[str | None, int]:
    (broker,) = route_data["brokerDatas"]
    (queues,) = route_data["queueDatas"]
    return broker["brokerAddrs"].get("0"), queues["perm"]


@pytest.mark.parametrize("transport", ["inproc", "tcp"])
async def test_the_smallest_slave_acts_while_the_master_is_gone(tmp_path, transport):
    pm = PluginManager.discover()
    probe = ActingProbe()
    pm.register(probe, name="acting-probe")
    async with open_cluster(tmp_path, transport=transport, controllers=0, brokers=0,
                            namesrvs=1, plugins=pm) as cluster:
        acting_namesrv(cluster)
        (namesrv,) = cluster.namesrv_addresses.values()
        await cluster.start_namesrvs()
        group = Groups(cluster)
        for name in ("a0", "a1", "a2"):
            await group.start(name)
        client = await cluster.start("client")
        await create_topic(client, cluster.node("a0").address, "orders")
        await cluster.wait_for(lambda: all(
            "orders" in cluster.broker(n).topics.table for n in ("a1", "a2")))

        async def routed(expected: tuple[str | None, int]) -> None:
            async def holds() -> bool:
                return id0_and_perm(await route(client, namesrv, "orders")) == expected
            await wait_for(holds)

        await routed((group.location("a0"), PERM_READ | PERM_WRITE))
        assert not any(cluster.broker(n).acting for n in ("a0", "a1", "a2"))

        # The master stops: slave 1 acts, the route names it read-only as id 0.
        await cluster.kill("a0")
        await cluster.wait_for(lambda: cluster.broker("a1").acting, timeout=20)
        await routed((group.location("a1"), PERM_READ))
        assert probe.events == [("a1", "started")]
        assert not cluster.broker("a2").acting

        # The master returns: the term ends and the route names the master again.
        await group.start("a0")
        await cluster.wait_for(lambda: not cluster.broker("a1").acting, timeout=20)
        await routed((group.location("a0"), PERM_READ | PERM_WRITE))
        assert probe.events == [("a1", "started"), ("a1", "cancelled")]
        assert not cluster.broker("a2").acting


async def test_an_acting_term_component_needs_enable_slave_acting_master(tmp_path):
    pm = PluginManager.discover()
    pm.register(ActingProbe(), name="acting-probe")
    async with open_cluster(tmp_path, controllers=0, brokers=0, namesrvs=0,
                            plugins=pm) as cluster:
        data = cluster._base("a0", "broker", "inproc://a0")
        data["broker"] = {"broker_name": "broker-a", "ha_listen_port": 0}
        with pytest.raises(Exception, match="enable_slave_acting_master is off"):
            await cluster.start("a0", from_mapping(NodeConfig, data))


def send_fields(n: int) -> dict[str, str]:
    """SEND_MESSAGE_V2's header as RocketMQ's clients build it, to orders queue 0."""
    return {"a": "pg", "b": "orders", "c": "TBW102", "d": "4", "e": "0", "f": "0",
            "g": str(1_700_000_000_000 + n), "h": "0", "i": f"KEYS\x01k{n}\x02", "j": "0",
            "k": "false", "m": "false"}


def lock_body(client_id: str) -> bytes:
    return json.dumps({"consumerGroup": "cg", "clientId": client_id, "onlyThisBroker": False,
                       "mqSet": [{"topic": "orders", "brokerName": "broker-a", "queueId": 0}]
                       }).encode()


@pytest.mark.parametrize("transport", ["inproc", "tcp"])
async def test_the_acting_slave_answers_what_only_a_master_answers(tmp_path, transport):
    async with open_static_groups(tmp_path, ("a0", "a1"), transport=transport) as (cluster, _):
        client = await cluster.start("client")
        await create_topic(client, cluster.node("a0").address, "orders")
        for n in range(3):
            answer = await client.rpc.invoke(cluster.node("a0").address, 310, send_fields(n),
                                             b"m%d" % n)
            assert answer.code == 0, answer.remark
        master, slave = cluster.broker("a0"), cluster.broker("a1")
        await cluster.wait_for(lambda: slave.log.max_offset == master.log.max_offset
                               and "orders" in slave.topics.table)
        first_store_time = master.log.read_record(0).store_timestamp
        await cluster.kill("a0")
        await cluster.wait_for(lambda: slave.acting, timeout=20)

        async def ask(code: int, fields: dict[str, str], body: bytes = b""):
            answer = await client.rpc.invoke(cluster.node("a1").address, code, fields, body)
            assert answer.code == 0, (code, answer.remark)
            return answer

        queue = {"topic": "orders", "queueId": "0"}
        assert (await ask(30, queue)).ext_fields["offset"] == "3"  # GET_MAX_OFFSET
        assert (await ask(31, queue)).ext_fields["offset"] == "0"  # GET_MIN_OFFSET
        earliest = await ask(32, queue)  # GET_EARLIEST_MSG_STORETIME
        assert earliest.ext_fields["timestamp"] == str(first_store_time)
        search = await ask(29, {**queue, "timestamp": str(first_store_time)})
        assert search.ext_fields["offset"] == "0"  # SEARCH_OFFSET_BY_TIMESTAMP
        # LOCK_BATCH_MQ and UNLOCK_BATCH_MQ: an orderly consumer keeps its queue.
        locked = json.loads((await ask(41, {}, lock_body("c1"))).body)["lockOKMQSet"]
        assert [mq["queueId"] for mq in locked] == [0]
        assert json.loads((await ask(41, {}, lock_body("c2"))).body)["lockOKMQSet"] == []
        await ask(42, {}, lock_body("c1"))
        locked = json.loads((await ask(41, {}, lock_body("c2"))).body)["lockOKMQSet"]
        assert [mq["queueId"] for mq in locked] == [0]
        # PULL_MESSAGE: consumers read on from it, slave_read_enable or not.
        pull = {"consumerGroup": "cg", "topic": "orders", "queueId": "0", "queueOffset": "1",
                "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0",
                "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0"}
        answer = await ask(11, pull)
        assert (answer.ext_fields["nextBeginOffset"], answer.ext_fields["maxOffset"]) == ("3", "3")
        # It wrote nothing of its own.
        assert slave.log.max_offset == master.log.max_offset


async def test_a_send_to_the_acting_slave_is_refused_no_permission(tmp_path):
    async with open_static_groups(tmp_path, ("a0", "a1")) as (cluster, _):
        client = await cluster.start("client")
        await create_topic(client, cluster.node("a0").address, "orders")
        await cluster.wait_for(lambda: "orders" in cluster.broker("a1").topics.table)
        slave = cluster.broker("a1")
        answer = await client.rpc.invoke(cluster.node("a1").address, 310, send_fields(0), b"x")
        assert answer.code == 14  # a slave with its master: SERVICE_NOT_AVAILABLE
        await cluster.kill("a0")
        await cluster.wait_for(lambda: slave.acting, timeout=20)
        held = slave.log.max_offset
        answer = await client.rpc.invoke(cluster.node("a1").address, 310, send_fields(1), b"x")
        assert (answer.code, answer.remark) == (16, (
            "broker broker-a id 1 acts read-only for its absent master: messages go to a "
            "group with a master"))
        assert slave.log.max_offset == held


async def test_a_master_cut_off_from_the_name_server_is_acted_for_after_its_timeout(tmp_path):
    """Its connection stays open: the name server drops it only when its heartbeats have
    been missing for broker_not_active_timeout (1 s here), at the next scan."""
    async with open_static_groups(tmp_path, ("a0", "a1")) as (cluster, _):
        (namesrv,) = cluster.namesrv_addresses.values()
        client = await cluster.start("client")
        await create_topic(client, cluster.node("a0").address, "orders")
        slave = cluster.broker("a1")
        network = cluster.node("a0").transport("inproc").network
        network.partition("inproc://a0", namesrv)
        cut = trio.current_time()
        await cluster.wait_for(lambda: slave.acting, timeout=20)
        # Never before the name server's timeout, counted from a0's last heartbeat, which
        # went at most one broker_heartbeat_interval (0.1 s) before the cut.
        assert trio.current_time() - cut >= 1.0 - 0.1
        network.heal()
        await cluster.wait_for(lambda: not slave.acting, timeout=20)
        answer = await client.rpc.invoke(namesrv, 105, {"topic": "orders"})
        assert json.loads(answer.body)["brokerDatas"][0]["brokerAddrs"]["0"] == "inproc://a0"


async def test_with_an_old_name_servers_requests_only_the_slave_still_acts(tmp_path):
    """compatible_with_old_name_srv: heartbeats as QUERY_DATA_VERSION and the group's
    members from the route of rmq_sys_SYNC_BROKER_MEMBER_<group>, no 904 nor 901."""
    async with open_cluster(tmp_path, controllers=0, brokers=0, namesrvs=1) as cluster:
        acting_namesrv(cluster)
        (ns,) = await cluster.start_namesrvs()
        seen: dict[int, int] = {}
        for code in (322, 901, 904, 105):
            ns.rpc_server.observe(code, lambda request, _peer: seen.update(
                {request.code: seen.get(request.code, 0) + 1}))
        group = Groups(cluster, compatible_with_old_name_srv=True)
        for name in ("a0", "a1"):
            await group.start(name)
        slave = cluster.broker("a1")
        assert "rmq_sys_SYNC_BROKER_MEMBER_broker-a" in slave.topics.table
        await cluster.wait_for(lambda: seen.get(322, 0) >= 2 and seen.get(105, 0) >= 2)
        await cluster.kill("a0")
        await cluster.wait_for(lambda: slave.acting, timeout=20)
        await group.start("a0")
        await cluster.wait_for(lambda: not slave.acting, timeout=20)
        assert seen.get(901, 0) == 0 and seen.get(904, 0) == 0


async def test_a_bad_min_broker_id_notice_is_refused_and_changes_nothing(tmp_path):
    async with open_static_groups(tmp_path, ("a0", "a1")) as (cluster, _):
        client = await cluster.start("client")
        slave = cluster.broker("a1")
        for fields, remark in (
                ({"brokerName": "broker-z", "minBrokerId": "1"},
                 "header field 'brokerName': 'broker-z' is not this broker's group"),
                ({"brokerName": "broker-a", "minBrokerId": "one"}, "'minBrokerId'"),
                ({"brokerName": "broker-a"}, "'minBrokerId': missing")):
            answer = await client.rpc.invoke(cluster.node("a1").address, 905, fields)
            assert answer.code == 1 and remark in (answer.remark or ""), answer.remark
        assert not slave.acting
        # A good one (the master is alive, so the next poll undoes it) is taken.
        answer = await client.rpc.invoke(cluster.node("a1").address, 905,
                                         {"brokerName": "broker-a", "minBrokerId": "1"})
        assert answer.code == 0
        (watcher,) = [c for c in slave.components.components if c.name == "acting-master"]
        assert watcher.watch.min_broker_id == 1  # until the next poll says otherwise
        await cluster.wait_for(lambda: watcher.watch.min_broker_id == 0 and not slave.acting)
