"""The store conformance suite, run against both in-tree store plugins."""

from triomq.plugins.store_lmdb import LmdbCommitLog, LmdbEntryLog, LmdbMetaStore
from triomq.plugins.store_mmap import FileMetaStore, MmapCommitLog, MmapEntryLog
from triomq.testing.store_models import commitlog_model_test, entrylog_model_test
from triomq.testing.store_suite import CommitLogSuite, EntryLogSuite, MetaStoreSuite


class TestMmapCommitLog(CommitLogSuite):
    factory = staticmethod(MmapCommitLog.open)
    options = {"cq_entries_per_file": 16}
    recover_options = {"full_recovery": True}


class TestLmdbCommitLog(CommitLogSuite):
    factory = staticmethod(LmdbCommitLog.open)
    options = {"map_size": 1 << 20}


class TestMmapEntryLog(EntryLogSuite):
    factory = staticmethod(MmapEntryLog.open)
    options = {"segment_size": 4096}


class TestLmdbEntryLog(EntryLogSuite):
    factory = staticmethod(LmdbEntryLog.open)
    options = {"map_size": 1 << 20}


class TestFileMetaStore(MetaStoreSuite):
    factory = staticmethod(FileMetaStore.open)


class TestLmdbMetaStore(MetaStoreSuite):
    factory = staticmethod(LmdbMetaStore.open)


TestMmapCommitLogModel = commitlog_model_test(TestMmapCommitLog)
TestLmdbCommitLogModel = commitlog_model_test(TestLmdbCommitLog)
TestMmapEntryLogModel = entrylog_model_test(TestMmapEntryLog)
TestLmdbEntryLogModel = entrylog_model_test(TestLmdbEntryLog)
