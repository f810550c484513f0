"""The stream reader's offsets, driven in-process the way Spark drives it."""

from __future__ import annotations

import os

import pytest

from tests.spark.storegen import sample_records
from triomq.plugins.spark_export.errors import SparkExportError
from triomq.plugins.spark_export.options import parse_options
from triomq.plugins.spark_export.source import MessagesStreamReader
from triomq.plugins.spark_export.store_files import StoreFiles


def stream_reader(store, **options):
    opts = parse_options({"path": store.root, **options}, streaming=True)
    return MessagesStreamReader(opts, StoreFiles.open(store.root))


def micro_batch(reader, start):
    end = reader.latestOffset(start, None)
    offsets = [off for part in reader.partitions(start, end)
               for batch in reader.read(part)
               for off in batch.column("physicalOffset").to_pylist()]
    return end, offsets


def test_every_record_once_while_the_log_grows(store):
    reader = stream_reader(store)
    start = reader.initialOffset()
    seen = []
    for i in range(3):
        start, offsets = micro_batch(reader, start)
        seen += offsets
        store.append(sample_records(400, start=3000 + 400 * i))
    start, offsets = micro_batch(reader, start)
    seen += offsets
    assert seen == [p for p, _, _ in store.placed]
    assert start == {store.root: store.end}
    assert micro_batch(reader, start) == (start, [])


def test_latest_offset_follows_the_confirm_offset(store):
    placed = store.placed
    store.set_confirm_offset(placed[1000][0] + 17)  # inside record 1000
    reader = stream_reader(store, committedOnly="true")
    start = reader.initialOffset()
    start, offsets = micro_batch(reader, start)
    assert start == {store.root: placed[1000][0]}
    assert offsets == [p for p, _, _ in placed[:1000]]
    store.set_confirm_offset(placed[2500][0])
    start, offsets = micro_batch(reader, start)
    assert offsets == [p for p, _, _ in placed[1000:2500]]


def test_available_now_pins_the_end(store):
    reader = stream_reader(store)
    reader.prepareForTriggerAvailableNow()
    end_when_started = store.end
    store.append(sample_records(10, start=3000))
    assert reader.latestOffset(reader.initialOffset(), None) == {store.root: end_when_started}


def test_starting_offsets(store):
    assert stream_reader(store, startingOffset="latest").initialOffset() == {store.root: store.end}
    middle = store.placed[700][0]
    assert stream_reader(store, startingOffset=str(middle)).initialOffset() == {store.root: middle}
    with pytest.raises(SparkExportError, match=r"startingOffset: .* not a record boundary"):
        stream_reader(store, startingOffset=str(middle + 1))


def test_offsets_of_another_store_are_refused(store):
    reader = stream_reader(store)
    with pytest.raises(SparkExportError, match="checkpoint has offsets for"):
        reader.partitions({"/elsewhere": 0}, {"/elsewhere": 10})


def test_records_deleted_before_they_were_read_fail_the_batch(store):
    reader = stream_reader(store)
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    first = StoreFiles.open(store.root).segments[0]
    os.remove(first.path)
    with pytest.raises(SparkExportError, match=r"were deleted \(retention\)"):
        reader.partitions(start, end)
