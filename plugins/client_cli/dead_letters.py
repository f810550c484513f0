"""``triomq admin dead-letters`` and ``resend-dead-letter``: a group's dead-letter queue.

::

    triomq admin dead-letters -n 127.0.0.1:9876 -g orders-consumer
    triomq admin resend-dead-letter -n 127.0.0.1:9876 -g orders-consumer -i 7F000001...

A consumer group's messages that failed ``max_reconsume_times`` times are in
its dead-letter topic ``%DLQ%<group>``:

- ``dead-letters`` reads every queue of that topic on each broker group of
  its route (PULL_MESSAGE as the group, from the queue's first message,
  neither storing an offset nor waiting), at most ``--max-num`` per queue,
  and prints them as ``query-msg-by-id`` does: each with its ids, its
  ``RETRY_TOPIC`` (the topic it was first sent to), ``ORIGIN_MESSAGE_ID``
  and retry count;
- ``resend-dead-letter`` finds the dead letter whose client-side id
  (``msgId``), offset message id or ``ORIGIN_MESSAGE_ID`` is ``-i`` and
  sends it again to its first topic, a new message with its body, flag,
  tags, keys and the user's properties (``ORIGIN_MESSAGE_ID`` kept); the
  dead letter stays where it is. It prints the send result.

No dead letter (or none with the id) exits 1.
"""

from __future__ import annotations

import argparse
import json
from typing import TextIO

from triomq.cli_address import Unreachable
from triomq.cli_credentials import add_credential_options
from triomq.client import BrokerError, ClientError, Message, MessageDecodeError, MessageExt
from triomq.client.core.codes import RequestCode
from triomq.client.core.pull import PullError, PullStatus, pull_header, read_pull_response
from triomq.client.instance import ClientInstance
from triomq.client.producer import Producer
from triomq.plugins.client_cli.message_text import (
    send_result_json,
    send_result_line,
)
from triomq.plugins.client_cli.query import show_messages
from triomq.plugins.client_cli.session import (
    CommandError,
    add_common_options,
    client_instance,
    find_route,
    namesrv_addresses,
    one_line,
    run,
)
from triomq.protocol.heartbeat import SubscriptionData
from triomq.protocol.message_queue import MessageQueue
from triomq.protocol.retry import PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_RETRY_TOPIC, dlq_topic
from triomq.rpc import RpcError
from triomq.runtime import Node
from triomq.store_cli import DEFAULT_WIDTH

__all__ = ["add_dead_letter_commands", "dead_letters", "resend_dead_letter",
           "resent_message"]

#: Dead letters read per queue unless told (mqadmin's queryMsgByKey maxNum).
DEFAULT_MAX_NUM = 64
# Properties a broker or client sets for itself: a resent message gets its own.
_STORE_PROPERTIES = frozenset({
    "TAGS", "KEYS", "DELAY", "WAIT", "UNIQ_KEY", "CLUSTER", "MIN_OFFSET", "MAX_OFFSET",
    PROPERTY_RETRY_TOPIC, "REAL_TOPIC", "REAL_QID", "RECONSUME_TIME", "MAX_RECONSUME_TIMES",
    "CONSUME_START_TIME", "TRAN_MSG", "PGROUP"})


def add_dead_letter_commands(commands: argparse._SubParsersAction) -> None:
    """Add ``triomq admin dead-letters`` and ``resend-dead-letter``."""
    p = commands.add_parser(
        "dead-letters", help="a consumer group's dead-letter messages",
        description="Read the group's dead-letter topic %%DLQ%%<group> on every broker "
                    "group of its route.")
    add_common_options(p)
    p.add_argument("-g", "--group", required=True, help="the consumer group")
    p.add_argument("--max-num", type=int, default=DEFAULT_MAX_NUM,
                   help=f"at most this many per queue (default {DEFAULT_MAX_NUM})")
    p.add_argument("--width", type=int, default=DEFAULT_WIDTH,
                   help=f"characters of a body shown (default {DEFAULT_WIDTH})")
    add_credential_options(p)
    p.set_defaults(func=lambda args: run(dead_letters, args, sign=True))

    p = commands.add_parser(
        "resend-dead-letter", help="send a dead letter again to its first topic",
        description="Find the group's dead letter with the id (msgId, offsetMsgId or "
                    "ORIGIN_MESSAGE_ID) and send it as a new message to the topic it was "
                    "first sent to.")
    add_common_options(p)
    p.add_argument("-g", "--group", required=True, help="the consumer group")
    p.add_argument("-i", "--msg-id", required=True, help="the dead letter's id")
    p.add_argument("-p", "--producer-group", default="triomq-cli-producer",
                   help="producer group (default triomq-cli-producer)")
    add_credential_options(p)
    p.set_defaults(func=lambda args: run(resend_dead_letter, args, sign=True))


async def _read_queue(instance: ClientInstance, address: str, group: str, queue: MessageQueue,
                      max_num: int) -> list[MessageExt]:
    everything = SubscriptionData.build(queue.topic, "*", 0)
    found: list[MessageExt] = []
    offset = 0
    while len(found) < max_num:
        fields = pull_header(group, queue, offset, min(32, max_num - len(found)), everything,
                             suspend_ms=None, with_subscription=True)
        answer = await instance.invoke(address, RequestCode.PULL_MESSAGE, fields)
        result = read_pull_response(answer.code, answer.remark, answer.ext_fields,
                                    answer.body, queue, everything)
        found += result.messages
        if result.status is PullStatus.NO_NEW_MSG or result.next_begin_offset <= offset:
            break
        offset = result.next_begin_offset
    return found[:max_num]


async def read_dead_letters(instance: ClientInstance, group: str, max_num: int
                            ) -> list[MessageExt]:
    """The dead letters of ``group`` on every broker group of its dead-letter topic."""
    topic = dlq_topic(group)
    route = await find_route(instance, topic)
    if route is None:
        return []
    found: list[MessageExt] = []
    queues = {q.broker_name: q.read_queue_nums for q in route.queue_datas}
    for name in sorted(queues):
        address = instance.subscribe_address(name)
        if address is None:
            continue
        for queue_id in range(queues[name]):
            queue = MessageQueue(topic, name, queue_id)
            try:
                found += await _read_queue(instance, address, group, queue, max_num)
            except RpcError as exc:
                raise Unreachable("broker", {address: exc}) from None
            except (PullError, MessageDecodeError) as exc:
                raise CommandError(f"dead letters of {name} ({address}): {one_line(exc)}"
                                   ) from None
    return found


async def dead_letters(args: argparse.Namespace, node: Node, out: TextIO) -> int:
    """Print the group's dead letters; the exit code."""
    found = await read_dead_letters(client_instance(node, args), args.group, args.max_num)
    return show_messages(args, found, out, f"group {args.group} has no dead letter")


def resent_message(letter: MessageExt) -> Message:
    """The new message a dead letter is sent again as, to its first topic."""
    topic = letter.properties.get(PROPERTY_RETRY_TOPIC)
    if not topic:
        raise CommandError(f"dead letter {letter.msg_id} names no first topic "
                           f"({PROPERTY_RETRY_TOPIC} property)")
    properties = {k: v for k, v in letter.properties.items() if k not in _STORE_PROPERTIES}
    return Message(topic, letter.body, tags=letter.tags, keys=letter.keys,
                   properties=properties, flag=letter.flag)


async def resend_dead_letter(args: argparse.Namespace, node: Node, out: TextIO) -> int:
    """Send the dead letter with the id again to its first topic; the exit code."""
    found = await read_dead_letters(client_instance(node, args), args.group, 2**31 - 1)
    wanted = args.msg_id
    letter = next((m for m in found if wanted in (
        m.msg_id, m.offset_msg_id, m.properties.get(PROPERTY_ORIGIN_MESSAGE_ID))), None)
    if letter is None:
        nothing = f"group {args.group} has no dead letter with id {wanted}"
        print(json.dumps({"error": nothing}, indent=2) if args.json else f"error: {nothing}",
              file=out)
        return 1
    message = resent_message(letter)
    producer = Producer(args.producer_group, namesrv_addresses(args),
                        send_msg_timeout=args.timeout)
    async with producer.start(node.connect):
        try:
            result = await producer.send(message)
        except RpcError as exc:
            raise Unreachable("broker", {message.topic: exc}) from None
        except (BrokerError, ClientError) as exc:
            raise CommandError(f"resend to {message.topic}: {one_line(exc)}") from None
    if args.json:
        print(json.dumps({"topic": message.topic, **send_result_json(result)}, indent=2),
              file=out)
    else:
        print(send_result_line(result), file=out)
    return 0
