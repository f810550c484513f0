"""Subscriptions by tag expression, as RocketMQ's ``FilterAPI`` builds them. Pure.

An expression is ``*`` (every message; also an empty one) or tags joined
by ``||`` (``"paid || refunded"``). The broker filters by each tag's Java
``String.hashCode`` (a queue entry holds only that code); the client then
keeps the messages whose tag is in the set, since codes may collide.
"""

from __future__ import annotations

import attrs

__all__ = ["EXPRESSION_TYPE_TAG", "SUB_ALL", "SubscriptionData", "java_string_hash"]

SUB_ALL = "*"
EXPRESSION_TYPE_TAG = "TAG"


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: over UTF-16 code units, as a signed 32-bit int."""
    value = 0
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        value = (31 * value + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


@attrs.frozen
class SubscriptionData:
    """One topic's subscription: the expression, its tags and their codes."""

    topic: str
    sub_string: str
    tags: frozenset[str]
    codes: frozenset[int]
    sub_version: int

    @classmethod
    def build(cls, topic: str, expression: str | None, sub_version: int) -> SubscriptionData:
        """The subscription of ``topic`` to ``expression``, versioned ``sub_version``
        (RocketMQ uses the time it was made, in ms: a newer one replaces an older)."""
        text = (expression or "").strip()
        if not text or text == SUB_ALL:
            return cls(topic, SUB_ALL, frozenset(), frozenset(), sub_version)
        tags = frozenset(t.strip() for t in text.split("||") if t.strip())
        if not tags:
            raise ValueError(f"subscription expression {expression!r} names no tag")
        return cls(topic, text, tags, frozenset(java_string_hash(t) for t in tags), sub_version)

    @property
    def all(self) -> bool:
        return self.sub_string == SUB_ALL

    def matches(self, tags: str | None) -> bool:
        """Whether a message tagged ``tags`` is wanted."""
        return self.all or (tags is not None and tags in self.tags)

    def to_json(self) -> dict[str, object]:
        """As HEART_BEAT's ``subscriptionDataSet`` carries it."""
        return {"classFilterMode": False, "codeSet": sorted(self.codes),
                "expressionType": EXPRESSION_TYPE_TAG, "subString": self.sub_string,
                "subVersion": self.sub_version, "tagsSet": sorted(self.tags),
                "topic": self.topic}
