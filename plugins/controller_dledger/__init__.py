"""The DLedger-style controller as a plugin (entry point ``controller_dledger``).

- ``triomq_node_services``: a node with role ``"controller"`` runs the
  controller service (``service``), and so does a ``"nameserver"`` node
  whose ``[controller]`` section sets ``enable_controller_in_namesrv``.
- ``triomq_election_policy``: ``"default"``, RocketMQ's policy.
- ``triomq_add_cli_commands``: ``triomq admin ...`` (``cli``).

Its configuration is ``node.config.controller``
(``framework.controller.config.ControllerConfig``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from framework.controller import default_election_policy
from framework.hookspecs import Service, hookimpl
from plugins.controller_dledger.cli import add_admin_commands
from plugins.controller_dledger.service import controller_of, controller_service

if TYPE_CHECKING:
    from framework.runtime import Node

__all__ = ["controller_of", "controller_service"]


@hookimpl
def triomq_node_services(node: Node) -> Mapping[str, Service] | None:
    """The controller service, on controllers and on nameservers that embed one."""
    if node.role == "controller" or (
            node.role == "nameserver" and node.config.controller.enable_controller_in_namesrv):
        return {"controller": controller_service}
    return None


@hookimpl
def triomq_election_policy() -> Mapping[str, Callable[..., Any]]:
    """RocketMQ's default election policy."""
    return {"default": default_election_policy}


@hookimpl
def triomq_add_cli_commands(subparsers: argparse._SubParsersAction) -> None:
    """``triomq admin``: controller administration."""
    add_admin_commands(subparsers)
