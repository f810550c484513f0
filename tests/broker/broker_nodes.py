"""Helpers: broker nodes built from TOML text, over inproc or TCP."""

from __future__ import annotations

import itertools
import tomllib
from contextlib import asynccontextmanager
from pathlib import Path

import trio

import triomq.plugins.broker
from triomq.broker.service import Broker, broker_of
from triomq.config import NodeConfig, from_mapping
from triomq.plugin_manager import PluginManager
from triomq.runtime import open_node

_networks = itertools.count(1)


def plugins() -> PluginManager:
    """Every discovered plugin, with the broker plugin registered explicitly.

    Explicit, so the tests run whether or not the ``broker`` entry point is
    installed yet.
    """
    pm = PluginManager.discover(disable={"broker"})
    pm.register(triomq.plugins.broker, name="broker")
    return pm


class Cluster:
    """Builds broker configs for one transport: TOML text parsed with ``from_mapping``."""

    def __init__(self, kind: str, root: Path, scheme: str = "mmap") -> None:
        self.kind = kind
        self.scheme = scheme
        self.root = root
        self.network = f"broker-test-{next(_networks)}"
        self.pm = plugins()

    def toml(self, name: str, *, broker_id: int = 0, master: str = "", epoch: int = 1,
             extra: str = "") -> str:
        if self.kind == "inproc":
            listen = f"inproc://{name}"
            transport = (f'[transport.options.inproc]\nnetwork = "{self.network}"\n'
                         f'local = "inproc://{name}"\n')
        else:
            listen = "tcp://127.0.0.1:0"
            transport = ""
        return f"""
name = "{name}"
role = "broker"
listen = "{listen}"
log_level = "WARNING"

[store]
scheme = "{self.scheme}"
path = "{self.root / name}"
options = {{ segment_size = 4096 }}

{transport}
[broker]
broker_name = "broker-a"
broker_id = {broker_id}
ha_listen_port = 0
ha_master_address = "{master}"
master_epoch = {epoch}
ha_send_heartbeat_interval = 50
ha_transfer_batch_size = 1000
flush_policy = "none"
{extra}
"""

    def config(self, name: str, **kwargs) -> NodeConfig:
        return from_mapping(NodeConfig, tomllib.loads(self.toml(name, **kwargs)))

    @asynccontextmanager
    async def broker(self, name: str, **kwargs):
        async with open_node(self.config(name, **kwargs), plugins=self.pm) as node:
            yield broker_of(node)

    @asynccontextmanager
    async def client(self):
        options = {"inproc": {"network": self.network, "local": "inproc://client"}}
        config = from_mapping(NodeConfig, {"name": "client", "transport": {"options": options}})
        async with open_node(config, plugins=self.pm) as node:
            yield node


def image(broker: Broker) -> tuple[int, bytes]:
    """A replica's commit log: its first offset and its bytes."""
    log = broker.log
    return log.min_offset, log.read(log.min_offset, log.max_offset - log.min_offset)


async def wait_until(predicate, timeout: float = 20.0) -> None:
    """Poll ``predicate`` until it holds (a liveness bound, never a timing assertion)."""
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.005)


async def caught_up(master: Broker, *slaves: Broker) -> None:
    """Wait until every slave holds the master's whole log."""
    await wait_until(lambda: all(s.log.max_offset == master.log.max_offset for s in slaves))
