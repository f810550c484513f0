"""``triomq admin broker-status``: one broker's role, offsets and replication.

::

    triomq admin broker-status -b 127.0.0.1:10911

Asks the broker itself (GET_BROKER_RUNTIME_INFO, RocketMQ's ``mqadmin
brokerStatus``) and prints its KVTable as ``key : value`` lines sorted by
key, as mqadmin does, then the master's HA connections as a table (each
slave's address, acked offset, how far behind it is, whether it is in the
SyncStateSet). The keys are listed in ``triomq.broker.admin.runtime_info``.
``--json`` prints the KVTable as the broker sent it (``{"table": {...}}``).
"""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

from triomq.cli_address import Unreachable, dial_address
from triomq.cli_credentials import add_credential_options
from triomq.cli_table import table
from triomq.client.core.errors import BrokerError
from triomq.plugins.client_cli.session import CommandError, add_common_options, one_line, run
from triomq.protocol.route import RouteDataError, loads
from triomq.rpc import RpcError
from triomq.runtime import Node

__all__ = ["add_broker_status_command", "broker_status", "status_text"]

GET_BROKER_RUNTIME_INFO = 28
#: The KVTable key holding the master's slaves, shown as a table of its own.
HA_CONNECTIONS = "haConnectionInfo"


def add_broker_status_command(commands: argparse._SubParsersAction) -> None:
    """Add ``triomq admin broker-status``."""
    p = commands.add_parser(
        "broker-status", help="a broker's role, offsets, HA connections and SyncStateSet",
        description="Ask a broker for its runtime information (GET_BROKER_RUNTIME_INFO): "
                    "role, broker name and id, master epoch, commit-log offsets, confirm "
                    "offset, HA connections and SyncStateSet.")
    p.add_argument("-b", "--broker-addr", required=True, metavar="ADDRESS",
                   help="the broker, host:port")
    add_common_options(p, namesrv=False, json_help="the KVTable as the broker sent it")
    add_credential_options(p)
    p.set_defaults(func=lambda args: run(broker_status, args, sign=True))


def status_text(kv: dict[str, str]) -> str:
    """mqadmin's ``key : value`` lines, then the HA connections' table if any."""
    width = max((len(k) for k in kv), default=0)
    lines = [f"{key:<{width}} : {value}" for key, value in sorted(kv.items())
             if key != HA_CONNECTIONS]
    try:
        slaves: list[dict[str, Any]] = json.loads(kv.get(HA_CONNECTIONS) or "[]")
    except ValueError:
        slaves = []
        lines.append(f"{HA_CONNECTIONS:<{width}} : {kv[HA_CONNECTIONS]}")
    if slaves:
        lines += ["", "HA connections:",
                  table(("brokerId", "slaveAckOffset", "diff", "inSync"),
                        [(s.get("brokerId"), s.get("slaveAckOffset"), s.get("diff"),
                          s.get("inSync")) for s in slaves])]
    return "\n".join(lines)


async def broker_status(args: argparse.Namespace, node: Node, out: TextIO) -> int:
    """Print the broker's runtime information; the exit code."""
    address = args.broker_addr
    dial = dial_address(address)
    try:
        answer = await node.rpc.invoke(dial, GET_BROKER_RUNTIME_INFO, {}, timeout=args.timeout)
    except RpcError as exc:
        raise Unreachable("broker", {dial: exc}) from None
    if answer.code != 0:
        error = one_line(BrokerError(address, answer.code, answer.remark))
        print(json.dumps({"error": error}) if args.json else f"error: {error}", file=out)
        return 1
    try:
        document = loads(answer.body, "runtime info")
        kv = {str(k): str(v) for k, v in document["table"].items()}
    except (RouteDataError, KeyError, TypeError, AttributeError) as exc:
        raise CommandError(f"broker {address}: not a KVTable: {one_line(exc)}") from None
    print(json.dumps({"table": kv}, indent=2, sort_keys=True) if args.json
          else status_text(kv), file=out)
    return 0
