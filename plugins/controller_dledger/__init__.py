"""The DLedger-style controller as a plugin (entry point ``controller_dledger``).

- ``triomq_node_services``: a node with role ``"controller"`` runs the
  controller service (``triomq.controller.service``), and so does a
  ``"nameserver"`` node whose ``[controller]`` section sets
  ``enable_controller_in_namesrv``.
- ``triomq_roles``: ``"controller"`` and ``"nameserver"``.
- ``triomq_config_sections``: ``[controller]``.
- ``triomq_election_policy``: ``"default"``, RocketMQ's policy.
- ``triomq_add_admin_commands``: controller commands of ``triomq admin`` (``cli``).

Its configuration is ``node.config.controller``
(``triomq.controller.core.config.ControllerConfig``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from triomq.controller import default_election_policy
from triomq.controller.core.config import ControllerConfig
from triomq.controller.service import controller_of, controller_service
from triomq.hookspecs import Service, hookimpl
from triomq.plugins.controller_dledger.cli import add_admin_commands

if TYPE_CHECKING:
    from triomq.runtime import Node

__all__ = ["controller_of", "controller_service"]


@hookimpl
def triomq_node_services(node: Node) -> Mapping[str, Service] | None:
    """The controller service, on controllers and on nameservers that embed one."""
    if node.role == "controller" or (
            node.role == "nameserver" and node.config.controller.enable_controller_in_namesrv):
        return {"controller": controller_service}
    return None


@hookimpl
def triomq_roles() -> Iterable[str]:
    """A controller node; a nameserver node, which embeds one when its section says so."""
    return ("controller", "nameserver")


@hookimpl
def triomq_config_sections() -> Mapping[str, type]:
    """``[controller]``."""
    return {"controller": ControllerConfig}


@hookimpl
def triomq_election_policy() -> Mapping[str, Callable[..., Any]]:
    """RocketMQ's default election policy."""
    return {"default": default_election_policy}


@hookimpl
def triomq_add_admin_commands(commands: argparse._SubParsersAction) -> None:
    """Controller commands of ``triomq admin``."""
    add_admin_commands(commands)
