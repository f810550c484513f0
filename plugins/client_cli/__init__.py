"""The client commands as a plugin (entry point ``client_cli``), on ``triomq.client``.

After RocketMQ's quickstart and ``mqadmin``:

- ``triomq_add_cli_commands``: ``triomq produce`` (``produce``) and
  ``triomq consume`` (``consume``);
- ``triomq_add_admin_commands``: ``triomq admin consumer-progress``
  (``progress``), ``query-msg-by-id`` and ``query-msg-by-key`` (``query``),
  ``broker-status`` (``broker_status``, served by the broker's
  GET_BROKER_RUNTIME_INFO, ``triomq.broker.admin.runtime_info``),
  ``dead-letters`` and ``resend-dead-letter`` (``dead_letters``: a group's
  ``%DLQ%<group>``), ``pending-delayed``, ``pending-half`` and
  ``pending-popped`` (``pending``: what waits in the brokers' system topics,
  served by the broker's GET_PENDING_MESSAGES,
  ``triomq.broker.admin.pending_service``).

Each command runs in a node of its own (``session``); messages and send
results are shown by the pure ``message_text``. The kernel's ``triomq``
command knows none of this: it only calls the hooks.
"""

from __future__ import annotations

import argparse

from triomq.hookspecs import hookimpl
from triomq.plugins.client_cli.broker_status import add_broker_status_command
from triomq.plugins.client_cli.consume import add_consume_command
from triomq.plugins.client_cli.dead_letters import add_dead_letter_commands
from triomq.plugins.client_cli.pending import add_pending_commands
from triomq.plugins.client_cli.produce import add_produce_command
from triomq.plugins.client_cli.progress import add_consumer_progress_command
from triomq.plugins.client_cli.query import add_query_commands


@hookimpl
def triomq_add_cli_commands(subparsers: argparse._SubParsersAction) -> None:
    add_produce_command(subparsers)
    add_consume_command(subparsers)


@hookimpl
def triomq_add_admin_commands(commands: argparse._SubParsersAction) -> None:
    add_consumer_progress_command(commands)
    add_query_commands(commands)
    add_broker_status_command(commands)
    add_dead_letter_commands(commands)
    add_pending_commands(commands)
