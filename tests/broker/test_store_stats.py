"""The message counters and rates of GET_BROKER_RUNTIME_INFO
(``triomq.broker.admin.core.store_stats``)."""

from __future__ import annotations

import pytest

from triomq.broker.admin.core.store_stats import RateSamples, StoreStats, java_double, runtime_text

BOOT = 1_700_000_000_000


@pytest.mark.parametrize(("value", "text"), [
    (0.0, "0.0"), (-0.0, "-0.0"), (1.0, "1.0"), (0.1, "0.1"), (12.5, "12.5"),
    (2 / 3 * 1000, "666.6666666666666"), (0.001, "0.001"), (9999999.0, "9999999.0"),
    # Java's computerized scientific notation outside [1e-3, 1e7).
    (0.0009, "9.0E-4"), (1e-4, "1.0E-4"), (1e7, "1.0E7"), (12345678.9, "1.23456789E7"),
    (-3.5e-10, "-3.5E-10"), (float("inf"), "Infinity"), (float("nan"), "NaN"),
])
def test_doubles_are_written_as_javas_double_to_string(value: float, text: str) -> None:
    assert java_double(value) == text


def test_the_runtime_is_days_hours_minutes_seconds() -> None:
    assert runtime_text(0) == "[ 0 days, 0 hours, 0 minutes, 0 seconds ]"
    assert runtime_text(90_061_999) == "[ 1 days, 1 hours, 1 minutes, 1 seconds ]"
    # MessageFormat groups thousands.
    assert runtime_text(1234 * 86_400_000) == "[ 1,234 days, 0 hours, 0 minutes, 0 seconds ]"


def test_a_rate_needs_one_sample_more_than_its_window() -> None:
    samples = RateSamples()
    assert samples.rate(10) is None and samples.rates_text() == "  "
    for second in range(11):
        samples.sample(second * 1000, second * 5)
    assert samples.rate(10) == 5.0 and samples.rate(60) is None
    # RocketMQ writes nothing for a window not covered yet: mqadmin reads the first.
    assert samples.rates_text() == "5.0  "
    for second in range(11, 700):
        samples.sample(second * 1000, 50 + (second - 10) * 2)
    assert samples.rates_text() == "2.0 2.0 2.0"
    # The rate is over the samples' own times: a late sample counts its real interval.
    samples.sample(700_000 + 1000, 50 + 690 * 2 + 4)
    assert samples.rate(10) == pytest.approx(24 / 11)


def test_the_table_counts_puts_pulls_and_deliveries() -> None:
    stats = StoreStats(BOOT)
    stats.sample(0, day=1)
    for second in range(1, 12):
        stats.put("orders", 3, 300, now=second)
        stats.looked_up(2)
        stats.looked_up(0)
        stats.delivered("g", "orders", 2, 200)
        stats.sample(second * 1000, day=1)
    stats.put("TBW102", 1, 100, now=12)  # a system topic: no msgPutTotal
    stats.delivered("g", "SCHEDULE_TOPIC_XXXX", 5, 500)
    table = stats.table(BOOT + 61_000)
    assert table["putTps"] == "3.0  "
    assert table["getFoundTps"] == table["getMissTps"] == "1.0  "
    assert table["getTotalTps"] == "2.0 0.0 0.0"
    assert table["getTransferredTps"] == table["getTransferedTps"] == "2.0  "
    assert {k: table[k] for k in ("msgPutTotalTodayNow", "msgGetTotalTodayNow",
                                  "msgPutTotalTodayMorning", "msgGetTotalYesterdayMorning",
                                  "putMessageTimesTotal", "putMessageSizeTotal",
                                  "putMessageAverageSize", "bootTimestamp", "runtime")} == {
        "msgPutTotalTodayNow": "33", "msgGetTotalTodayNow": "22",
        "msgPutTotalTodayMorning": "0", "msgGetTotalYesterdayMorning": "0",
        "putMessageTimesTotal": "34", "putMessageSizeTotal": "3400",
        "putMessageAverageSize": "100.0", "bootTimestamp": str(BOOT),
        "runtime": "[ 0 days, 0 hours, 1 minutes, 1 seconds ]"}
    assert all(isinstance(v, str) for v in table.values())


def test_nothing_put_yet_reads_as_one_put_as_rocketmq_writes_it() -> None:
    table = StoreStats(BOOT).table(BOOT)
    assert (table["putMessageTimesTotal"], table["putMessageAverageSize"]) == ("1", "0.0")
    assert table["putTps"] == "  " and table["getTotalTps"] == "0.0 0.0 0.0"


def test_a_slave_counts_what_replication_added() -> None:
    stats = StoreStats(BOOT)
    stats.replicated(4, 800)
    stats.replicated(-2, -100)  # a log cut to a new master's: no negative count
    table = stats.table(BOOT)
    assert table["putMessageTimesTotal"] == "4" and table["putMessageSizeTotal"] == "800"
    # RocketMQ's slave counts no send: its msgPutTotal stays 0.
    assert table["msgPutTotalTodayNow"] == "0"


def test_each_midnight_moves_the_morning_totals() -> None:
    stats = StoreStats(BOOT)
    stats.sample(0, day=100)
    stats.put("orders", 5, 5, now=0)
    stats.delivered("g", "orders", 2, 200)
    stats.sample(1000, day=100)
    stats.put("orders", 1, 1, now=1)
    stats.sample(2000, day=101)  # the first sample after midnight
    stats.put("orders", 10, 10, now=2)
    stats.sample(3000, day=101)
    table = stats.table(BOOT)
    assert [table[k] for k in ("msgPutTotalYesterdayMorning", "msgPutTotalTodayMorning",
                               "msgPutTotalTodayNow", "msgGetTotalTodayMorning")] == [
        "0", "6", "16", "2"]
    stats.sample(4000, day=102)
    table = stats.table(BOOT)
    assert [table[k] for k in ("msgPutTotalYesterdayMorning", "msgPutTotalTodayMorning",
                               "msgGetTotalYesterdayMorning")] == ["6", "16", "2"]


def test_a_topics_put_rate_is_over_the_last_minute() -> None:
    stats = StoreStats(BOOT)
    stats.put("orders", 30, 30, now=10.0)
    stats.put("orders", 30, 30, now=40.0)
    assert stats.topic_put_tps("orders", 41.0) == 1.0
    assert stats.topic_put_tps("orders", 75.0) == 0.5
    assert stats.topic_put_tps("audit", 41.0) == 0.0
