"""The planner's header walk (``columns.record_starts``): C and Python agree, cuts are records."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.spark.storegen import sample_records
from tests.spark.test_arrow_decode import packed
from triomq.plugins.spark_export import store_files
from triomq.plugins.spark_export.options import ReadOptions
from triomq.plugins.spark_export.plan import plan_tasks
from triomq.plugins.spark_export.store_files import StoreFiles
from triomq.protocol import columns
from triomq.protocol.columns import record_starts, record_starts_py

RECORDS = sample_records(40, body_size=30)
BUF, PLACED = packed(RECORDS)
STARTS = [p for p, _, _ in PLACED]


@st.composite
def walks(draw):
    """A packed buffer, maybe damaged or cut, and a walk over it from a record start."""
    buf = bytearray(BUF)
    for _ in range(draw(st.integers(0, 3))):
        buf[draw(st.integers(0, len(buf) - 1))] = draw(st.integers(0, 255))
    buf = bytes(buf[:draw(st.integers(0, len(buf)))])
    pos = draw(st.sampled_from(STARTS))
    end = draw(st.integers(0, len(BUF) + 10))
    first_cut = draw(st.integers(-len(BUF), len(BUF)))  # points before pos too
    step = draw(st.integers(1, len(BUF) + 1))
    return buf, pos, end, first_cut, step


@pytest.mark.skipif(not columns.SPEEDUPS, reason="C extension not built or disabled")
@settings(max_examples=300, deadline=None)
@given(walk=walks())
def test_c_walk_is_the_python_walk(walk):
    buf, pos, end, first_cut, step = walk
    assert record_starts(buf, pos, end, first_cut=first_cut, step=step) == record_starts_py(
        buf, pos, end, first_cut, step)


@settings(max_examples=100, deadline=None)
@given(step=st.integers(1, len(BUF)), first_cut=st.integers(0, STARTS[-1]))
def test_cuts_are_the_first_records_at_or_after_the_grid(step, first_cut):
    found = record_starts(BUF, 0, len(BUF), first_cut=first_cut, step=step)
    assert found.stop == len(BUF) and found.last == STARTS[-1]
    grid = range(first_cut, STARTS[-1] + 1, step)
    assert found.cuts == tuple(sorted({min(s for s in STARTS if s >= g) for g in grid}))


def test_walk_stops_at_an_insane_header_and_names_the_last_record():
    damaged = bytearray(BUF)
    damaged[STARTS[10] + 4] ^= 0xFF  # magic of record 10
    found = record_starts(bytes(damaged), 0, len(damaged), step=1)
    assert found.stop == STARTS[10] and found.last == STARTS[9]
    assert found.cuts == tuple(STARTS[:10])
    assert record_starts(b"", 0, 100) == columns.RecordStarts(0, None, ())
    with pytest.raises(ValueError, match="must be positive"):
        record_starts(BUF, 0, 10, step=0)


def test_grid_points_before_the_walk_name_its_first_record():
    pos = STARTS[3]
    assert record_starts(BUF, pos, len(BUF), first_cut=pos - len(BUF)).cuts == (pos,)
    for first_cut in (pos - 1000, -(2**63) + 1):  # far below: C's sums must not overflow
        assert record_starts(BUF, pos, len(BUF), first_cut=first_cut, step=159) == (
            record_starts_py(BUF, pos, len(BUF), first_cut, 159))


def test_planning_cuts_and_log_end_are_the_same_either_way(store, monkeypatch):
    files = StoreFiles.open(store.root)

    def plan():
        tasks = [plan_tasks(files, files.min_offset + 1, store.end,
                            ReadOptions(path=store.root, max_bytes_per_partition=step))
                 for step in (1, 5000, 20000)]
        return tasks, files.log_end(), files.boundary_at_or_below(store.placed[777][0] + 9)

    with_c = plan()
    assert with_c[2] == store.placed[777][0]
    monkeypatch.setattr(columns, "_columns", None)  # the pure-Python walk
    assert plan() == with_c


@settings(max_examples=150, deadline=None)
@given(walk=walks(), chunk=st.integers(8, 2 * len(BUF)), max_cuts=st.none() | st.integers(1, 5))
def test_walking_a_file_in_chunks_is_walking_its_bytes(tmp_path_factory, walk, chunk, max_cuts):
    buf, pos, end, first_cut, step = walk
    path = tmp_path_factory.mktemp("walk") / "segment"
    path.write_bytes(buf)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(store_files, "WALK_CHUNK", chunk)  # records cut by chunks, or bigger
        found = store_files.walk_file(str(path), pos, end, first_cut=first_cut, step=step,
                                      max_cuts=max_cuts)
    whole = record_starts(buf, pos, end, first_cut=first_cut, step=step)
    if max_cuts is None:
        assert found == whole
    else:
        assert found.cuts == whole.cuts[:max_cuts]


#: The grid 0, 159, 318, 477 has a point inside each of records 0, 1 and 2
#: (starts 0, 176, 334, 489, 653): the cuts are records 0 to 3.
STEP = 159


@pytest.mark.parametrize(("file_size", "end", "chunk", "walked"), [
    # Found by hypothesis: the second chunk starts at record 1, after the point
    # 159 it answers; its walk took record 1 as its grid's origin (176, 335)
    # and missed record 2, which starts below end and is whole in the file.
    pytest.param(STARTS[3], STARTS[2] + 1, STARTS[2] - 21, 3, id="chunk-cuts-a-record"),
    pytest.param(STARTS[4], STARTS[3] + 1, STARTS[2], 4, id="record-ends-the-chunk"),
    pytest.param(STARTS[4], STARTS[3] + 1, STARTS[2] + 4, 4, id="chunk-cuts-a-header"),
    # A record the file cuts is no cut: no task can start reading it.
    pytest.param(STARTS[2] + 1, STARTS[2] + 1, STARTS[2] - 21, 2, id="file-cuts-a-record"),
])
def test_a_chunk_walk_keeps_the_grid_of_the_file(tmp_path, monkeypatch, file_size, end, chunk,
                                                 walked):
    path = tmp_path / "segment"
    path.write_bytes(BUF[:file_size])
    monkeypatch.setattr(store_files, "WALK_CHUNK", chunk)
    expected = columns.RecordStarts(STARTS[walked], STARTS[walked - 1], tuple(STARTS[:walked]))
    assert record_starts(BUF[:file_size], 0, end, first_cut=0, step=STEP) == expected
    assert store_files.walk_file(str(path), 0, end, first_cut=0, step=STEP) == expected
    assert store_files.walk_file(str(path), 0, end, first_cut=0, step=STEP,
                                 max_cuts=walked).cuts == expected.cuts
