"""The store conformance suite: what every ``triomq_log_store`` implementation must do.

Three pytest base classes, one per store kind. To run the suite against a
store, subclass in a test module of your own and name the factory (the
callable your ``triomq_log_store`` hook returns)::

    from triomq.testing.store_suite import CommitLogSuite, EntryLogSuite, MetaStoreSuite
    from my_store import MyCommitLog, MyEntryLog, MyMeta

    class TestMyCommitLog(CommitLogSuite):
        factory = staticmethod(MyCommitLog.open)

    class TestMyEntryLog(EntryLogSuite):
        factory = staticmethod(MyEntryLog.open)

    class TestMyMeta(MetaStoreSuite):
        factory = staticmethod(MyMeta.open)

``triomq.testing.store_models`` adds hypothesis stateful tests of the same
factories against in-memory models: ``commitlog_model_test(TestMyCommitLog)``
and ``entrylog_model_test(TestMyEntryLog)`` return test cases to assign to a
``Test...`` name in the module.

``options`` (a class attribute) is merged into what the suite passes the
factory; the commit-log suite always passes ``segment_size``
(``SEGMENT_SIZE``, small so that blanks and segment crossings happen), and
``recover_options`` when it reopens a log to check that recovery rebuilds
its consume queues as the appends made them (options that make the
factory rebuild them from the log, such as the mmap store's
``{"full_recovery": True}``; none for a store that keeps them with the log
in one transaction). A factory takes ``message_delay_level``: the
``SCHEDULE_TOPIC_XXXX`` entries' tags codes are delivery times by it.
Run with ``pytest``; each test uses ``tmp_path`` and reopens the store to
check persistence.

The suites are ``store_suite_commitlog`` (the commit log) and
``store_suite_raft`` (the entry log and the meta store), over what they
share (``store_suite_base``: the factory plumbing, ``make_record`` and
``same_message``); this module gathers their names.
"""

from __future__ import annotations

from triomq.testing.store_suite_base import SEGMENT_SIZE, Factory, make_record, same_message
from triomq.testing.store_suite_commitlog import CommitLogSuite
from triomq.testing.store_suite_raft import EntryLogSuite, MetaStoreSuite

__all__ = [
    "SEGMENT_SIZE",
    "CommitLogSuite",
    "EntryLogSuite",
    "Factory",
    "MetaStoreSuite",
    "make_record",
    "same_message",
]
