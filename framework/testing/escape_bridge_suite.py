"""The escape-bridge conformance suite: what every ``triomq_escape_bridge`` bridge must do.

An escape bridge (``triomq.broker.core.escape_bridge.EscapeBridge``) puts a
broker's own messages on a master. To check one, subclass
``EscapeBridgeConformance`` in a test module of your own and provide two
fixtures, each a ``BridgeTarget``: the bridge and what it needs to check
its puts (a bridge that sends over the network sets ``keeps_born_host =
False`` on its target)::

    import pytest
    from triomq.testing.escape_bridge_suite import EscapeBridgeConformance

    class TestMyBridge(EscapeBridgeConformance):
        @pytest.fixture
        async def target(self, tmp_path):
            async with my_master_and_bridge(tmp_path) as target:
                yield target               # a bridge onto a running master

        @pytest.fixture
        async def masterless(self, tmp_path):
            async with my_bridge_without_a_master(tmp_path) as target:
                yield target               # nothing it can put on

``from triomq.testing import EscapeBridgeConformance`` imports the same
class. The tests run under pytest-trio (they carry the ``trio`` mark).
"""

from __future__ import annotations

from typing import Protocol

import pytest
import trio

from triomq.broker.core.escape_bridge import EscapeBridge, EscapedMessage, EscapeResult
from triomq.protocol.message import PROPERTY_UNIQ_KEY, MessageRecord

__all__ = ["BridgeTarget", "EscapeBridgeConformance"]

#: The topic the suite puts to: one no client sends to and no broker service reads
#: (a secondary-message service's own topic would be read by that service).
TOPIC = "TRIOMQ_ESCAPE_BRIDGE_SUITE"


class BridgeTarget(Protocol):
    """A bridge under test and the master it puts on."""

    @property
    def bridge(self) -> EscapeBridge:
        ...

    @property
    def max_message_size(self) -> int:
        """The largest body the master stores."""
        ...

    async def stored(self, result: EscapeResult) -> MessageRecord:
        """The record the master holds where ``result`` says it was put."""
        ...

    async def end_offset(self) -> int:
        """The end of the master's commit log (of any master the bridge puts on)."""
        ...


def keeps_born_host(target: BridgeTarget) -> bool:
    """Whether the bridge keeps a message's born host: a target may say it does not
    (``keeps_born_host = False``), as one that sends over the network cannot (the
    master takes the sender's connection, as for any send)."""
    return bool(getattr(target, "keeps_born_host", True))


def message(body: bytes, queue_id: int = 0, **properties: str) -> EscapedMessage:
    return EscapedMessage(topic=TOPIC, queue_id=queue_id, body=body,
                          properties={"WAIT": "false", **properties})


class EscapeBridgeConformance:
    """Subclass and provide the ``target`` and ``masterless`` fixtures (module docstring)."""

    pytestmark = pytest.mark.trio

    async def test_a_put_is_stored_where_its_result_says(self, target: BridgeTarget) -> None:
        put = message(b"first", queue_id=1, TAGS="t", KEYS="k1 k2")
        result = await target.bridge.put_message(put)
        assert result.ok, result
        assert result.stored and result.queue_id == 1 and result.queue_offset is not None
        record = await target.stored(result)
        assert (record.topic, record.queue_id, record.body) == (TOPIC, 1, b"first")
        assert record.queue_offset == result.queue_offset
        for key, value in put.properties.items():
            assert record.properties[key] == value
        assert record.properties.get(PROPERTY_UNIQ_KEY)

    async def test_the_messages_own_fields_are_kept(self, target: BridgeTarget) -> None:
        put = EscapedMessage(topic=TOPIC, queue_id=0, body=b"x", flag=7,
                             born_timestamp=1_700_000_000_123, born_host=("10.1.2.3", 4567),
                             reconsume_times=2, properties={PROPERTY_UNIQ_KEY: "AC1E" * 8})
        result = await target.bridge.put_message(put)
        assert result.ok, result
        record = await target.stored(result)
        assert (record.flag, record.born_timestamp, record.reconsume_times) == (
            7, 1_700_000_000_123, 2)
        if keeps_born_host(target):
            assert record.born_host == ("10.1.2.3", 4567)
        assert record.properties[PROPERTY_UNIQ_KEY] == "AC1E" * 8

    async def test_messages_without_a_unique_key_get_distinct_ones(
            self, target: BridgeTarget) -> None:
        keys = set()
        for n in range(3):
            result = await target.bridge.put_message(message(b"m%d" % n))
            assert result.ok, result
            keys.add((await target.stored(result)).properties[PROPERTY_UNIQ_KEY])
        assert len(keys) == 3

    async def test_a_queues_puts_take_consecutive_offsets(self, target: BridgeTarget) -> None:
        first = await target.bridge.put_message(message(b"a", queue_id=2))
        second = await target.bridge.put_message(message(b"b", queue_id=2))
        other = await target.bridge.put_message(message(b"c", queue_id=3))
        assert first.ok and second.ok and other.ok
        assert first.queue_offset is not None
        assert second.queue_offset == first.queue_offset + 1
        assert (await target.stored(second)).body == b"b"
        assert (await target.stored(other)).queue_id == 3

    async def test_concurrent_puts_are_each_stored_once(self, target: BridgeTarget) -> None:
        results: dict[int, EscapeResult] = {}

        async def put(n: int) -> None:
            results[n] = await target.bridge.put_message(message(b"c%d" % n, queue_id=4))

        async with trio.open_nursery() as nursery:
            for n in range(12):
                nursery.start_soon(put, n)
        assert all(result.ok for result in results.values()), results
        offsets = sorted(r.queue_offset for r in results.values() if r.queue_offset is not None)
        assert offsets == list(range(offsets[0], offsets[0] + 12))
        for n, result in results.items():
            assert (await target.stored(result)).body == b"c%d" % n

    async def test_a_body_over_the_masters_limit_is_refused_not_stored(
            self, target: BridgeTarget) -> None:
        end = await target.end_offset()
        result = await target.bridge.put_message(
            message(b"x" * (target.max_message_size + 1)))
        assert not result.ok and not result.stored
        assert result.remark and "max_message_size" in result.remark
        assert await target.end_offset() == end
        assert (await target.bridge.put_message(message(b"fits"))).ok

    async def test_without_a_master_a_put_is_refused_not_stored(
            self, masterless: BridgeTarget) -> None:
        end = await masterless.end_offset()
        result = await masterless.bridge.put_message(message(b"nowhere"))
        assert not result.ok and not result.stored
        assert result.remark
        assert await masterless.end_offset() == end
