"""RocketMQ's rules for topic and group names (``TopicValidator``), in one place.

A name is 1 to 127 characters of ``%|a-zA-Z0-9_-`` (retry and dead-letter
topics, ``%RETRY%...`` and ``%DLQ%...``, up to 255; groups up to 120).
System topics are reserved: a client may not create them, and some may not
be sent to. ``check_topic`` / ``check_group`` raise ``IllegalName`` whose
message names the name and the rule it breaks, as RocketMQ's remark does.
"""

from __future__ import annotations

import re

from triomq.errors import TriomqError

__all__ = [
    "AUTO_CREATE_TOPIC",
    "DLQ_GROUP_TOPIC_PREFIX",
    "NOT_ALLOWED_SEND_TOPICS",
    "RETRY_GROUP_TOPIC_PREFIX",
    "SYNC_BROKER_MEMBER_GROUP_PREFIX",
    "SYSTEM_TOPICS",
    "SYSTEM_TOPIC_PREFIX",
    "IllegalName",
    "check_group",
    "check_topic",
    "has_legal_characters",
    "is_system_topic",
]

AUTO_CREATE_TOPIC = "TBW102"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
#: A group's member topic: its route names the group's alive members, for brokers that
#: cannot ask GET_BROKER_MEMBER_GROUP (RocketMQ's ``compatibleWithOldNameSrv``).
SYNC_BROKER_MEMBER_GROUP_PREFIX = SYSTEM_TOPIC_PREFIX + "SYNC_BROKER_MEMBER_"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"

SYSTEM_TOPICS = frozenset({
    AUTO_CREATE_TOPIC, "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC",
    "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", "CHECKPOINT_TOPIC",
})
NOT_ALLOWED_SEND_TOPICS = frozenset({
    "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT",
})

TOPIC_MAX_LENGTH = 127
RETRY_OR_DLQ_TOPIC_MAX_LENGTH = 255
GROUP_MAX_LENGTH = 120

_LEGAL = re.compile(r"[%|a-zA-Z0-9_-]+", re.ASCII)


class IllegalName(TriomqError, ValueError):
    """A topic or group name breaks RocketMQ's rules; the message says which."""


def has_legal_characters(name: str) -> bool:
    """Whether ``name`` is one or more of the characters a topic or group name may hold."""
    return _LEGAL.fullmatch(name) is not None


def _check_characters(kind: str, name: str) -> None:
    if not name or name.isspace():
        raise IllegalName(f"The specified {kind} is blank.")
    if not has_legal_characters(name):
        raise IllegalName(f"The specified {kind}: {name!r}, contains illegal characters, "
                          f"allowing only ^[%|a-zA-Z0-9_-]+$")


def check_topic(topic: str) -> None:
    """Raise ``IllegalName`` unless ``topic`` is a legal topic name."""
    _check_characters("topic", topic)
    if topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
        if len(topic) > RETRY_OR_DLQ_TOPIC_MAX_LENGTH:
            raise IllegalName(f"The specified topic is DLQ or Retry topic: {topic!r}, and "
                              f"it's longer than topic max length: "
                              f"{RETRY_OR_DLQ_TOPIC_MAX_LENGTH}")
    elif len(topic) > TOPIC_MAX_LENGTH:
        raise IllegalName(f"The specified topic: {topic[:40]!r}..., is longer than topic "
                          f"max length: {TOPIC_MAX_LENGTH}")


def check_group(group: str) -> None:
    """Raise ``IllegalName`` unless ``group`` is a legal group (or broker group) name."""
    _check_characters("group", group)
    if len(group) > GROUP_MAX_LENGTH:
        raise IllegalName(f"The specified group: {group[:40]!r}..., is longer than group "
                          f"max length: {GROUP_MAX_LENGTH}")


def is_system_topic(topic: str) -> bool:
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)
