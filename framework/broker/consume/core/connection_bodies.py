"""The admin tool's bodies about clients, as fastjson writes them. Pure.

- GET_CONSUMER_CONNECTION_LIST (203) -> ``ConsumerConnection``: a consumer
  group's connections, its consume type, message model, where it starts
  and its subscriptions by topic (``mqadmin consumerConnection``)::

    {"connectionSet":[{"clientAddr":"10.0.0.5:53122","clientId":"10.0.0.5@4242",
      "language":"JAVA","version":479}],"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET",
     "consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING",
     "subscriptionTable":{"t":{"classFilterMode":false,"codeSet":[],...,"topic":"t"}}}

- GET_PRODUCER_CONNECTION_LIST (204) -> ``ProducerConnection``:
  ``{"connectionSet":[...]}`` (``mqadmin producerConnection``);
- QUERY_TOPIC_CONSUME_BY_WHO (300) -> ``GroupList``: ``{"groupList":[...]}``
  (``mqadmin queryMsgById`` and ``topicList -c``).

Fields are sorted as fastjson sorts a bean's; the sets (Java ``HashSet``s,
in no order) are written sorted, for a stable answer.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from triomq.broker.consume.core.client_table import ClientChannel, ConsumerGroupInfo
from triomq.protocol.route import dumps

__all__ = ["consumer_connection", "group_list", "producer_connection"]


def _connections(channels: Iterable[ClientChannel]) -> list[dict[str, Any]]:
    return sorted(({"clientAddr": c.origin.address, "clientId": c.client_id,
                    "language": c.origin.language, "version": c.origin.version}
                   for c in channels), key=lambda c: (c["clientId"], c["clientAddr"]))


def consumer_connection(info: ConsumerGroupInfo) -> bytes:
    """``ConsumerConnection`` of an online consumer group."""
    return dumps({
        "connectionSet": _connections(info.channels.values()),
        "consumeFromWhere": info.consume_from_where,
        "consumeType": info.consume_type,
        "messageModel": info.message_model,
        "subscriptionTable": {topic: sub.to_json()
                              for topic, sub in sorted(info.subscriptions.items())},
    })


def producer_connection(channels: Iterable[ClientChannel]) -> bytes:
    """``ProducerConnection`` of a producer group's connections."""
    return dumps({"connectionSet": _connections(channels)})


def group_list(groups: Iterable[str]) -> bytes:
    """``GroupList``."""
    return dumps({"groupList": sorted(groups)})
