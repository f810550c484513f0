"""``triomq admin consumer-progress``: how far a consumer group is behind, per queue.

::

    triomq admin consumer-progress -n 127.0.0.1:9876 -g cli-group [-t TopicTest]

What ``mqadmin consumerProgress`` does (``examineConsumeStats``): take the
route of the group's retry topic ``%RETRY%<group>`` (a master creates it
when a consumer of the group sends it a heartbeat), or, failing that and
with ``-t``, the topic's own route; send GET_CONSUME_STATS (208) to each
broker group in it (its master, any replica while it has none), and merge
the answers. Each row is a queue: the broker offset, the group's committed
offset and their difference (the lag; negative if the group stands past the
end), then the group's consume rate (messages a second over the last
minute) and the total lag. Without ``-t`` each broker answers for the topics
the group stored offsets for, so a group that never stored one needs ``-t``.
A broker that does not hold the ``-t`` topic adds nothing.
"""

from __future__ import annotations

import argparse
import json
from typing import TextIO

from triomq.cli_address import Unreachable
from triomq.cli_credentials import add_credential_options
from triomq.cli_table import table
from triomq.client import BrokerError
from triomq.client.core.codes import ResponseCode
from triomq.client.instance import ClientInstance, dial_address
from triomq.plugins.client_cli.session import (
    CommandError,
    add_common_options,
    client_instance,
    find_route,
    one_line,
    route_of,
    run,
)
from triomq.protocol.consume_stats import ConsumeStats
from triomq.protocol.route import MASTER_ID, RouteDataError
from triomq.protocol.topic_rules import RETRY_GROUP_TOPIC_PREFIX
from triomq.rpc import RpcError
from triomq.runtime import Node

__all__ = ["add_consumer_progress_command", "consumer_progress", "examine_consume_stats"]

#: RocketMQ's request code for a group's consume stats on one broker.
GET_CONSUME_STATS = 208


def add_consumer_progress_command(commands: argparse._SubParsersAction) -> None:
    """Add ``triomq admin consumer-progress``."""
    p = commands.add_parser(
        "consumer-progress", help="a consumer group's offsets and lag per queue",
        description="For each queue of the topic (or of every topic the group has offsets "
                    "for): the broker offset, the group's offset and the difference, then "
                    "the consume rate and the total, as mqadmin consumerProgress prints "
                    "them (GET_CONSUME_STATS to each broker of the group's retry topic).")
    add_common_options(p)
    p.add_argument("-g", "--group", required=True, help="the consumer group")
    p.add_argument("-t", "--topic", help="only this topic (needed for a group that never "
                                         "stored an offset)")
    add_credential_options(p)
    p.set_defaults(func=lambda args: run(consumer_progress, args, sign=True))


async def examine_consume_stats(instance: ClientInstance, group: str, topic: str | None
                                ) -> ConsumeStats:
    """The group's ``ConsumeStats`` merged over the brokers of its retry topic's route
    (else of ``topic``'s); ``CommandError`` if there is no such route, a broker
    cannot be asked or answers no queue."""
    retry = RETRY_GROUP_TOPIC_PREFIX + group
    route = await find_route(instance, retry)
    if route is None and topic:
        route = await route_of(instance, topic)
    if route is None:
        raise CommandError(f"group {group!r} has no route: no name server knows its retry "
                           f"topic {retry} (created when a consumer of the group sends a "
                           f"heartbeat); name the topic with -t")
    fields = {"consumerGroup": group, **({"topic": topic} if topic else {})}
    merged = ConsumeStats()
    for broker in sorted(route.broker_datas, key=lambda b: b.broker_name):
        addresses = broker.broker_addrs
        if not addresses:
            continue
        address = addresses.get(MASTER_ID) or addresses[min(addresses)]
        where = f"consume stats of {broker.broker_name} ({address})"
        try:
            answer = await instance.invoke(dial_address(address), GET_CONSUME_STATS, fields)
            if answer.code != ResponseCode.SUCCESS:
                raise BrokerError(address, answer.code, answer.remark)
            merged = merged.merge(ConsumeStats.decode(answer.body))
        except RpcError as exc:
            raise Unreachable("broker", {dial_address(address): exc}) from None
        except (BrokerError, RouteDataError) as exc:
            raise CommandError(f"{where}: {one_line(exc)}") from None
    if not merged.offset_table:
        if topic:
            raise CommandError(f"group {group!r} has no queue of topic {topic!r}: no broker "
                               f"of the route holds it, or its online consumers subscribe to "
                               f"other topics")
        raise CommandError(f"group {group!r} has no stored offset on any broker: "
                           "name the topic with -t")
    return merged


async def consumer_progress(args: argparse.Namespace, node: Node, out: TextIO) -> int:
    """Print the group's progress table; the exit code."""
    stats = await examine_consume_stats(client_instance(node, args), args.group, args.topic)
    rows = sorted(stats.offset_table.items())
    total = stats.total_diff()
    if args.json:
        print(json.dumps({
            "consumerGroup": args.group, "consumeTps": stats.consume_tps, "diffTotal": total,
            "offsetTable": [{**queue.to_json(), **wrapper.to_json(), "diff": wrapper.diff}
                            for queue, wrapper in rows]}, indent=2), file=out)
        return 0
    print(table(("Topic", "Broker Name", "QID", "Broker Offset", "Consumer Offset", "Diff"),
                [(q.topic, q.broker_name, q.queue_id, w.broker_offset, w.consumer_offset,
                  w.diff) for q, w in rows]), file=out)
    print(f"\nConsume TPS: {stats.consume_tps:.2f}", file=out)
    print(f"Diff Total: {total}", file=out)
    return 0
