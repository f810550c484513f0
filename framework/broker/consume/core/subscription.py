"""A consumer's subscription to a topic, pure: RocketMQ's ``FilterAPI`` and tag matching.

A subscription expression of type ``TAG`` (the default; an absent or empty
type is TAG too) is ``"*"`` (every message; an empty expression means the
same) or tags joined by ``||`` (``"a || b"``), blanks around each tag
ignored. A message matches when its consume-queue tags code (the Java
``String.hashCode`` of its TAGS property, 0 without one) is the code of one
of the tags, as RocketMQ's ``ExpressionMessageFilter`` decides from the
consume queue alone.

Refusals, as RocketMQ's pull path answers them (``SubscriptionRefused``
carries the code and a remark naming the expression):

- an expression that names no tag (``"||"``, blanks only) or a tag that is
  not text: SUBSCRIPTION_PARSE_FAILED. RocketMQ refuses only the first
  (its split finds nothing); a subscription that can match nothing is as
  surely a mistake, and a client learns it at once;
- ``SQL92``: SYSTEM_ERROR saying the broker does not filter by it
  (RocketMQ's answer while ``enablePropertyFilter`` is off, its default;
  triomq has no property filter); any other type: SUBSCRIPTION_PARSE_FAILED.
"""

from __future__ import annotations

import attrs

from triomq.errors import TriomqError
from triomq.protocol.commitlog_layout import tags_code
from triomq.protocol.heartbeat import EXPRESSION_SQL92, EXPRESSION_TAG, SUB_ALL

__all__ = [
    "EXPRESSION_SQL92",
    "EXPRESSION_TAG",
    "SUB_ALL",
    "Subscription",
    "SubscriptionRefused",
    "parse_subscription",
]

#: RocketMQ's ``ResponseCode`` values these refusals use.
SYSTEM_ERROR = 1
SUBSCRIPTION_PARSE_FAILED = 23

#: Longest expression quoted back in a remark.
_QUOTED = 80


class SubscriptionRefused(TriomqError):
    """An expression the broker will not filter by; ``code`` and ``remark`` are the answer."""

    def __init__(self, code: int, remark: str) -> None:
        self.code = code
        self.remark = remark
        super().__init__(remark)


@attrs.frozen
class Subscription:
    """What a consumer group takes from one topic.

    ``codes`` are the tags codes that match, ``None`` for every message.
    """

    sub_string: str = SUB_ALL
    codes: frozenset[int] | None = None
    expression_type: str = EXPRESSION_TAG
    sub_version: int = 0

    def matches(self, code: int) -> bool:
        """Whether a consume-queue entry with tags code ``code`` is taken."""
        return self.codes is None or code in self.codes


def parse_subscription(expression: str | None, expression_type: str | None = None,
                       sub_version: int = 0) -> Subscription:
    """The subscription ``expression`` of ``expression_type`` stands for.

    ``SubscriptionRefused`` when the broker cannot filter by it.
    """
    kind = expression_type or EXPRESSION_TAG
    if kind != EXPRESSION_TAG:
        if kind == EXPRESSION_SQL92:
            raise SubscriptionRefused(
                SYSTEM_ERROR, "The broker does not support consumer to filter message by SQL92")
        raise SubscriptionRefused(
            SUBSCRIPTION_PARSE_FAILED,
            f"parse the consumer's subscription failed: expression type {kind[:_QUOTED]!r} "
            f"is neither TAG nor SQL92")
    if not expression or expression == SUB_ALL:
        return Subscription(SUB_ALL, None, EXPRESSION_TAG, sub_version)
    tags = [tag.strip() for tag in expression.split("||")]
    tags = [tag for tag in tags if tag]
    if not tags:
        raise SubscriptionRefused(
            SUBSCRIPTION_PARSE_FAILED,
            f"parse the consumer's subscription failed: {expression[:_QUOTED]!r} names no tag "
            f"(expected '*' or tags joined by '||')")
    try:
        codes = frozenset(tags_code(tag) for tag in tags)
    except UnicodeEncodeError:
        raise SubscriptionRefused(
            SUBSCRIPTION_PARSE_FAILED,
            f"parse the consumer's subscription failed: {expression[:_QUOTED]!r} holds "
            f"characters that are not text") from None
    return Subscription(expression, codes, EXPRESSION_TAG, sub_version)
