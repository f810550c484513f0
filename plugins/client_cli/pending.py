"""``triomq admin pending-delayed``, ``pending-half`` and ``pending-popped``.

::

    triomq admin pending-delayed -n 127.0.0.1:9876
    triomq admin pending-half -n 127.0.0.1:9876 -b broker-a
    triomq admin pending-popped -n 127.0.0.1:9876 --json

What waits in each broker group's system topics, asked of its master (the
name servers' cluster info names the groups and their masters) with
GET_PENDING_MESSAGES, triomq's own admin request
(``triomq.broker.admin.pending_service``), which the broker answers by the
rules of the services that deliver those messages:

- ``pending-delayed``: per delay level, how many messages of
  ``SCHEDULE_TOPIC_XXXX`` the schedule has not delivered yet and, up to
  ``--max-num`` per level, each with its real topic and queue, ids and
  delivery time; then the timer messages of ``rmq_sys_wheel_timer`` after the
  timer checkpoint that are not delivered yet, the same way;
- ``pending-half``: the transactions still open (half messages no op record
  ended), each with its producer group, transaction id, real topic, age and
  check count;
- ``pending-popped``: the popped messages not acked yet, per consumer
  group, topic and queue, and each checkpoint of the revive topic with its
  offsets and the time they become visible again (``due``: past it, the
  revive puts them into the group's pop retry topic).

``--json`` prints one document: ``{"brokers": {<group>: <the broker's
answer>}}``. A group without a master, or whose master refuses, is named
with the reason and the command exits 1; with nothing pending it prints the
counts (0) and exits 0.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any, TextIO

from triomq.cli_address import Unreachable, dial_address
from triomq.cli_credentials import add_credential_options
from triomq.cli_table import table
from triomq.client.core.codes import RequestCode
from triomq.client.core.errors import BrokerError
from triomq.plugins.client_cli.message_text import timestamp_text
from triomq.plugins.client_cli.session import (
    add_common_options,
    client_instance,
    cluster_info,
    one_line,
    run,
)
from triomq.protocol.route import RouteDataError, loads
from triomq.rpc import RpcError
from triomq.runtime import Node

__all__ = ["DEFAULT_MAX_NUM", "add_pending_commands", "ask_pending", "delayed_text",
           "half_text", "popped_text"]

#: Messages listed per level or view unless told.
DEFAULT_MAX_NUM = 32
#: The most a broker lists (GET_PENDING_MESSAGES' bound on maxNum).
MAX_NUM_LIMIT = 65536
_MASTER_ID = 0

_COMMANDS = {
    "pending-delayed": ("delayed", "delayed and timer messages not yet delivered",
                        "Per delay level of SCHEDULE_TOPIC_XXXX and for the timer queue, the "
                        "messages each broker group's master has not delivered yet."),
    "pending-half": ("half", "transactions not yet committed or rolled back",
                     "The half messages of RMQ_SYS_TRANS_HALF_TOPIC no op record has ended "
                     "yet, on each broker group's master."),
    "pending-popped": ("popped", "popped messages not yet acked",
                       "The checkpoints of the revive topic whose messages are not acked "
                       "yet, per consumer group, topic and queue, on each broker group's "
                       "master."),
}


def add_pending_commands(commands: argparse._SubParsersAction) -> None:
    """Add ``triomq admin pending-delayed``, ``pending-half`` and ``pending-popped``."""
    for name, (kind, summary, description) in _COMMANDS.items():
        p = commands.add_parser(name, help=summary, description=description)
        add_common_options(p)
        p.add_argument("-b", "--broker-name", help="only this broker group")
        p.add_argument("--max-num", type=int, default=DEFAULT_MAX_NUM,
                       help=f"at most this many listed per level or broker group "
                            f"(default {DEFAULT_MAX_NUM}); the counts are of all")
        add_credential_options(p)
        p.set_defaults(func=_runner(kind))


def _runner(kind: str) -> Callable[[argparse.Namespace], int]:
    async def command(args: argparse.Namespace, node: Node, out: TextIO) -> int:
        return await pending(kind, args, node, out)

    return lambda args: run(command, args, sign=True)


async def ask_pending(kind: str, args: argparse.Namespace, node: Node
                      ) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Each broker group's answer (by name), and why a group gave none (by name).
    ``Unreachable`` if no name server answers, or a master does not."""
    instance = client_instance(node, args)
    info = await cluster_info(instance)
    answers: dict[str, dict[str, Any]] = {}
    failures: dict[str, str] = {}
    names = sorted(info.broker_addr_table)
    if args.broker_name:
        names = [n for n in names if n == args.broker_name]
        if not names:
            failures[args.broker_name] = "no such broker group in the cluster info"
    fields = {"kind": kind, "maxNum": str(min(max(1, args.max_num), MAX_NUM_LIMIT))}
    for name in names:
        master = info.broker_addr_table[name].broker_addrs.get(_MASTER_ID)
        if master is None:
            failures[name] = "no master"
            continue
        address = dial_address(master)
        try:
            answer = await instance.invoke(address, RequestCode.GET_PENDING_MESSAGES, fields)
        except RpcError as exc:
            raise Unreachable("broker", {address: exc}) from None
        if answer.code != 0:
            failures[name] = one_line(BrokerError(master, answer.code, answer.remark))
            continue
        try:
            body = loads(answer.body, "GET_PENDING_MESSAGES")
        except RouteDataError as exc:
            failures[name] = f"{master}: {exc}"
            continue
        answers[name] = body if isinstance(body, dict) else {}
    return answers, failures


async def pending(kind: str, args: argparse.Namespace, node: Node, out: TextIO) -> int:
    """Print the ``kind`` view of every broker group; the exit code."""
    answers, failures = await ask_pending(kind, args, node)
    if args.json:
        document: dict[str, Any] = {"brokers": answers}
        if failures:
            document["errors"] = failures
        print(json.dumps(document, indent=2), file=out)
    else:
        show = {"delayed": delayed_text, "half": half_text, "popped": popped_text}[kind]
        blocks = [f"broker {name}:\n{show(answer)}" for name, answer in answers.items()]
        blocks += [f"error: broker {name}: {why}" for name, why in failures.items()]
        print("\n\n".join(blocks), file=out)
    return 1 if failures else 0


def _when(ms: Any) -> str:
    return timestamp_text(ms) if isinstance(ms, int) else "-"


def _messages(rows: list[tuple[Any, ...]], messages: list[dict[str, Any]],
              first: Callable[[dict[str, Any]], tuple[Any, ...]]) -> None:
    rows += [(*first(m), m.get("queueOffset"), _when(m.get("deliverTimeMs")), m.get("topic"),
              m.get("queueId"), m.get("msgId"), m.get("offsetMsgId")) for m in messages]


def delayed_text(answer: dict[str, Any]) -> str:
    """The delay levels with messages pending and their messages, then the timer's."""
    levels = [lv for lv in answer.get("levels") or [] if lv.get("count")]
    total = sum(lv.get("count", 0) for lv in levels)
    lines = [f"delayed messages pending: {total}"]
    if levels:
        lines.append(table(("level", "deliveryOffset", "maxOffset", "pending"),
                           [(lv.get("level"), lv.get("deliveryOffset"), lv.get("maxOffset"),
                             lv.get("count")) for lv in levels]))
        rows: list[tuple[Any, ...]] = []
        for lv in levels:
            _messages(rows, lv.get("messages") or [], lambda m, lv=lv: (lv.get("level"),))
        lines.append(table(("level", "queueOffset", "deliverTime", "topic", "queueId",
                            "msgId", "offsetMsgId"), rows))
    timer = answer.get("timer")
    if timer is None:
        lines.append("timer messages: the timer wheel is off (timer_wheel_enable = false)")
        return "\n".join(lines)
    lines.append(f"timer messages pending: {timer.get('count', 0)} (checkpoint: queueOffset "
                 f"{timer.get('queueOffset')}, scanOffset {timer.get('scanOffset')}, "
                 f"readTime {_when(timer.get('readTimeMs'))})")
    rows = []
    _messages(rows, timer.get("messages") or [], lambda m: ())
    if rows:
        lines.append(table(("queueOffset", "deliverTime", "topic", "queueId", "msgId",
                            "offsetMsgId"), rows))
    return "\n".join(lines)


def half_text(answer: dict[str, Any]) -> str:
    """The open transactions, oldest first."""
    messages = answer.get("messages") or []
    lines = [f"open transactions: {answer.get('count', 0)} (check progress: half queue "
             f"offset {answer.get('checkProgress')})"]
    if messages:
        lines.append(table(
            ("queueOffset", "producerGroup", "transactionId", "topic", "age", "checkTimes",
             "msgId"),
            [(m.get("queueOffset"), m.get("producerGroup"), m.get("transactionId"),
              m.get("topic"), _age(m.get("ageMs")), m.get("checkTimes"), m.get("msgId"))
             for m in messages]))
    return "\n".join(lines)


def _age(ms: Any) -> str:
    return f"{ms / 1000:.1f}s" if isinstance(ms, int) else "-"


def popped_text(answer: dict[str, Any]) -> str:
    """The count per group, topic and queue, then each checkpoint."""
    queues = answer.get("queues") or []
    checkpoints = answer.get("checkpoints") or []
    lines = [f"popped messages not acked: {answer.get('count', 0)}"]
    if queues:
        lines.append(table(("group", "topic", "queueId", "notAcked"),
                           [(q.get("group"), q.get("topic"), q.get("queueId"), q.get("count"))
                            for q in queues]))
    if checkpoints:
        lines.append(table(
            ("group", "topic", "queueId", "offsets", "popTime", "invisibleUntil", "due"),
            [(c.get("group"), c.get("topic"), c.get("queueId"),
              ",".join(str(o) for o in c.get("offsets") or []), _when(c.get("popTime")),
              _when(c.get("invisibleUntil")), "yes" if c.get("due") else "no")
             for c in checkpoints]))
    return "\n".join(lines)
