"""``triomq admin query-msg-by-id`` and ``query-msg-by-key``: find stored messages.

::

    triomq admin query-msg-by-id -n 127.0.0.1:9876 -i 7F00000100002A9F0000000000000F2A
    triomq admin query-msg-by-key -n 127.0.0.1:9876 -t TopicTest -k order-1

- by id: the id is RocketMQ's offset message id (``SendResult``'s
  ``offsetMsgId``): the store host's address and port and the commit-log
  offset, in hex. VIEW_MESSAGE_BY_ID (33) goes to that broker for the
  record at that offset. With ``-t``, the id may also be a client-side id
  (``msgId``, the ``UNIQ_KEY``), looked up first through the topic's index
  (QUERY_MESSAGE with ``_UNIQUE_KEY_QUERY``), as ``mqadmin queryMsgById``
  falls back to;
- by key: QUERY_MESSAGE (12) to each broker group of the topic (its
  master, else a replica): every message whose ``KEYS`` holds the key, in
  the time range given (default: all), at most ``--max-num`` per group.

Messages print as ``triomq consume`` prints them, with the store host, the
store time and every property (``--json``: their JSON form). Nothing found
exits 1.
"""

from __future__ import annotations

import argparse
import json
from typing import TextIO

from triomq.broker.core.headers import HeaderError, parse_offset_msg_id
from triomq.cli_address import Unreachable
from triomq.cli_credentials import add_credential_options
from triomq.client import BrokerError, MessageDecodeError, MessageExt
from triomq.client.core.codes import ResponseCode
from triomq.client.core.message import decode_messages
from triomq.client.instance import ClientInstance, dial_address
from triomq.plugins.client_cli.message_text import message_json, message_line
from triomq.plugins.client_cli.session import (
    CommandError,
    add_common_options,
    client_instance,
    cluster_info,
    one_line,
    route_of,
    run,
)
from triomq.rpc import RpcError
from triomq.runtime import Node
from triomq.store_cli import DEFAULT_WIDTH

__all__ = ["add_query_commands", "query_by_id", "query_by_key"]

QUERY_MESSAGE = 12
VIEW_MESSAGE_BY_ID = 33
#: RocketMQ's ``MixAll.UNIQUE_MSG_QUERY_FLAG``: the key is a client-side message id.
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"
#: mqadmin queryMsgByKey's maxNum.
DEFAULT_MAX_NUM = 64
_LONG_MAX = 2**63 - 1


def add_query_commands(commands: argparse._SubParsersAction) -> None:
    """Add ``triomq admin query-msg-by-id`` and ``query-msg-by-key``."""

    def common(p: argparse.ArgumentParser) -> None:
        add_common_options(p)
        p.add_argument("--width", type=int, default=DEFAULT_WIDTH,
                       help=f"characters of a body shown (default {DEFAULT_WIDTH})")
        add_credential_options(p)

    p = commands.add_parser(
        "query-msg-by-id", help="a message by its offset message id",
        description="Decode the store host and commit-log offset from an offset message id "
                    "(offsetMsgId) and read the message there. With -t, a client-side id "
                    "(msgId) is looked up in the topic's index first.")
    common(p)
    p.add_argument("-i", "--msg-id", required=True, help="offsetMsgId (or msgId with -t)")
    p.add_argument("-t", "--topic", help="the message's topic, to find a client-side id too")
    p.set_defaults(func=lambda args: run(query_by_id, args, sign=True))

    p = commands.add_parser(
        "query-msg-by-key", help="the messages of a topic with a key",
        description="Ask every broker group of the topic for the messages indexed under "
                    "the key.")
    common(p)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-k", "--key", required=True)
    p.add_argument("--max-num", type=int, default=DEFAULT_MAX_NUM,
                   help=f"at most this many messages per broker group "
                        f"(default {DEFAULT_MAX_NUM})")
    p.add_argument("--begin-timestamp", type=int, default=0, metavar="MS",
                   help="only messages stored at or after this time (ms since the epoch)")
    p.add_argument("--end-timestamp", type=int, default=_LONG_MAX, metavar="MS",
                   help="only messages stored at or before this time (ms since the epoch)")
    p.set_defaults(func=lambda args: run(query_by_key, args, sign=True))


async def _by_key(instance: ClientInstance, topic: str, key: str, *, max_num: int,
                  begin: int = 0, end: int = _LONG_MAX,
                  unique: bool = False) -> list[MessageExt]:
    route = await route_of(instance, topic)
    fields = {"topic": topic, "key": key, "maxNum": str(max_num),
              "beginTimestamp": str(begin), "endTimestamp": str(end)}
    if unique:
        fields[UNIQUE_KEY_QUERY] = "true"
    found: list[MessageExt] = []
    for name in sorted({b.broker_name for b in route.broker_datas}):
        address = instance.subscribe_address(name)
        if address is None:
            continue
        try:
            answer = await instance.invoke(address, QUERY_MESSAGE, fields)
            if answer.code == ResponseCode.QUERY_NOT_FOUND:
                continue
            if answer.code != ResponseCode.SUCCESS:
                raise BrokerError(address, answer.code, answer.remark)
            found += decode_messages(answer.body, name)
        except RpcError as exc:
            raise Unreachable("broker", {address: exc}) from None
        except (BrokerError, MessageDecodeError) as exc:
            raise CommandError(f"query of {name} ({address}): {one_line(exc)}") from None
    return sorted(found, key=lambda m: (m.store_timestamp, m.broker_name, m.commit_log_offset))


async def _broker_name(instance: ClientInstance, address: str) -> str:
    """The broker group ``address`` (``host:port``) belongs to, "" if none says so."""
    info = await cluster_info(instance)
    return next((name for name, broker in sorted(info.broker_addr_table.items())
                 if address in broker.broker_addrs.values()), "")


async def _view(instance: ClientInstance, msg_id: str) -> list[MessageExt]:
    try:
        (host, port), offset = parse_offset_msg_id(msg_id)
    except HeaderError as exc:
        raise CommandError(f"{msg_id!r} is not an offset message id ({exc.args[-1]}); "
                           "for a client-side id give its topic with -t") from None
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    name = await _broker_name(instance, address)
    try:
        answer = await instance.invoke(dial_address(address), VIEW_MESSAGE_BY_ID,
                                       {"offset": str(offset)})
    except RpcError as exc:
        raise Unreachable("broker", {dial_address(address): exc}) from None
    if answer.code != ResponseCode.SUCCESS:
        return []  # no record starts at that offset (RocketMQ answers SYSTEM_ERROR)
    try:
        return decode_messages(answer.body, name)
    except MessageDecodeError as exc:
        raise CommandError(f"the message at {address} offset {offset}: {exc}") from None


async def query_by_id(args: argparse.Namespace, node: Node, out: TextIO) -> int:
    """Print the message the id names; the exit code."""
    instance = client_instance(node, args)
    found: list[MessageExt] = []
    if args.topic:
        found = await _by_key(instance, args.topic, args.msg_id, max_num=DEFAULT_MAX_NUM,
                              unique=True)
    if not found:
        found = await _view(instance, args.msg_id)
    return show_messages(args, found, out, f"no message with id {args.msg_id}")


async def query_by_key(args: argparse.Namespace, node: Node, out: TextIO) -> int:
    """Print the topic's messages with the key; the exit code."""
    found = await _by_key(client_instance(node, args), args.topic, args.key,
                          max_num=args.max_num, begin=args.begin_timestamp,
                          end=args.end_timestamp)
    return show_messages(args, found, out, f"no message of topic {args.topic} with key {args.key}")


def show_messages(args: argparse.Namespace, found: list[MessageExt], out: TextIO,
                  nothing: str) -> int:
    """Print ``found`` (``--json``: one document; ``nothing`` its error when empty);
    the exit code: 1 when nothing was found."""
    if args.json:
        document = {"messages": [message_json(m) for m in found]}
        print(json.dumps(document if found else {**document, "error": nothing}, indent=2),
              file=out)
    else:
        for message in found:
            print(message_line(message, args.width, stored=True), file=out)
        if not found:
            print(f"error: {nothing}", file=out)
    return 0 if found else 1
