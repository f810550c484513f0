"""The broker role as a plugin: entry point ``broker = "triomq.plugins.broker"``.

A node whose role is ``"broker"`` runs ``triomq.broker.service.broker_service``;
its section is ``[broker]`` (``triomq.broker.config.BrokerConfig``). It
provides the escape bridge ``"local"``: a put through the node's own broker.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from triomq.broker.config import BrokerConfig
from triomq.broker.service import (
    broker_service,
    ha_listen_address,
    local_escape_bridge,
    vip_channel_address,
)
from triomq.hookspecs import EscapeBridgeFactory, Service, hookimpl

if TYPE_CHECKING:
    from triomq.runtime import Node


@hookimpl
def triomq_node_services(node: Node) -> Mapping[str, Service] | None:
    """The broker service, for broker nodes only; its HA port (and VIP channel, if
    on) is bound with the node's RPC port, before any service writes a file."""
    if node.role != "broker":
        return None
    node.declare_listen(ha_listen_address(node))
    vip_address = vip_channel_address(node)
    if vip_address is not None:
        node.declare_listen(vip_address)
    return {"broker": broker_service}


@hookimpl
def triomq_config_sections() -> Mapping[str, type]:
    """``[broker]``: the replica's identity, HA replication and puts."""
    return {"broker": BrokerConfig}


@hookimpl
def triomq_roles() -> Iterable[str]:
    """The broker role."""
    return ("broker",)


@hookimpl
def triomq_escape_bridge() -> Mapping[str, EscapeBridgeFactory]:
    """``"local"``: a master's own put flow."""
    return {"local": local_escape_bridge}
