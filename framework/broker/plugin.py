"""The broker role as a plugin: entry point ``broker = "framework.broker.plugin"``.

A node whose role is ``"broker"`` runs ``framework.broker.service.broker_service``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from framework.broker.service import broker_service
from framework.hookspecs import Service, hookimpl

if TYPE_CHECKING:
    from framework.runtime import Node


@hookimpl
def triomq_node_services(node: Node) -> Mapping[str, Service] | None:
    """The broker service, for broker nodes only."""
    if node.role != "broker":
        return None
    return {"broker": broker_service}
