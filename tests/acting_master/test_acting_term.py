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

from triomq.broker.components import Component, Scope
from triomq.config import NodeConfig
from triomq.hookspecs import hookimpl
from triomq.plugin_manager import PluginManager
from triomq.settings import from_mapping
from triomq.testing.cluster import free_tcp_port, open_cluster

GET_ROUTEINFO_BY_TOPIC = 105
CREATE_TOPIC = 17
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


class Group:
    def __init__(self, cluster, transport: str) -> None:
        self.cluster = cluster
        self.transport = transport
        self.listen = {name: (f"inproc://{name}" if transport == "inproc"
                              else f"tcp://127.0.0.1:{free_tcp_port()}")
                       for name in ("a0", "a1", "a2")}
        self.ha_port = {name: free_tcp_port() for name in self.listen}

    def ha_address(self, name: str) -> str:
        if self.transport == "inproc":
            return f"{self.listen[name]}-ha"
        return f"tcp://127.0.0.1:{self.ha_port[name]}"

    def config(self, name: str) -> NodeConfig:
        data = self.cluster._base(name, "broker", self.listen[name])
        broker_id = int(name[1])
        data["broker"] = {
            "broker_name": "broker-a", "broker_id": broker_id, "master_epoch": 1,
            "ha_listen_port": 0 if self.transport == "inproc" else self.ha_port[name],
            "ha_master_address": "" if broker_id == 0 else self.ha_address("a0"),
            "flush_policy": "none", "namesrv_addr": list(self.cluster.namesrv_addresses.values()),
            "enable_slave_acting_master": True, "sync_broker_member_group_period": 100,
            "broker_not_active_timeout": 1000, "broker_heartbeat_interval": 100,
        }
        return from_mapping(NodeConfig, data)

    async def start(self, name: str):
        return await self.cluster.start(name, self.config(name))


async def route(client, namesrv: str, topic: str) -> dict:
    answer = await client.rpc.invoke(namesrv, GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    assert answer.code == 0, answer.remark
    return json.loads(answer.body)


def id0_and_perm(route_data: dict) -> tuple[str | None, int]:
    (broker,) = route_data["brokerDatas"]
    (queues,) = route_data["queueDatas"]
    return broker["brokerAddrs"].get("0"), queues["perm"]


def rpc_location(address: str) -> str:
    return address.removeprefix("tcp://")


@pytest.mark.parametrize("transport", ["inproc", "tcp"])
async def test_the_smallest_slave_acts_while_the_master_is_gone(tmp_path, transport):
    pm = PluginManager.discover()
    probe = ActingProbe()
    pm.register(probe, name="acting-probe")
    async with open_cluster(tmp_path, transport=transport, controllers=0, brokers=0,
                            namesrvs=1, plugins=pm) as cluster:
        cluster.namesrv_config = lambda name: from_mapping(NodeConfig, {
            **cluster._base(name, "nameserver", cluster.namesrv_addresses[name]),
            "namesrv": {"support_acting_master": True, "scan_not_active_broker_interval": 100}})
        (namesrv,) = cluster.namesrv_addresses.values()
        await cluster.start_namesrvs()
        group = Group(cluster, transport)
        for name in ("a0", "a1", "a2"):
            await group.start(name)
        client = await cluster.start("client")
        fields = {"topic": "orders", "readQueueNums": "2", "writeQueueNums": "2", "perm": "6"}
        answer = await client.rpc.invoke(cluster.node("a0").address, CREATE_TOPIC, fields)
        assert answer.code == 0, answer.remark
        master = rpc_location(group.listen["a0"])
        await cluster.wait_for(lambda: all(
            "orders" in cluster.broker(n).topics.table for n in ("a1", "a2")))

        async def routed(expected: tuple[str | None, int]) -> None:
            with trio.fail_after(20):
                while id0_and_perm(await route(client, namesrv, "orders")) != expected:
                    await trio.sleep(0.02)

        await routed((master, PERM_READ | PERM_WRITE))
        assert not any(cluster.broker(n).acting for n in ("a0", "a1", "a2"))

        # The master stops: slave 1 acts, the route names it read-only as id 0.
        await cluster.kill("a0")
        await cluster.wait_for(lambda: cluster.broker("a1").acting, timeout=20)
        await routed((rpc_location(group.listen["a1"]), PERM_READ))
        assert probe.events == [("a1", "started")]
        assert not cluster.broker("a2").acting

        # The master returns: the term ends and the route names the master again.
        await group.start("a0")
        await cluster.wait_for(lambda: not cluster.broker("a1").acting, timeout=20)
        await routed((master, PERM_READ | PERM_WRITE))
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
