"""``triomq admin consumer-progress``: how far a consumer group is behind, per queue.

::

    triomq admin consumer-progress -n 127.0.0.1:9876 -g cli-group [-t TopicTest]

RocketMQ's ``mqadmin consumerProgress`` table: for each readable queue of
the topic (broker group, queue id), the broker offset (GET_MAX_OFFSET), the
group's stored offset (QUERY_CONSUMER_OFFSET, 0 when it has none, as
RocketMQ counts it) and their difference, then the total. RocketMQ gets the
table from one GET_CONSUME_STATS (208) per broker; triomq's brokers do not
serve it, so the table is built from the topic's route and two requests per
queue. Without ``-t`` the topics are those the group has offsets for on any
broker of the name servers' clusters (GET_ALL_CONSUMER_OFFSET): a group
that never stored an offset needs ``-t``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

import attrs

from triomq.cli_credentials import add_credential_options
from triomq.cli_table import table
from triomq.client import BrokerError, MessageQueue, NoRouteError
from triomq.client.allocate import subscribe_queues
from triomq.client.instance import ClientInstance, dial_address
from triomq.client.offset_store import OffsetStore
from triomq.plugins.client_cli.session import (
    CommandError,
    add_common_options,
    client_instance,
    cluster_info,
    one_line,
    route_of,
    run,
)
from triomq.protocol.route import MASTER_ID, RouteDataError, loads
from triomq.rpc import RpcError
from triomq.runtime import Node

__all__ = ["QueueProgress", "add_consumer_progress_command", "consumer_progress",
           "group_topics"]

#: RocketMQ's request code for a broker's whole consumer-offset table.
GET_ALL_CONSUMER_OFFSET = 43


@attrs.frozen
class QueueProgress:
    """One queue's row: the broker's offset, the group's, and the lag between them."""

    queue: MessageQueue
    broker_offset: int
    consumer_offset: int

    @property
    def diff(self) -> int:
        return max(0, self.broker_offset - self.consumer_offset)

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.queue.topic, "brokerName": self.queue.broker_name,
                "queueId": self.queue.queue_id, "brokerOffset": self.broker_offset,
                "consumerOffset": self.consumer_offset, "diff": self.diff}


def add_consumer_progress_command(commands: argparse._SubParsersAction) -> None:
    """Add ``triomq admin consumer-progress``."""
    p = commands.add_parser(
        "consumer-progress", help="a consumer group's offsets and lag per queue",
        description="For each queue of the topic (or of every topic the group has offsets "
                    "for): the broker offset, the group's offset and the difference, then "
                    "the total, as mqadmin consumerProgress prints them.")
    add_common_options(p)
    p.add_argument("-g", "--group", required=True, help="the consumer group")
    p.add_argument("-t", "--topic", help="only this topic (needed for a group that never "
                                         "stored an offset)")
    add_credential_options(p)
    p.set_defaults(func=lambda args: run(consumer_progress, args, sign=True))


def group_topics(offset_table: dict[str, Any], group: str) -> set[str]:
    """The topics ``group`` has offsets for in a ``consumerOffset.json``-shaped table."""
    return {key.rpartition("@")[0] for key in offset_table.get("offsetTable", {})
            if key.rpartition("@")[2] == group}


async def _topics_of_group(instance: ClientInstance, group: str) -> list[str]:
    info = await cluster_info(instance)
    topics: set[str] = set()
    for name, broker in sorted(info.broker_addr_table.items()):
        addresses = broker.broker_addrs
        address = (addresses.get(MASTER_ID) or addresses[min(addresses)]) if addresses else None
        if address is None:
            continue
        try:
            answer = await instance.checked(dial_address(address), GET_ALL_CONSUMER_OFFSET, {})
            topics |= group_topics(loads(answer.body, "consumer offsets"), group)
        except (RpcError, BrokerError, RouteDataError) as exc:
            raise CommandError(f"consumer offsets of {name} ({address}): "
                               f"{one_line(exc)}") from None
    if not topics:
        raise CommandError(f"group {group!r} has no stored offset on any broker: "
                           "name the topic with -t")
    return sorted(topics)


async def _progress(instance: ClientInstance, group: str, topic: str) -> list[QueueProgress]:
    route = await route_of(instance, topic)
    offsets = OffsetStore(instance, group)
    rows = []
    for queue in sorted(subscribe_queues(topic, route)):
        try:
            broker_offset = await offsets.max_offset(queue)
            consumer_offset = await offsets.fetch(queue, zero_if_not_found=False)
        except (RpcError, BrokerError, NoRouteError) as exc:
            raise CommandError(f"offsets of {topic} queue {queue.broker_name}:"
                               f"{queue.queue_id}: {one_line(exc)}") from None
        rows.append(QueueProgress(queue, broker_offset, consumer_offset or 0))
    return rows


async def consumer_progress(args: argparse.Namespace, node: Node, out: TextIO) -> int:
    """Print the group's progress table; the exit code."""
    instance = client_instance(node, args)
    topics = [args.topic] if args.topic else await _topics_of_group(instance, args.group)
    rows = [row for topic in topics for row in await _progress(instance, args.group, topic)]
    total = sum(row.diff for row in rows)
    if args.json:
        print(json.dumps({"consumerGroup": args.group, "offsetTable": [r.to_json() for r in rows],
                          "diffTotal": total}, indent=2), file=out)
        return 0
    print(table(("Topic", "Broker Name", "QID", "Broker Offset", "Consumer Offset", "Diff"),
                [(r.queue.topic, r.queue.broker_name, r.queue.queue_id, r.broker_offset,
                  r.consumer_offset, r.diff) for r in rows]), file=out)
    print(f"\nDiff Total: {total}", file=out)
    return 0
