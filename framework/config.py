"""The node's configuration: attrs classes, built in code or loaded from TOML.

In code::

    config = NodeConfig(name="b1", role="broker", store=StoreConfig(path="/data/b1"))

From a file::

    config = load_toml(NodeConfig, "broker.toml")

Unknown keys and bad values are rejected with the key path and the reason
(``framework.settings`` has the machinery). Every key is documented where it
is declared; ``triomq config`` lists them all with their defaults.
"""

from __future__ import annotations

from typing import Any, Literal

import attrs

from framework.broker.config import BrokerConfig
from framework.controller.config import ControllerConfig
from framework.settings import describe, from_mapping, load_toml, one_of, setting

__all__ = ["ROLES", "BrokerConfig", "ControllerConfig", "NodeConfig", "PluginsConfig",
           "StoreConfig", "TransportConfig", "describe", "from_mapping", "load_toml"]

ROLES = ("standalone", "nameserver", "controller", "broker")

@attrs.frozen
class PluginsConfig:
    """``[plugins]``: which discovered plugins to leave out."""

    disable: tuple[str, ...] = setting(
        (), doc="Entry-point names of discovered plugins not to load, e.g. ['transport_tcp'].")


@attrs.frozen
class TransportConfig:
    """``[transport]``: options handed to every transport plugin, by scheme."""

    options: dict[str, dict[str, Any]] = setting(
        factory=dict,
        doc="Per-scheme options, e.g. [transport.options.tcp] connect_timeout = 2.0. "
            "Each transport plugin documents its own keys.")


@attrs.frozen
class StoreConfig:
    """``[store]``: where and how the node keeps its data."""

    scheme: str = setting(
        "mmap", doc="Store plugin to use: 'mmap' or 'lmdb' (or a third-party one).")
    path: str = setting("", doc="Store root directory (RocketMQ's storePathRootDir). "
                               "Empty: a node that keeps nothing on disk.")
    options: dict[str, Any] = setting(
        factory=dict, doc="Options for the store plugin (segment size, flush policy, ...); "
                          "the plugin documents its keys.")


@attrs.frozen
class NodeConfig:
    """One node: its identity, role, transport and store."""

    name: str = setting("node", doc="The node's name; also its default in-process address.",
                        check=lambda v: None if v else "must not be empty")
    role: Literal["standalone", "nameserver", "controller", "broker"] = setting(
        "standalone", doc="What the node runs: 'standalone' (only what plugins add), "
                          "'nameserver', 'controller' or 'broker'.",
        check=one_of(*ROLES))
    listen: str = setting("", doc="Address the node serves RPC on, e.g. 'tcp://127.0.0.1:9876' "
                                  "or 'inproc://n1'. Empty: no RPC server.")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = setting(
        "INFO", doc="Logging threshold of the node's logger.",
        check=one_of("DEBUG", "INFO", "WARNING", "ERROR"))
    plugins: PluginsConfig = setting(factory=PluginsConfig, doc="See [plugins].")
    transport: TransportConfig = setting(factory=TransportConfig, doc="See [transport].")
    store: StoreConfig = setting(factory=StoreConfig, doc="See [store].")
    broker: BrokerConfig = setting(factory=BrokerConfig, doc="See [broker].")
    controller: ControllerConfig = setting(factory=ControllerConfig, doc="See [controller].")
