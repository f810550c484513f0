"""Topic and route commands of ``triomq admin``, with mqadmin's names and flags.

::

    triomq admin update-topic -n 10.0.0.1:9876 -c DefaultCluster -t orders -r 8 -w 8
    triomq admin topic-list -n 10.0.0.1:9876
    triomq admin topic-route -n 10.0.0.1:9876 -t orders
    triomq admin cluster-list -n 10.0.0.1:9876
    triomq admin delete-topic -n 10.0.0.1:9876 -c DefaultCluster -t orders

``-n`` takes name-server addresses as RocketMQ does (``host:port``, several
joined by ``;``; an address with a scheme, ``tcp://host:port`` or
``inproc://ns``, works too; ``triomq.cli_address``); the first that answers
is used. No name server answering, or a broker that does not answer, is
``triomq.cli_address.Unreachable`` (one line, exit 2). ``update-topic -c`` creates or updates the
topic on every master of the cluster (the name server's cluster info says
which), ``-b`` on one broker. Tables by default, ``--json`` for scripts. A
refusal prints its code and remark and exits 1. ``--access-key`` and
``--secret-key`` (or ``TRIOMQ_ACCESS_KEY`` and ``TRIOMQ_SECRET_KEY``) sign
the requests, for nodes that require admin credentials.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TextIO

import trio

from triomq import open_node
from triomq.cli_address import Unreachable, dial_address, dial_addresses
from triomq.cli_connection import client_config
from triomq.cli_credentials import add_credential_options, sign_requests
from triomq.cli_table import table as text_table
from triomq.errors import TriomqError
from triomq.namesrv.core.processor import RequestCode
from triomq.plugin_manager import PluginManager
from triomq.protocol.remoting import RemotingCommand
from triomq.protocol.route import MASTER_ID, ClusterInfo, RouteDataError, TopicRouteData, loads
from triomq.rpc import RpcClient, RpcError

__all__ = ["add_admin_commands", "run_admin"]

UPDATE_AND_CREATE_TOPIC = 17
DELETE_TOPIC_IN_BROKER = 215


class AdminError(TriomqError):
    """A request answered with a code other than SUCCESS."""

    def __init__(self, what: str, code: int, remark: str | None) -> None:
        self.code = code
        super().__init__(f"{what}: refused with code {code}: {remark or ''}".rstrip(": "))


def add_admin_commands(commands: argparse._SubParsersAction) -> None:
    """Add the topic and route commands of ``triomq admin``."""

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        p = commands.add_parser(name, help=help_text)
        p.add_argument("-n", "--namesrv-addr", required=True, metavar="ADDRESSES",
                       help="name servers, host:port or tcp://host:port, joined by ';'")
        p.add_argument("--json", action="store_true", help="one JSON document for scripts")
        p.add_argument("--timeout", type=float, default=5.0,
                       help="seconds a request may wait for its answer (default 5)")
        add_credential_options(p)
        p.set_defaults(func=_run_sync)
        return p

    p = command("update-topic", "create or update a topic on a cluster's masters or a broker")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("-c", "--cluster", help="every master of this cluster")
    where.add_argument("-b", "--broker-addr", help="this broker (host:port)")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-r", "--read-queue-nums", type=int, default=8)
    p.add_argument("-w", "--write-queue-nums", type=int, default=8)
    p.add_argument("-p", "--perm", type=int, default=6, help="2 write, 4 read, 6 both")
    p.add_argument("-o", "--order", action="store_true", help="an ordered topic")
    command("topic-list", "every topic the name server routes")
    p = command("topic-route", "a topic's queues and the broker groups that hold them")
    p.add_argument("-t", "--topic", required=True)
    command("cluster-list", "every cluster, its broker groups and their members")
    p = command("delete-topic", "delete a topic from a cluster's masters and the name servers")
    p.add_argument("-c", "--cluster", required=True)
    p.add_argument("-t", "--topic", required=True)


def _run_sync(args: argparse.Namespace) -> int:
    async def main() -> int:
        async with open_node(client_config(args, "triomq-admin", log_level="INFO"),
                             plugins=PluginManager.discover()) as node:
            return await run_admin(args, node.rpc, sys.stdout)

    return trio.run(main)


class _Admin:
    def __init__(self, rpc: RpcClient, namesrv: str, timeout: float) -> None:
        self.rpc = rpc
        self.namesrvs = dial_addresses(namesrv, "-n")
        self.timeout = timeout

    async def call(self, address: str, code: int, fields: dict[str, str] | None = None,
                   what: str = "", kind: str = "broker") -> RemotingCommand:
        """One request to the ``kind`` node at ``address``; ``Unreachable`` if it does
        not answer, ``AdminError`` if it refuses."""
        try:
            answer = await self.rpc.invoke(address, code, fields or {}, timeout=self.timeout)
        except RpcError as exc:
            raise Unreachable(kind, {address: exc}) from None
        if answer.code != 0:
            raise AdminError(what or f"request {code} to {address}", answer.code, answer.remark)
        return answer

    async def namesrv(self, code: int, fields: dict[str, str] | None = None,
                      what: str = "") -> RemotingCommand:
        """Ask the name servers in turn; the first answer (a refusal is an answer)."""
        failures: dict[str, BaseException | str] = {}
        for address in self.namesrvs:
            try:
                return await self.call(address, code, fields, what, "name server")
            except Unreachable as exc:
                failures.update(exc.failures)
        raise Unreachable("name server", failures)

    async def cluster_info(self) -> ClusterInfo:
        answer = await self.namesrv(RequestCode.GET_BROKER_CLUSTER_INFO, what="cluster info")
        return ClusterInfo.decode(answer.body)

    async def masters(self, cluster: str) -> list[tuple[str, str]]:
        info = await self.cluster_info()
        names = sorted(info.cluster_addr_table.get(cluster, ()))
        if not names:
            raise AdminError(f"cluster {cluster}", -1, "the name server knows no such cluster")
        return [(name, info.broker_addr_table[name].broker_addrs[MASTER_ID]) for name in names
                if MASTER_ID in info.broker_addr_table[name].broker_addrs]


async def _update_topic(admin: _Admin, args: argparse.Namespace) -> tuple[Any, str]:
    fields = {"topic": args.topic, "defaultTopic": "TBW102",
              "readQueueNums": str(args.read_queue_nums),
              "writeQueueNums": str(args.write_queue_nums), "perm": str(args.perm),
              "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0",
              "order": "true" if args.order else "false"}
    targets = ([("-", args.broker_addr)] if args.broker_addr
               else await admin.masters(args.cluster))
    for _, address in targets:
        await admin.call(dial_address(address), UPDATE_AND_CREATE_TOPIC, fields,
                         f"update topic {args.topic} on {address}")
    rows = [(name, address, args.topic, args.read_queue_nums, args.write_queue_nums, args.perm)
            for name, address in targets]
    data = [{"brokerName": n, "brokerAddr": a} for n, a in targets]
    return ({"topic": args.topic, "updated": data},
            text_table(("brokerName", "brokerAddr", "topic", "read", "write", "perm"), rows))


async def _topic_list(admin: _Admin, args: argparse.Namespace) -> tuple[Any, str]:
    answer = await admin.namesrv(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
                                 what="topic list")
    topics = sorted(loads(answer.body, "topic list").get("topicList", []))
    return {"topicList": topics}, "\n".join(topics)


async def _topic_route(admin: _Admin, args: argparse.Namespace) -> tuple[Any, str]:
    answer = await admin.namesrv(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": args.topic},
                                 f"route of {args.topic}")
    route = TopicRouteData.decode(answer.body)
    queues = text_table(("brokerName", "readQueueNums", "writeQueueNums", "perm"),
                        [(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm)
                         for q in route.queue_datas])
    brokers = text_table(("cluster", "brokerName", "brokerId", "address"),
                         [(b.cluster, b.broker_name, i, a) for b in route.broker_datas
                          for i, a in sorted(b.broker_addrs.items())])
    return route.to_json(), queues + "\n\n" + brokers


async def _cluster_list(admin: _Admin, args: argparse.Namespace) -> tuple[Any, str]:
    info = await admin.cluster_info()
    rows = [(cluster, name, i, a)
            for cluster, names in sorted(info.cluster_addr_table.items())
            for name in sorted(names) if name in info.broker_addr_table
            for i, a in sorted(info.broker_addr_table[name].broker_addrs.items())]
    data = json.loads(info.encode())
    return data, text_table(("cluster", "brokerName", "brokerId", "address"), rows)


async def _delete_topic(admin: _Admin, args: argparse.Namespace) -> tuple[Any, str]:
    masters = await admin.masters(args.cluster)
    for _, address in masters:
        await admin.call(dial_address(address), DELETE_TOPIC_IN_BROKER, {"topic": args.topic},
                         f"delete topic {args.topic} on {address}")
    for address in admin.namesrvs:
        await admin.call(address, RequestCode.DELETE_TOPIC_IN_NAMESRV,
                         {"topic": args.topic, "clusterName": args.cluster},
                         f"delete topic {args.topic} on name server {address}", "name server")
    rows = [(name, address) for name, address in masters]
    return ({"topic": args.topic, "deletedFrom": [a for _, a in masters]},
            text_table(("brokerName", "brokerAddr"), rows))


_COMMANDS: dict[str, Callable[[_Admin, argparse.Namespace], Awaitable[tuple[Any, str]]]] = {
    "update-topic": _update_topic,
    "topic-list": _topic_list,
    "topic-route": _topic_route,
    "cluster-list": _cluster_list,
    "delete-topic": _delete_topic,
}


async def run_admin(args: argparse.Namespace, rpc: RpcClient, out: TextIO) -> int:
    """Run the parsed command over ``rpc``; the exit code. Raises ``Unreachable``
    when a node it needs does not answer, ``ConfigError`` for a malformed address
    or credential option (``triomq`` prints either, exit 2)."""
    try:
        admin = _Admin(rpc, args.namesrv_addr, args.timeout)
        sign_requests(rpc, args)
        data, text = await _COMMANDS[args.admin_command](admin, args)
    except (AdminError, RouteDataError) as exc:
        print(json.dumps({"error": str(exc)}) if args.json else f"error: {exc}", file=out)
        return 1
    print(json.dumps(data, indent=2, sort_keys=True) if args.json else text, file=out)
    return 0
