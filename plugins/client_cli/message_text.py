"""How the client commands show messages and send results, as text and JSON. Pure.

- ``message_line``: one line per received message (``triomq consume``), with
  the body escaped and cut as ``triomq store dump`` cuts it
  (``triomq.store_cli.escaped``); ``stored=True`` adds the store host, the
  store time and every property (``triomq admin query-msg-by-id/-by-key``).
- ``message_json``: the same fields as a JSON object, the body in base64 (as
  ``triomq store dump --json`` gives it).
- ``send_result_line``: a send's outcome as RocketMQ's quickstart producer
  prints its ``SendResult``; ``send_result_json`` for scripts.

Times are UTC with milliseconds, hosts ``host:port``.
"""

from __future__ import annotations

import base64
import datetime
from typing import Any

from triomq.client.core.message import MessageExt, SendResult
from triomq.store_cli import escaped

__all__ = ["message_json", "message_line", "send_result_json", "send_result_line",
           "timestamp_text"]


def timestamp_text(ms: int) -> str:
    """``ms`` since the epoch as ISO 8601 UTC with milliseconds (``...T12:00:00.123Z``)."""
    try:
        when = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return str(ms)  # a born time from a broken clock still shows, as a number
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def _host(host: tuple[str, int]) -> str:
    return f"[{host[0]}]:{host[1]}" if ":" in host[0] else f"{host[0]}:{host[1]}"


def message_line(message: MessageExt, width: int, *, stored: bool = False) -> str:
    """One line for ``message``: where it is, its ids, tags, keys, born time and body."""
    parts = [f"topic={message.topic}",
             f"queue={message.broker_name}:{message.queue_id}",
             f"offset={message.queue_offset}",
             f"msgId={message.msg_id}",
             f"tags={message.tags or '-'}",
             f"keys={','.join(message.keys) or '-'}",
             f"born={timestamp_text(message.born_timestamp)}"]
    if stored:
        parts += [f"offsetMsgId={message.offset_msg_id}",
                  f"storeHost={_host(message.store_host)}",
                  f"stored={timestamp_text(message.store_timestamp)}",
                  f"props={dict(sorted(message.properties.items()))}"]
    parts.append(f"body[{len(message.body)}]={escaped(message.body, width)}")
    return " ".join(parts)


def message_json(message: MessageExt) -> dict[str, Any]:
    """``message`` as a JSON object (RocketMQ's ``MessageExt`` field names)."""
    return {
        "topic": message.topic,
        "brokerName": message.broker_name,
        "queueId": message.queue_id,
        "queueOffset": message.queue_offset,
        "commitLogOffset": message.commit_log_offset,
        "msgId": message.msg_id,
        "offsetMsgId": message.offset_msg_id,
        "tags": message.tags,
        "keys": list(message.keys),
        "bornTimestamp": message.born_timestamp,
        "bornHost": _host(message.born_host),
        "storeTimestamp": message.store_timestamp,
        "storeHost": _host(message.store_host),
        "reconsumeTimes": message.reconsume_times,
        "sysFlag": message.sys_flag,
        "properties": dict(message.properties),
        "body": base64.b64encode(message.body).decode(),
    }


def send_result_line(result: SendResult) -> str:
    """RocketMQ's ``SendResult.toString``, as its quickstart producer prints it."""
    queue = result.message_queue
    return (f"SendResult [sendStatus={result.send_status.value}, msgId={result.msg_id}, "
            f"offsetMsgId={result.offset_msg_id}, messageQueue=MessageQueue "
            f"[topic={queue.topic}, brokerName={queue.broker_name}, queueId={queue.queue_id}], "
            f"queueOffset={result.queue_offset}]")


def send_result_json(result: SendResult) -> dict[str, Any]:
    """A send's outcome as a JSON object (``SendResult``'s field names)."""
    return {"sendStatus": result.send_status.value, "msgId": result.msg_id,
            "offsetMsgId": result.offset_msg_id, "messageQueue": result.message_queue.to_json(),
            "queueOffset": result.queue_offset}
