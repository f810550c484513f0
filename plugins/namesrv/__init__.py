"""The name server as a plugin (entry point ``namesrv``): role ``"nameserver"``.

- ``triomq_roles``: ``"nameserver"``.
- ``triomq_config_sections``: ``[namesrv]`` (``triomq.namesrv.config.NamesrvConfig``).
- ``triomq_add_admin_commands``: ``triomq admin update-topic``, ``topic-list``,
  ``topic-route``, ``cluster-list``, ``delete-topic`` (``cli``).
- ``triomq_node_services``: a ``"nameserver"`` node runs the name-server
  service (``triomq.namesrv.service``), the pure route table of
  ``triomq.namesrv`` driven by trio. A nameserver may also embed a controller
  (``controller.enable_controller_in_namesrv``, the controller plugin).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from triomq.hookspecs import Service, hookimpl
from triomq.namesrv.config import NamesrvConfig
from triomq.namesrv.service import namesrv_of, namesrv_service
from triomq.plugins.namesrv.cli import add_admin_commands

if TYPE_CHECKING:
    from triomq.runtime import Node

__all__ = ["NamesrvConfig", "namesrv_of", "namesrv_service"]


@hookimpl
def triomq_roles() -> Iterable[str]:
    return ["nameserver"]


@hookimpl
def triomq_config_sections() -> Mapping[str, type]:
    return {"namesrv": NamesrvConfig}


@hookimpl
def triomq_node_services(node: Node) -> Mapping[str, Service] | None:
    if node.role == "nameserver":
        return {"namesrv": namesrv_service}
    return None


@hookimpl
def triomq_add_admin_commands(commands: argparse._SubParsersAction) -> None:
    add_admin_commands(commands)
