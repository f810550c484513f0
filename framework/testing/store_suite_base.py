"""What the store conformance suites share: the factory plumbing and the test records.

``_StoreSuite`` opens the store under test through the suite's ``factory``
with its ``defaults`` and ``options``; ``make_record`` and ``same_message``
are the records the suites (and other store tests) write and compare.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

from triomq.protocol.message import MessageRecord

SEGMENT_SIZE = 4096
Factory = Callable[[str, Mapping[str, Any]], Any]


def make_record(i: int, *, topic: str = "t", queue_id: int = 0, body_size: int = 50,
                tags: str | None = "tagA") -> MessageRecord:
    """A record whose body and timestamps derive from ``i``."""
    props = {"UNIQ_KEY": f"k{i}"}
    if tags:
        props["TAGS"] = tags
    return MessageRecord(
        topic=topic, body=bytes((i + j) % 251 for j in range(body_size)), queue_id=queue_id,
        born_timestamp=1_000_000 + i, store_timestamp=2_000_000 + 10 * i,
        born_host=("10.0.0.1", 4000), store_host=("10.0.0.2", 10911), properties=props,
    )


def same_message(a: MessageRecord, b: MessageRecord) -> bool:
    """Equal apart from the offsets the log assigns."""
    return (a.topic, a.body, a.queue_id, a.store_timestamp, dict(a.properties)) == (
        b.topic, b.body, b.queue_id, b.store_timestamp, dict(b.properties))


class _StoreSuite:
    """What the suites share: ``factory``, ``options`` and opening helpers."""

    factory: ClassVar[Factory]
    options: ClassVar[Mapping[str, Any]] = {}
    defaults: ClassVar[Mapping[str, Any]] = {}

    def open(self, path: Path | str, **extra: Any) -> Any:
        return type(self).factory(str(path), {**self.defaults, **self.options, **extra})

    @contextlib.contextmanager
    def opened(self, path: Path | str, **extra: Any) -> Iterator[Any]:
        store = self.open(path, **extra)
        try:
            yield store
        finally:
            store.close()
