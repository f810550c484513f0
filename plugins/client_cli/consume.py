"""``triomq consume``: print a topic's messages as a consumer group receives them.

::

    triomq consume -n 127.0.0.1:9876 -t TopicTest -g cli-group --from-beginning --count 10

A ``triomq.client.PushConsumer`` of group ``-g`` subscribes to the topic
(``--tags``: RocketMQ's tag expression, ``TagA || TagB``) and each message
is printed as it arrives: topic, queue, queue offset, msgId, tags, keys,
born time and the body, escaped and cut at ``--width`` as ``triomq store
dump`` shows bodies (``--json``: one JSON object per line). A message is
acknowledged only once it is printed, so the group's offsets (stored on
the brokers when the consumer stops) never pass a message that was not
shown. ``--from-beginning`` starts a group that has no offset yet at each
queue's first message (RocketMQ's CONSUME_FROM_FIRST_OFFSET); a group
with offsets resumes where it was.

It runs until ``--count`` messages are printed or SIGINT (both exit 0
after the consumer has stored its offsets and left the group). A reader
that stops early (``| head``) ends it quietly too.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from typing import TextIO

import trio

from triomq.cli_connection import add_client_config_option
from triomq.client import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    MessageExt,
    MessageListenerConcurrently,
    PushConsumer,
)
from triomq.client.instance import ClientInstance
from triomq.plugins.client_cli.message_text import message_json, message_line
from triomq.plugins.client_cli.session import (
    CommandError,
    add_common_options,
    namesrv_addresses,
    route_of,
    run,
)
from triomq.runtime import Node
from triomq.store_cli import DEFAULT_WIDTH

__all__ = ["add_consume_command", "consume"]

#: Printed on standard error once the consumer has joined its group (as RocketMQ's
#: quickstart prints it): from then on SIGINT stops it cleanly.
STARTED = "Consumer Started."


def add_consume_command(subparsers: argparse._SubParsersAction) -> None:
    """Add ``triomq consume``."""
    p = subparsers.add_parser(
        "consume", help="print a topic's messages as a consumer group receives them",
        description="A push consumer of group -g that prints each message of the topic as "
                    "it arrives, until --count messages or SIGINT. The group's offsets are "
                    "stored on the brokers when it stops.")
    add_common_options(p, json_help="one JSON object per message and line")
    add_client_config_option(p)  # TLS settings; sends and pulls are not signed
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-g", "--group", required=True, help="the consumer group")
    p.add_argument("--tags", default="*", metavar="EXPR",
                   help="tag expression, e.g. 'TagA || TagB' (default *: every message)")
    p.add_argument("--from-beginning", action="store_true",
                   help="a group without offsets starts at each queue's first message "
                        "(default: only new messages)")
    p.add_argument("--count", type=int, help="stop after this many messages")
    p.add_argument("--width", type=int, default=DEFAULT_WIDTH,
                   help=f"characters of a body shown (default {DEFAULT_WIDTH})")
    p.set_defaults(func=lambda args: run(consume, args))


async def consume(args: argparse.Namespace, node: Node, out: TextIO,
                  err: TextIO = sys.stderr) -> int:
    """Consume and print until ``args.count`` messages or SIGINT; the exit code.

    Raises ``BrokenPipeError`` once the consumer has stopped if ``out``'s
    reader went away (``triomq``'s ``main`` ends quietly then).
    """
    if args.count is not None and args.count <= 0:
        raise CommandError("--count must be positive")
    namesrvs = namesrv_addresses(args)
    # The consumer itself only logs a route it cannot fetch and waits: check first.
    await route_of(ClientInstance(node.rpc, namesrvs, "triomq-cli", timeout=args.timeout),
                   args.topic)
    arrived, taken = trio.open_memory_channel[tuple[MessageExt, trio.Event]](0)
    acknowledged = 0
    counted_acknowledged = trio.Event()

    async def listener(messages: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        # Acknowledged once printed: a consumer stopped before that leaves it unconsumed.
        nonlocal acknowledged
        for message in messages:
            printed = trio.Event()
            await arrived.send((message, printed))
            await printed.wait()
        acknowledged += len(messages)
        if args.count is not None and acknowledged >= args.count:
            # The consumer moves the offset as this call returns, before any other
            # task runs: the stop that this wakes stores it.
            counted_acknowledged.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    where = (ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET if args.from_beginning
             else ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET)
    # One listener call at a time, so each queue's messages print in order.
    consumer = PushConsumer(args.group, namesrvs, consume_thread_max=1,
                            consume_from_where=where, timeout=args.timeout)
    consumer.subscribe(args.topic, args.tags)
    consumer.register_message_listener(MessageListenerConcurrently(listener))
    printed_count = 0
    reader_gone = False
    # SIGINT cancels only the printing: the consumer's block then ends as it does
    # after --count, and the consumer stops with its connections still open.
    printing = trio.CancelScope()
    async with trio.open_nursery() as nursery:
        if threading.current_thread() is threading.main_thread():
            await nursery.start(_stop_on_sigint, printing)
        async with consumer.start(node.connect):
            print(STARTED, file=err, flush=True)
            with printing:
                async for message, printed in taken:
                    line = (json.dumps(message_json(message)) if args.json
                            else message_line(message, args.width))
                    try:
                        print(line, file=out, flush=True)
                    except BrokenPipeError:
                        reader_gone = True
                        break
                    printed.set()
                    printed_count += 1
                    if args.count is not None and printed_count >= args.count:
                        await counted_acknowledged.wait()
                        break
            # After SIGINT: the listener calls of what was printed are returning;
            # the consumer stops (storing offsets) once they have, so nothing
            # printed stays unconsumed.
            with trio.move_on_after(args.timeout):
                while acknowledged < printed_count:
                    await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    if reader_gone:
        raise BrokenPipeError("standard output's reader went away")
    return 0


async def _stop_on_sigint(scope: trio.CancelScope, *,
                          task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                          ) -> None:
    """Cancel ``scope`` at SIGINT."""
    with trio.open_signal_receiver(signal.SIGINT) as signals:
        task_status.started()
        async for _ in signals:
            scope.cancel()
            return
