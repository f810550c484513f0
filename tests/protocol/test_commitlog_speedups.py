"""The C hot loops (``framework/protocol/_speedups.c``) against their pure-Python references.

``pack_records`` and ``index_records`` each have a C version and a Python
one; the C one must give exactly the Python result or ``None`` (meaning
"let Python handle it"), never something else, whatever the input. The
scanner is fed garbage too. Without the extension built, the tests that
compare against it are skipped; the pure-Python paths are still covered.
"""

from __future__ import annotations

import random
from pathlib import Path

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from triomq.plugins.store_mmap.commitlog import MmapCommitLog
from triomq.protocol import commitlog_layout as layout
from triomq.protocol.commitlog_layout import (
    CQ_ENTRY_SIZE,
    index_records_py,
    pack_records_py,
    scan_log,
    unpack_cq_entry,
)
from triomq.protocol.message import MessageRecord, decode, pack_ip
from triomq.store import AppendResult
from triomq.testing.store_suite import make_record

speedups = layout._speedups
needs_c = pytest.mark.skipif(speedups is None, reason="C speedups not built")

INT32 = st.integers(-(1 << 31), (1 << 31) - 1)
INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
TEXT = st.text(max_size=12)
TOPICS = st.one_of(st.sampled_from(["t", "TopicTest", "tópico", "x" * 130]), TEXT)
IPS = st.sampled_from(["10.0.0.1", "127.0.0.1", "::1", "fe80::2"])
PROPERTIES = st.dictionaries(
    st.one_of(st.just("TAGS"), st.just("KEYS"), TEXT),
    st.one_of(TEXT, st.sampled_from(["tagA", "😀x", ""])),
    max_size=4,
)
# Values the encoder must refuse, put in one field of some records.
SPOILERS = {
    "queue_id": st.integers(1 << 31, 1 << 40),
    "flag": st.integers(-(1 << 40), -(1 << 31) - 1),
    "sys_flag": st.integers(1 << 31, 1 << 70),
    "born_timestamp": st.integers(1 << 63, 1 << 70),
    "reconsume_times": st.integers(1 << 31, 1 << 40),
    "prepared_transaction_offset": st.integers(-(1 << 70), -(1 << 63) - 1),
    "born_host": st.tuples(st.sampled_from(["1.2.3.04", "nope", "", "::1%eth0"]), INT32),
    "store_host": st.tuples(IPS, st.integers(1 << 31, 1 << 40)),
    "properties": st.sampled_from([{"a": "x\x01y"}, {"a\x02": "y"}, {"k": "z" * 40000},
                                   {"TAGS": "\ud800"}]),
    "topic": st.sampled_from(["x" * 40000, "\udc80"]),
    "body": st.sampled_from([memoryview(b"abc"), "text"]),
}


@st.composite
def records(draw) -> MessageRecord:
    record = MessageRecord(
        topic=draw(TOPICS),
        body=draw(st.one_of(st.binary(max_size=300), st.binary(max_size=8).map(bytearray))),
        queue_id=draw(st.one_of(st.integers(0, 3), INT32)),
        flag=draw(INT32),
        sys_flag=draw(st.one_of(st.integers(0, 0xFF), INT32)),
        born_timestamp=draw(INT64),
        born_host=draw(st.tuples(IPS, INT32)),
        store_timestamp=draw(INT64),
        store_host=draw(st.tuples(IPS, INT32)),
        reconsume_times=draw(INT32),
        prepared_transaction_offset=draw(INT64),
        properties=draw(PROPERTIES),
    )
    if draw(st.integers(0, 9)) == 0:
        name = draw(st.sampled_from(sorted(SPOILERS)))
        object.__setattr__(record, name, draw(SPOILERS[name]))
    return record


def outcome(fn, *args, **kwargs):
    """``fn``'s result, or the type and message of what it raised."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        return type(exc), str(exc)


def c_pack(recs, base, segment_size, next_queue_offset, result_type=AppendResult):
    packed = speedups.pack_records(recs, base, segment_size, next_queue_offset, pack_ip,
                                   MessageRecord, result_type)
    return None if packed is None else layout.PackedBatch(*packed)


@needs_c
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(records(), max_size=8), st.integers(0, 1 << 20),
       st.sampled_from([512, 1024, 4096, 1 << 20]), st.integers(0, 1000))
def test_pack_records_c_matches_python(recs, base, segment_size, first) -> None:
    def next_queue_offset(topic, queue_id):
        return first + len(topic) + queue_id % 7

    expected = outcome(pack_records_py, recs, base, segment_size, next_queue_offset,
                       result_type=AppendResult)
    got = c_pack(recs, base, segment_size, next_queue_offset)
    if not isinstance(expected, layout.PackedBatch):
        assert got is None  # bad input is left to Python, which raises
    elif all(type(r.body) in (bytes, bytearray) for r in recs):
        assert got == expected  # C takes every batch Python accepts, but other body types
        assert [type(r) for r in got.results] == [AppendResult] * len(recs)
    else:
        assert got is None


@needs_c
def test_pack_records_c_handles_ordinary_batches() -> None:
    """The C path must not give up on what appends normally carry (else it is never used)."""
    recs = [make_record(i, queue_id=i % 3, body_size=i * 7 % 200, tags=["a", None, "ü😀"][i % 3])
            for i in range(200)]
    recs.append(MessageRecord(topic="v6" * 70, body=b"x", born_host=("::1", 1),
                              properties={"TAGS": "t"}))
    got = c_pack(recs, 100, 4096, lambda t, q: 0)
    assert got is not None
    assert got == pack_records_py(recs, 100, 4096, lambda t, q: 0, result_type=AppendResult)
    assert c_pack(recs, 100, 4096, lambda t, q: 0, None).results is None


@needs_c
def test_pack_records_c_propagates_callback_errors() -> None:
    def broken(topic, queue_id):
        raise KeyError(topic)

    with pytest.raises(KeyError):
        c_pack([make_record(1)], 0, 4096, broken)


def valid_log(seed: int, n: int, segment_size: int) -> tuple[int, bytes]:
    """``(base, bytes)`` of ``n`` records appended at a random base, blanks included."""
    rng = random.Random(seed)
    recs = [make_record(i, topic=rng.choice(["a", "bb", "ü"]), queue_id=rng.randrange(3),
                        body_size=rng.randrange(0, 400), tags=rng.choice(["x", None, "😀"]))
            for i in range(n)]
    base = rng.randrange(0, 4) * segment_size + rng.choice([0, 0, 500])
    first = base // 100  # queue offsets that fit the placement check
    return base, bytes(pack_records_py(recs, base, segment_size, lambda t, q: first).data)


def check_index(buf: bytes, base: int, segment_size: int) -> None:
    expected = index_records_py(buf, base, segment_size)
    if speedups is not None:
        assert speedups.index_records(buf, base, segment_size) == expected
    return expected


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 40), st.sampled_from([1024, 4096]),
       st.data())
def test_index_records_on_damaged_logs(seed, n, segment_size, data) -> None:
    base, buf = valid_log(seed, n, segment_size)
    whole = check_index(buf, base, segment_size)
    assert whole == (base + len(buf), "end", whole[2])
    cut = data.draw(st.integers(0, len(buf)))
    check_index(buf[:cut], base, segment_size)
    damaged = bytearray(buf)
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(buf) - 1))
        damaged[at] = data.draw(st.integers(0, 255))
    check_index(bytes(damaged[:cut]), base, segment_size)
    check_index(bytes(damaged), base, segment_size)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=600), st.integers(-5, 1 << 40),
       st.sampled_from([-1, 0, 256, 1024, 1 << 30]))
def test_index_records_fuzz_garbage(buf, base, segment_size) -> None:
    check_index(buf, base, segment_size)


@given(st.integers(0, 10_000), st.integers(0, 20))
def test_index_records_stops_at_zero_fill(seed, zeros) -> None:
    base, buf = valid_log(seed, 5, 4096)
    end, stop, _ = check_index(buf + bytes(zeros), base, 4096)
    assert end == base + len(buf)
    assert stop == ("zero" if zeros >= 4 else "torn" if zeros else "end")


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 30), st.data())
def test_index_records_agrees_with_decode(seed, n, data) -> None:
    """Each run's entries are what decoding every record gives."""
    base, buf = valid_log(seed, n, 4096)
    cut = data.draw(st.integers(0, len(buf)))
    result = check_index(buf[:cut], base, 4096)
    scan = scan_log(buf[:cut], base, 4096)
    assert result is not None
    end, stop, runs = result
    assert (end, stop) == (scan.end, scan.stop)
    entries = []
    for topic, queue_id, first, packed in runs:
        for k in range(len(packed) // CQ_ENTRY_SIZE):
            phys, size, tags = unpack_cq_entry(packed, k * CQ_ENTRY_SIZE)
            entries.append((phys, size, tags, topic, queue_id, first + k))
    expected = []
    for span in scan.spans:
        if not span.blank:
            record, size = decode(buf, span.offset - base, base_offset=base)
            expected.append((span.offset, size, layout.tags_code(record.tags), record.topic,
                             record.queue_id, record.queue_offset))
    assert sorted(entries) == sorted(expected)


@pytest.fixture(params=["c", "python"])
def path(request, monkeypatch) -> str:
    if request.param == "c" and speedups is None:
        pytest.skip("C speedups not built")
    if request.param == "python":
        monkeypatch.setattr(layout, "_speedups", None)
    return request.param


def test_commit_log_same_files_on_both_paths(path, tmp_path: Path) -> None:
    """Append and replicate with one path; the files match the other path's."""
    recs = [make_record(i, queue_id=i % 3, body_size=i % 300) for i in range(120)]
    with MmapCommitLog(str(tmp_path / "m"), segment_size=4096) as master:
        results = master.append_batch(recs[:60]) + [master.append(r) for r in recs[60:]]
        data = master.read(0, master.max_offset)
        queues = {q: master.queue_entries(*q, 0, 200) for q in master.queues()}
    assert [type(r) for r in results] == [AppendResult] * 120
    assert [(r.physical_offset, r.size) for r in results] == [
        (p, s) for p, s, _ in pack_records_py(recs, 0, 4096, lambda t, q: 0).placed]
    assert data == bytes(pack_records_py(recs, 0, 4096, lambda t, q: 0).data)
    with MmapCommitLog(str(tmp_path / "s"), segment_size=4096) as slave:
        rng = random.Random(path)
        pos = 0
        while pos < len(data):
            n = rng.randint(1, 900)
            slave.append_raw(pos, data[pos:pos + n])
            pos += n
        assert slave.read(0, slave.max_offset) == data
        assert {q: slave.queue_entries(*q, 0, 200) for q in slave.queues()} == queues


def test_index_records_on_a_large_buffer() -> None:
    """Buffers of 1 MiB and more are walked without the GIL: same results."""
    base, buf = valid_log(3, 6000, 1 << 22)
    assert len(buf) > 1 << 20
    whole = check_index(buf, base, 1 << 22)
    assert whole[:2] == (base + len(buf), "end")
    damaged = bytearray(buf)
    damaged[len(buf) - 100] ^= 0xFF
    assert check_index(bytes(damaged), base, 1 << 22) is None
    assert check_index(buf + bytes(8), base, 1 << 22)[1] == "zero"


@needs_c
def test_pack_records_c_reads_subclasses_through_attributes() -> None:
    @attrs.frozen
    class Tagged(MessageRecord):
        pass

    recs = [Tagged(topic="t", body=b"x" * i, properties={"TAGS": "a"}) for i in range(5)]
    assert c_pack(recs, 0, 4096, lambda t, q: 0) == pack_records_py(
        recs, 0, 4096, lambda t, q: 0, result_type=AppendResult)
