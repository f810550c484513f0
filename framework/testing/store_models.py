"""Hypothesis stateful tests of store factories against in-memory models.

Given a conformance-suite class (``triomq.testing.store_suite``) naming a
factory, ``commitlog_model_test`` and ``entrylog_model_test`` return test
cases that run random sequences of appends, reads, truncations, compactions
and reopenings against the store and a plain-list model::

    TestMyCommitLogModel = commitlog_model_test(TestMyCommitLog)
"""

from __future__ import annotations

import tempfile
from typing import ClassVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from triomq.protocol.message import MessageRecord
from triomq.store import EntryRecord
from triomq.testing.store_suite import (
    CommitLogSuite,
    EntryLogSuite,
    make_record,
    same_message,
)


class CommitLogModel(RuleBasedStateMachine):
    """A commit log against a list of records: append, truncate, reopen, compare.

    A second log, the replica, follows the first with ``append_raw`` in
    chunks that split records anywhere, and truncates like a slave whose
    master truncated: it must always hold a prefix of the first log's bytes
    and index exactly its whole records.
    """

    suite: ClassVar[CommitLogSuite]

    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.TemporaryDirectory()
        self.log = self.suite.open(self.tmp.name + "/master")
        self.replica = self.suite.open(self.tmp.name + "/replica")
        self.model: list[tuple[int, MessageRecord]] = []
        self.end = 0
        self.counter = 0

    @rule(sizes=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 900)), min_size=1,
                         max_size=8))
    def append(self, sizes: list[tuple[int, int]]) -> None:
        records = []
        for qid, size in sizes:
            self.counter += 1
            records.append(make_record(self.counter, queue_id=qid, body_size=size))
        for rec, res in zip(records, self.log.append_batch(records), strict=True):
            self.model.append((res.physical_offset, rec))
            self.end = res.physical_offset + res.size

    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        if not self.model:
            return
        i = data.draw(st.integers(0, len(self.model) - 1))
        self.end = self.model[i][0]
        self.log.truncate(self.end)
        del self.model[i:]
        if self.replica.max_offset > self.end:
            self.replica.truncate(self.end)

    @rule(chunks=st.lists(st.integers(1, 1500), min_size=1, max_size=4))
    def replicate(self, chunks: list[int]) -> None:
        for n in chunks:
            at = self.replica.max_offset
            data = self.log.read(at, n)
            if not data:
                return
            assert self.replica.append_raw(at, data) == at + len(data)

    @rule()
    def reopen(self) -> None:
        self.log.close()
        self.replica.close()
        self.log = self.suite.open(self.tmp.name + "/master")
        self.replica = self.suite.open(self.tmp.name + "/replica")

    @invariant()
    def matches_model(self) -> None:
        got = list(self.log.iter_records())
        assert [r.physical_offset for r in got] == [p for p, _ in self.model]
        assert all(same_message(a, b) for a, (_, b) in zip(got, self.model, strict=True))
        for qid in range(3):
            expected = sum(1 for _, r in self.model if r.queue_id == qid)
            assert self.log.queue_max_offset("t", qid) == expected
        assert self.log.max_offset == self.log.last_whole_record_end() == self.end
        copied = self.replica.max_offset
        assert self.replica.read(0, copied) == self.log.read(0, copied)
        whole = [p for p, _ in self.model if p < self.replica.last_whole_record_end()]
        assert [r.physical_offset for r in self.replica.iter_records()] == whole
        for qid in range(3):
            expected = sum(1 for p, r in self.model if r.queue_id == qid and p in set(whole))
            assert self.replica.queue_max_offset("t", qid) == expected

    def teardown(self) -> None:
        self.log.close()
        self.replica.close()
        self.tmp.cleanup()


def commitlog_model_test(suite: type[CommitLogSuite], max_examples: int = 30):
    """A hypothesis stateful test of ``suite``'s factory against the in-memory model."""
    machine = type("Model", (CommitLogModel,), {"suite": suite()})
    machine.TestCase.settings = settings(
        max_examples=max_examples, stateful_step_count=12, deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    return machine.TestCase


class EntryLogModel(RuleBasedStateMachine):
    """An entry log against a list of entries: append, truncate, compact, reopen."""

    suite: ClassVar[EntryLogSuite]

    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.TemporaryDirectory()
        self.log = self.suite.open(self.tmp.name)
        self.first = 1
        self.entries: list[EntryRecord] = []  # from ``first``
        self.prev_term = 0
        self.term = 1

    @rule(sizes=st.lists(st.integers(0, 700), min_size=1, max_size=6), bump=st.booleans())
    def append(self, sizes: list[int], bump: bool) -> None:
        self.term += bump
        start = self.first + len(self.entries)
        new = [EntryRecord(start + i, self.term, bytes([(start + i) % 256]) * n)
               for i, n in enumerate(sizes)]
        self.log.append(new)
        self.entries += new

    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        index = data.draw(st.integers(self.first, self.first + len(self.entries)))
        self.log.truncate_suffix(index)
        del self.entries[index - self.first:]

    @rule(data=st.data())
    def compact(self, data: st.DataObject) -> None:
        index = data.draw(st.integers(self.first, self.first + len(self.entries)))
        self.log.compact_prefix(index)
        if index > self.first:
            self.prev_term = self.entries[index - self.first - 1].term
            del self.entries[:index - self.first]
            self.first = index

    @rule()
    def reopen(self) -> None:
        self.log.sync()
        self.log.close()
        self.log = self.suite.open(self.tmp.name)

    @invariant()
    def matches_model(self) -> None:
        assert self.log.first_index == self.first
        assert self.log.last_index == self.first + len(self.entries) - 1
        assert self.log.term_at(self.first - 1) == self.prev_term
        assert self.log.entries(self.first, self.log.last_index + 1) == self.entries

    def teardown(self) -> None:
        self.log.close()
        self.tmp.cleanup()


def entrylog_model_test(suite: type[EntryLogSuite], max_examples: int = 30):
    """A hypothesis stateful test of ``suite``'s factory against the in-memory model."""
    machine = type("Model", (EntryLogModel,), {"suite": suite()})
    machine.TestCase.settings = settings(
        max_examples=max_examples, stateful_step_count=12, deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    return machine.TestCase
