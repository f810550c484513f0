"""What every client command shares: its common options, its node, its errors.

A command runs in a node of its own (no role, no listener: only the
transports, to dial name servers and brokers), started by ``run``. The
common options are ``-n`` (name servers as RocketMQ gives them,
``host:port`` joined by ``;``, or with a scheme), ``--json`` and
``--timeout``; admin commands also take ``--access-key``/``--secret-key``
(``triomq.cli_credentials``).

Errors: a command raises ``Unreachable`` (``triomq.cli_address``) when no
name server answers or a broker it must ask does not, and ``CommandError``
for what else stops it before it could do its work (an unknown topic, a
refusal); ``triomq``'s ``main`` prints either as one line and exits 2. A
command that ran but found nothing, or whose sends failed, says so and
exits 1 itself.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import TextIO

import trio

from triomq import open_node
from triomq.cli_address import Unreachable, dial_addresses
from triomq.cli_connection import client_config
from triomq.cli_credentials import sign_requests
from triomq.client.core.codes import RequestCode, ResponseCode
from triomq.client.core.errors import BrokerError
from triomq.client.instance import ClientInstance
from triomq.errors import TriomqError
from triomq.plugin_manager import PluginManager
from triomq.protocol.remoting import RemotingCommand
from triomq.protocol.route import ClusterInfo, RouteDataError, TopicRouteData
from triomq.rpc import RpcError
from triomq.runtime import Node

__all__ = ["CommandError", "add_common_options", "ask_namesrv", "client_instance", "cluster_info",
           "find_route", "namesrv_addresses", "one_line", "route_of", "run"]

#: A command's body: parsed arguments, the node it runs in, where it prints; the exit code.
Command = Callable[[argparse.Namespace, Node, TextIO], Awaitable[int]]


class CommandError(TriomqError):
    """The command could not do its work (exit 2)."""


def one_line(exc: BaseException) -> str:
    """An error's text on one line (some transports' messages span several)."""
    return " ".join(str(exc).split())


def add_common_options(parser: argparse.ArgumentParser, *, namesrv: bool = True,
                       json_help: str = "one JSON document for scripts") -> None:
    """``-n`` (unless ``namesrv`` is false), ``--json`` and ``--timeout``."""
    if namesrv:
        parser.add_argument("-n", "--namesrv-addr", required=True, metavar="ADDRESSES",
                            help="name servers, host:port or tcp://host:port, joined by ';'")
    parser.add_argument("--json", action="store_true", help=json_help)
    parser.add_argument("--timeout", type=float, default=5.0,
                        help="seconds a request may take (default 5)")


def namesrv_addresses(args: argparse.Namespace) -> list[str]:
    """The ``-n`` addresses, as the RPC client dials them; ``ConfigError`` if there are
    none or one is neither ``host:port`` nor ``scheme://location``."""
    return dial_addresses(args.namesrv_addr, "-n")


def client_instance(node: Node, args: argparse.Namespace) -> ClientInstance:
    """Routes and broker connections over the node's RPC client (signed if it signs)."""
    return ClientInstance(node.rpc, namesrv_addresses(args), "triomq-cli", timeout=args.timeout)


async def ask_namesrv(instance: ClientInstance, code: int, what: str,
                      fields: Mapping[str, str] | None = None, *,
                      absent: int | None = None) -> RemotingCommand | None:
    """Ask the name servers in turn; the first SUCCESS, or None for an answer
    ``absent``. ``Unreachable`` if none answers, ``CommandError`` for the first
    refusal."""
    failures: dict[str, BaseException | str] = {}
    for address in instance.namesrv_addrs:
        try:
            answer = await instance.invoke(address, code, fields or {})
        except RpcError as exc:
            failures[address] = exc
            continue
        if absent is not None and answer.code == absent:
            return None
        if answer.code != 0:
            refusal = BrokerError(address, answer.code, answer.remark)
            raise CommandError(f"{what}: {one_line(refusal)}")
        return answer
    raise Unreachable("name server", failures)


async def cluster_info(instance: ClientInstance) -> ClusterInfo:
    """The name servers' cluster info (GET_BROKER_CLUSTER_INFO); ``Unreachable`` if
    none answers, ``CommandError`` if the answer does not decode."""
    answer = await ask_namesrv(instance, RequestCode.GET_BROKER_CLUSTER_INFO,
                               "cluster info")
    assert answer is not None
    try:
        return ClusterInfo.decode(answer.body)
    except RouteDataError as exc:
        raise CommandError(f"cluster info: {exc}") from None


async def find_route(instance: ClientInstance, topic: str) -> TopicRouteData | None:
    """``topic``'s route from the name servers (kept by ``instance``), None if none
    knows the topic; ``Unreachable`` if none answers."""
    answer = await ask_namesrv(instance, RequestCode.GET_ROUTEINFO_BY_TOPIC,
                               f"route of topic {topic!r}", {"topic": topic},
                               absent=ResponseCode.TOPIC_NOT_EXIST)
    if answer is None:
        return None
    try:
        route = TopicRouteData.decode(answer.body)
    except RouteDataError as exc:
        raise CommandError(f"route of topic {topic!r}: {exc}") from None
    instance.learn_route(topic, route)
    return route


async def route_of(instance: ClientInstance, topic: str) -> TopicRouteData:
    """``topic``'s route from the name servers; ``Unreachable`` if none answers,
    ``CommandError`` if none knows the topic."""
    route = await find_route(instance, topic)
    if route is None:
        raise CommandError(f"topic {topic!r} is not known to the name servers")
    return route


def run(command: Command, args: argparse.Namespace, *, sign: bool = False,
        out: TextIO | None = None) -> int:
    """Run ``command`` in a node of its own; its exit code.

    With ``sign``, requests are signed with the admin credentials given
    (``triomq.cli_credentials``). The client library's warnings (a route
    not fetched, a broker not answering a heartbeat) go to standard error
    as one line each.
    """
    logging.basicConfig(level=logging.WARNING, format="triomq: %(name)s: %(message)s")

    async def main() -> int:
        async with open_node(client_config(args, "triomq-cli"),
                             plugins=PluginManager.discover()) as node:
            if sign:
                sign_requests(node.rpc, args)
            return await command(args, node, out or sys.stdout)

    try:
        return trio.run(main)
    except RpcError as exc:  # a broker or name server that a command asked directly
        raise CommandError(one_line(exc)) from None
