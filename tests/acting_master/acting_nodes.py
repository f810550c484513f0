"""Helpers: static broker groups with acting masters beside a name server, inproc or TCP."""

from __future__ import annotations

import json
from typing import Any

import trio

from triomq.config import NodeConfig
from triomq.settings import from_mapping
from triomq.testing.cluster import Cluster, free_tcp_port

GET_ROUTEINFO_BY_TOPIC = 105
CREATE_TOPIC = 17


def acting_namesrv(cluster: Cluster) -> None:
    """The cluster's name servers support acting masters and scan every 100 ms."""
    cluster.namesrv_config = lambda name: from_mapping(NodeConfig, {  # type: ignore[method-assign]
        **cluster._base(name, "nameserver", cluster.namesrv_addresses[name]),
        "namesrv": {"support_acting_master": True, "scan_not_active_broker_interval": 100}})


class Groups:
    """Static groups: node ``<letter><id>`` is id ``id`` of group ``broker-<letter>``,
    a slave of ``<letter>0``; every broker with ``enable_slave_acting_master``."""

    def __init__(self, cluster: Cluster, **broker: Any) -> None:
        self.cluster = cluster
        self.broker = broker
        self.listen: dict[str, str] = {}
        self.ha_port: dict[str, int] = {}

    def _addresses(self, name: str) -> None:
        if name not in self.listen:
            tcp = self.cluster.transport == "tcp"
            self.listen[name] = (f"tcp://127.0.0.1:{free_tcp_port()}" if tcp
                                 else f"inproc://{name}")
            self.ha_port[name] = free_tcp_port() if tcp else 0

    def ha_address(self, name: str) -> str:
        self._addresses(name)
        if self.cluster.transport == "inproc":
            return f"{self.listen[name]}-ha"
        return f"tcp://127.0.0.1:{self.ha_port[name]}"

    def config(self, name: str, **extra: Any) -> NodeConfig:
        self._addresses(name)
        data = self.cluster._base(name, "broker", self.listen[name])
        broker_id = int(name[1:])
        data["broker"] = {
            "broker_name": f"broker-{name[0]}", "broker_id": broker_id, "master_epoch": 1,
            "ha_listen_port": self.ha_port[name],
            "ha_master_address": "" if broker_id == 0 else self.ha_address(f"{name[0]}0"),
            "flush_policy": "none",
            "namesrv_addr": list(self.cluster.namesrv_addresses.values()),
            "enable_slave_acting_master": True, "sync_broker_member_group_period": 100,
            "broker_not_active_timeout": 1000, "broker_heartbeat_interval": 100,
            **self.broker, **extra,
        }
        return from_mapping(NodeConfig, data)

    async def start(self, name: str, **extra: Any):
        return await self.cluster.start(name, self.config(name, **extra))

    def location(self, name: str) -> str:
        """The address as routes carry it."""
        return self.listen[name].removeprefix("tcp://")


async def route(client, namesrv: str, topic: str) -> dict:
    answer = await client.rpc.invoke(namesrv, GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    assert answer.code == 0, answer.remark
    return json.loads(answer.body)


async def create_topic(client, address: str, topic: str, queues: int = 2) -> None:
    fields = {"topic": topic, "readQueueNums": str(queues), "writeQueueNums": str(queues),
              "perm": "6"}
    answer = await client.rpc.invoke(address, CREATE_TOPIC, fields)
    assert answer.code == 0, answer.remark


async def wait_for(predicate, timeout: float = 20.0) -> None:
    """Poll ``predicate`` until it holds (a liveness bound, never a timing assertion)."""
    with trio.fail_after(timeout):
        while not await predicate():
            await trio.sleep(0.02)
