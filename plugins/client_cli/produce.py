"""``triomq produce``: send messages to a topic, as RocketMQ's quickstart producer does.

::

    triomq produce -n 127.0.0.1:9876 -t TopicTest --count 10 --tags TagA --keys "order-{i}"
    triomq produce -n 127.0.0.1:9876 -t TopicTest --delay-level 3    # delivered 10 s later
    triomq produce -n 127.0.0.1:9876 -t TopicTest --deliver-at 2026-12-02T18:00:00Z

Each message is sent with ``triomq.client.Producer`` (one at a time, routed
by the name servers, retried within ``--timeout`` through a failover)
and its ``SendResult`` printed as the quickstart prints it: status, msgId,
offsetMsgId, queue and queue offset. Above ``SUMMARY_ABOVE`` messages (or
with ``--summary``) one summary replaces the per-message lines. ``{i}`` in
``--body``, ``--keys`` and ``--tags`` is the message's index (0, 1, ...).
``--delay-level N`` sends delayed messages (RocketMQ's ``DELAY``
property: the broker delivers them once level N's delay has passed).
``--deliver-at TIME`` sends timer messages (RocketMQ 5's
``TIMER_DELIVER_MS``: the broker's timer wheel delivers them at that time):
an ISO 8601 time (without a zone: UTC) or epoch milliseconds.

Exit 0 when every send was answered, 1 when any failed (each failure is
printed with its reason, in ``--json`` too), 2 when nothing could be sent
(no name server answered, the topic is unknown).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
from typing import Any, TextIO

import trio

from triomq.cli_address import Unreachable
from triomq.cli_connection import add_client_config_option
from triomq.client import ClientError, Message, Producer
from triomq.plugins.client_cli.message_text import send_result_json, send_result_line
from triomq.plugins.client_cli.session import (
    CommandError,
    add_common_options,
    namesrv_addresses,
    one_line,
    run,
)
from triomq.rpc import RpcError
from triomq.runtime import Node

__all__ = ["SUMMARY_ABOVE", "add_produce_command", "deliver_at_ms", "message_body", "produce"]

#: Message counts above which only a summary is printed.
SUMMARY_ABOVE = 100
#: The quickstart's body, with the message's index.
DEFAULT_BODY = "Hello triomq {i}"


def add_produce_command(subparsers: argparse._SubParsersAction) -> None:
    """Add ``triomq produce``."""
    p = subparsers.add_parser(
        "produce", help="send messages to a topic (RocketMQ's quickstart producer)",
        description="Send messages to a topic through the name servers' routes and print "
                    "each SendResult (status, msgId, queue, queue offset). {i} in --body, "
                    "--keys and --tags is the message's index. Exit 1 if any send failed.")
    add_common_options(p, json_help="one JSON document with every result for scripts")
    add_client_config_option(p)  # TLS settings; sends and pulls are not signed
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("--count", type=int, default=1, help="messages to send (default 1)")
    p.add_argument("--body", default=DEFAULT_BODY,
                   help=f"the body text (default {DEFAULT_BODY!r})")
    p.add_argument("--size", type=int, metavar="BYTES",
                   help="body size in bytes: the body text repeated and cut to it")
    p.add_argument("--tags", help="the messages' tag")
    p.add_argument("--keys", help="the messages' keys, separated by spaces")
    p.add_argument("--delay-level", type=int, default=0, metavar="N",
                   help="delay level (1..18 with the broker's default message_delay_level: "
                        "1s 5s 10s 30s 1m ... 2h): the broker delivers the messages once "
                        "its delay has passed (default 0: at once)")
    p.add_argument("--deliver-at", metavar="TIME",
                   help="send timer messages the broker delivers at TIME: an ISO 8601 time "
                        "(2026-12-02T18:00:00Z; without a zone, UTC) or epoch milliseconds "
                        "(RocketMQ 5's TIMER_DELIVER_MS; at most the broker's "
                        "timer_max_delay_sec ahead, 3 days by default)")
    p.add_argument("-p", "--producer-group", default="triomq-cli-producer",
                   help="producer group (default triomq-cli-producer)")
    p.add_argument("--summary", action="store_true",
                   help=f"print a summary only (the default above {SUMMARY_ABOVE} messages)")
    p.set_defaults(func=lambda args: run(produce, args))


def message_body(text: str, index: int, size: int | None) -> bytes:
    """``text`` with ``{i}`` as ``index``, UTF-8; with ``size``, repeated and cut to it."""
    data = text.replace("{i}", str(index)).encode()
    if size is None:
        return data
    unit = data or b"x"
    return (unit * (size // len(unit) + 1))[:size]


def deliver_at_ms(text: str) -> int:
    """``--deliver-at``'s epoch ms: digits are epoch ms, else an ISO 8601 time (UTC
    without a zone); ``CommandError`` otherwise."""
    if text.isascii() and text.isdigit():
        return int(text)
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise CommandError(f"--deliver-at: {text[:60]!r} is neither an ISO 8601 time "
                           "nor epoch milliseconds") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return int(when.timestamp() * 1000)


def _with_index(value: str | None, index: int) -> str | None:
    return value.replace("{i}", str(index)) if value is not None else None


async def produce(args: argparse.Namespace, node: Node, out: TextIO) -> int:
    """Send ``args.count`` messages and print their results; the exit code."""
    if args.count < 0 or (args.size is not None and args.size < 0) or args.delay_level < 0:
        raise CommandError("--count, --size and --delay-level cannot be negative")
    deliver_ms = deliver_at_ms(args.deliver_at) if args.deliver_at is not None else 0
    summary_only = args.summary or args.count > SUMMARY_ABOVE
    producer = Producer(args.producer_group, namesrv_addresses(args),
                        send_msg_timeout=args.timeout)
    results: list[dict[str, Any]] = []
    statuses: collections.Counter[str] = collections.Counter()
    failures: list[dict[str, Any]] = []
    async with producer.start(node.connect):
        try:
            # The route first: no name server or an unknown topic is one error, not N.
            await producer.fetch_publish_message_queues(args.topic)
        except RpcError as exc:
            # The client asked each name server in turn; this is the last one's reason.
            raise Unreachable("name server",
                              dict.fromkeys(namesrv_addresses(args), exc)) from None
        except ClientError as exc:
            raise CommandError(one_line(exc)) from None
        started = trio.current_time()
        for index in range(args.count):
            message = Message(args.topic, message_body(args.body, index, args.size),
                              tags=_with_index(args.tags, index),
                              keys=_with_index(args.keys, index),
                              delay_time_level=args.delay_level,
                              deliver_time_ms=deliver_ms)
            try:
                result = await producer.send(message)
            except (RpcError, ClientError) as exc:
                failures.append({"index": index, "error": one_line(exc)})
                results.append(failures[-1])
                if not summary_only and not args.json:
                    print(f"SendFailed [index={index}, error={one_line(exc)}]", file=out)
                continue
            statuses[result.send_status.value] += 1
            results.append({"index": index, **send_result_json(result)})
            if not summary_only and not args.json:
                print(send_result_line(result), file=out)
        elapsed = trio.current_time() - started
    summary = {"topic": args.topic, "sent": sum(statuses.values()), "failed": len(failures),
               "statuses": dict(statuses), "seconds": round(elapsed, 3)}
    if args.json:
        # A summary still names every failure and its reason.
        detail = {"failures": failures} if summary_only else {"results": results}
        print(json.dumps({**summary, **detail}, indent=2), file=out)
    elif summary_only:
        print(_summary_text(summary, failures), file=out)
    return 1 if failures else 0


def _summary_text(summary: dict[str, Any], failures: list[dict[str, Any]]) -> str:
    rate = summary["sent"] / summary["seconds"] if summary["seconds"] > 0 else 0.0
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(summary["statuses"].items())) or "none"
    lines = [f"sent {summary['sent']} message(s) to {summary['topic']} in "
             f"{summary['seconds']:.3f} s ({rate:.0f} msg/s): {statuses}; "
             f"failed {summary['failed']}"]
    if failures:
        first = failures[0]
        lines.append(f"first failure: message {first['index']}: {first['error']}")
    return "\n".join(lines)
