"""DurableState: the driver's snapshot record survives restarts and rejects garbage."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triomq.consensus.core.confchange import ConfState
from triomq.consensus.core.config import RaftConfig
from triomq.consensus.core.log import Entry, HardState, Snapshot
from triomq.consensus.core.ready import AppendEntries, PersistHardState, SaveSnapshot
from triomq.consensus.durable import DurableState
from triomq.plugin_manager import PluginManager
from triomq.store import StoreCorruption

PLUGINS = PluginManager.discover()


def open_state(directory, scheme="mmap", **options) -> DurableState:
    config = RaftConfig(node_id=1, peers={2: "inproc://n2"}, store_scheme=scheme, **options)
    return DurableState.open(PLUGINS, config, str(directory))


@pytest.mark.parametrize("scheme", ["mmap", "lmdb"])
def test_bootstrap_then_snapshot_then_reload(tmp_path, scheme):
    config = RaftConfig(node_id=1, peers={2: "inproc://n2"}, store_scheme=scheme)
    state = open_state(tmp_path, scheme)
    hard_state, snapshot, entries = state.load(config)
    assert hard_state == HardState(1, 0) and snapshot == Snapshot()
    assert [e.index for e in entries] == [1, 2]
    more = tuple(Entry(i, 2, f"c{i}".encode()) for i in (3, 4, 5))
    conf = ConfState(voters=(1, 2), learners=(3,))
    state.persist([AppendEntries(more), PersistHardState(HardState(2, 1)),
                   SaveSnapshot(Snapshot(4, 2, conf, b"state"))])
    state.close()
    state = open_state(tmp_path, scheme)
    hard_state, snapshot, entries = state.load(config)
    state.close()
    assert hard_state == HardState(2, 1)
    assert snapshot == Snapshot(4, 2, conf, b"state")
    assert entries == [Entry(5, 2, b"c5")]


_CONF_KEYS = ["voters", "learners", "voters_outgoing", "learners_next", "auto_leave"]
_VALUES = st.one_of(st.integers(), st.lists(st.integers()), st.booleans(),
                    st.text(max_size=3), st.none())
_NUMBERS = st.one_of(st.binary(max_size=8), st.integers().map(lambda i: str(i).encode()))
_CONFS = st.one_of(
    st.binary(max_size=64),
    st.dictionaries(st.sampled_from(_CONF_KEYS), _VALUES).map(lambda d: json.dumps(d).encode()),
    st.just(b'{"voters": [1, 2], "learners": [], "voters_outgoing": [], '
            b'"learners_next": [], "auto_leave": false}'),
)


@settings(max_examples=200, deadline=None)
@given(index=_NUMBERS, term=_NUMBERS, conf=_CONFS)
def test_garbage_snapshot_records_are_corruption_or_valid(tmp_path_factory, index, term, conf):
    state = open_state(tmp_path_factory.mktemp("fuzz"))
    try:
        state.meta.put_many({"snapshot.index": index, "snapshot.term": term,
                             "snapshot.conf": conf, "snapshot.data": b"x"})
        try:
            snapshot = state.load_snapshot()
        except StoreCorruption:
            return
        assert snapshot.index >= 0 and snapshot.term >= 0
        state_ids = (*snapshot.conf_state.voters, *snapshot.conf_state.learners,
                     *snapshot.conf_state.voters_outgoing, *snapshot.conf_state.learners_next)
        assert all(i > 0 for i in state_ids)
    finally:
        state.close()
