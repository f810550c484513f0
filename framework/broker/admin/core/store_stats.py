"""A broker's message counts and rates, pure: RocketMQ's ``StoreStatsService`` and ``BrokerStats``.

GET_BROKER_RUNTIME_INFO carries them, and ``mqadmin clusterList`` reads
them (``putTps``, ``getTransferredTps``, the ``msgPut*`` / ``msgGet*``
totals); ``StoreStats.table`` writes the keys as RocketMQ does:

- counters since boot: messages put (``put``: a master's sends, one per
  message of a batch; ``replicated``: the messages and bytes a slave's
  replication added, as RocketMQ's slave counts its dispatched records), and per store
  read of a pull (``looked_up``) one found or one missed read and the
  messages it returned (``getMessageTransferredMsgCount``);
- ``putTps``, ``getFoundTps``, ``getMissTps``, ``getTotalTps``,
  ``getTransferredTps`` (and the spelling RocketMQ 4's tools read,
  ``getTransferedTps``): each counter's rate over the last 10, 60 and 600
  seconds, separated by spaces, from one sample a second (``sample``) as
  ``StoreStatsService`` takes them: a rate needs one sample more than its
  window, and until then RocketMQ writes nothing in its place (``"0.5  "``
  after 20 s); ``getTotalTps`` writes 0.0 instead. Rates are written as
  Java's ``Double.toString`` writes them (``java_double``);
- ``msgPutTotalTodayNow`` / ``msgGetTotalTodayNow``: messages sent to and
  delivered from non-system topics since boot (RocketMQ's
  ``BROKER_PUT_NUMS_WITHOUT_SYSTEM_TOPIC``; a slave's replicated messages
  are not among them, as in RocketMQ); ``...TodayMorning`` and
  ``...YesterdayMorning``: those totals at the last two local midnights
  (0 before), taken by the first sample of a new ``day``;
- ``putMessageTimesTotal`` (at least 1, as RocketMQ writes it),
  ``putMessageSizeTotal``, ``putMessageAverageSize``, ``bootTimestamp`` and
  ``runtime`` (``[ 0 days, 1 hours, 2 minutes, 3 seconds ]``).

``StoreStats`` also counts each topic's puts over the last minute
(``topic_put_tps``: GET_TOPIC_STATS_INFO's ``topicPutTps``), and keeps the
named statistics of VIEW_BROKER_STATS_DATA (``items``: each topic's puts and
each group's deliveries, in messages and bytes). Nothing here
reads a clock: times are passed in, a monotonic clock's for the rates
(``sample``'s milliseconds, ``put``'s seconds) and the broker's epoch clock's
(``triomq.clock.EpochClock``, its store times') for ``boot_ms`` and ``table``'s
``now_ms``.
"""

from __future__ import annotations

import math
from collections import deque
from decimal import Decimal

from triomq.broker.admin.core.minute_counts import MinuteCounts, stats_key
from triomq.broker.admin.core.stats_items import (
    GROUP_GET_NUMS,
    GROUP_GET_SIZE,
    TOPIC_PUT_NUMS,
    TOPIC_PUT_SIZE,
    StatsItems,
)
from triomq.protocol.topic_rules import is_system_topic

__all__ = ["MAX_SAMPLES", "RATE_WINDOWS", "RateSamples", "StoreStats", "java_double",
           "runtime_text"]

#: The windows a rate is given over, in samples (seconds), as RocketMQ gives them.
RATE_WINDOWS = (10, 60, 600)
#: Samples kept: enough for the longest window (``MAX_RECORDS_OF_SAMPLING`` + 1).
MAX_SAMPLES = RATE_WINDOWS[-1] + 1


def java_double(value: float) -> str:
    """``value`` as Java's ``Double.toString`` writes it (``0.0``, ``12.5``, ``1.0E-4``)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    if 1e-3 <= abs(value) < 1e7:
        # Python's repr is plain decimal in this range too, with the same shortest digits.
        return repr(value)
    sign, digits, exponent = Decimal(repr(value)).as_tuple()
    text = "".join(map(str, digits)).rstrip("0") or "0"
    assert isinstance(exponent, int)  # a finite value
    power = exponent + len(digits) - 1
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{power}"


def runtime_text(elapsed_ms: int) -> str:
    """How long a broker ran, as RocketMQ's ``runtime`` key says it."""
    days, rest = divmod(max(0, elapsed_ms), 86_400_000)
    hours, rest = divmod(rest, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    return (f"[ {days:,} days, {hours} hours, {minutes} minutes, {rest // 1000} seconds ]")


class RateSamples:
    """One counter's samples, ``(milliseconds, total)``, the newest ``MAX_SAMPLES``."""

    def __init__(self) -> None:
        self._samples: deque[tuple[int, int]] = deque(maxlen=MAX_SAMPLES)

    def sample(self, now_ms: int, total: int) -> None:
        self._samples.append((now_ms, total))

    def rate(self, window: int) -> float | None:
        """The counter's rate a second between the newest sample and the one ``window``
        samples before it; None until there is one."""
        if len(self._samples) <= window:
            return None
        begin, end = self._samples[-(window + 1)], self._samples[-1]
        elapsed = end[0] - begin[0]
        if elapsed <= 0:  # a clock stepped back: no rate rather than Java's Infinity
            return None
        return (end[1] - begin[1]) / elapsed * 1000

    def rates_text(self) -> str:
        """The rates over ``RATE_WINDOWS``, as RocketMQ joins them."""
        return " ".join("" if r is None else java_double(r)
                        for r in map(self.rate, RATE_WINDOWS))


class StoreStats:
    """A broker's counters since ``boot_ms`` (epoch ms), their samples and the midnight
    totals."""

    def __init__(self, boot_ms: int) -> None:
        self.boot_ms = boot_ms
        self.put_messages = 0
        self.put_bytes = 0
        self.get_found = 0
        self.get_miss = 0
        self.get_transferred = 0
        #: Messages sent to / delivered from non-system topics.
        self.user_put = 0
        self.user_get = 0
        self._put_samples = RateSamples()
        self._found_samples = RateSamples()
        self._miss_samples = RateSamples()
        self._transferred_samples = RateSamples()
        self._topic_puts = MinuteCounts()
        self.items = StatsItems()
        self._day: int | None = None
        #: (put, get) totals at the last local midnight and the one before.
        self.today_morning = (0, 0)
        self.yesterday_morning = (0, 0)

    # -- what the handlers count ------------------------------------------------

    def put(self, topic: str, messages: int, size: int, now: float) -> None:
        """A send stored ``messages`` messages of ``topic``, ``size`` bytes in all."""
        self.put_messages += messages
        self.put_bytes += size
        self._topic_puts.add(topic, messages, now)
        self.items.add(TOPIC_PUT_NUMS, topic, messages)
        self.items.add(TOPIC_PUT_SIZE, topic, size)
        if not is_system_topic(topic):
            self.user_put += messages

    def replicated(self, messages: int, size: int) -> None:
        """A slave's replication added ``messages`` messages, ``size`` bytes, to its log."""
        self.put_messages += max(0, messages)
        self.put_bytes += max(0, size)

    def looked_up(self, messages: int) -> None:
        """A pull read the store and found ``messages`` messages (0: a miss)."""
        if messages > 0:
            self.get_found += 1
            self.get_transferred += messages
        else:
            self.get_miss += 1

    def delivered(self, group: str, topic: str, messages: int, size: int) -> None:
        """A pull of ``group`` answered FOUND with ``messages`` messages of ``topic``,
        ``size`` bytes in all."""
        key = stats_key(topic, group)
        self.items.add(GROUP_GET_NUMS, key, messages)
        self.items.add(GROUP_GET_SIZE, key, size)
        if not is_system_topic(topic):
            self.user_get += messages

    def topic_put_tps(self, topic: str, now: float) -> float:
        """Messages put to ``topic`` a second over the last minute."""
        return self._topic_puts.tps(topic, now)

    # -- once a second ----------------------------------------------------------

    def sample(self, now_ms: int, day: int) -> None:
        """Take the second's samples; ``day`` numbers the local date (its first sample
        moves the midnight totals, as RocketMQ's ``BrokerStats.record`` at midnight)."""
        self._put_samples.sample(now_ms, self.put_messages)
        self._found_samples.sample(now_ms, self.get_found)
        self._miss_samples.sample(now_ms, self.get_miss)
        self._transferred_samples.sample(now_ms, self.get_transferred)
        if self._day is not None and day != self._day:
            self.yesterday_morning = self.today_morning
            self.today_morning = (self.user_put, self.user_get)
        self._day = day

    # -- GET_BROKER_RUNTIME_INFO ------------------------------------------------

    def _total_tps(self) -> str:
        rates = []
        for window in RATE_WINDOWS:
            found, miss = self._found_samples.rate(window), self._miss_samples.rate(window)
            rates.append(java_double((found or 0.0) + (miss or 0.0)))
        return " ".join(rates)

    def table(self, now_ms: int) -> dict[str, str]:
        """The runtime-info keys these counters give at ``now_ms`` (see the module)."""
        transferred = self._transferred_samples.rates_text()
        times = max(1, self.put_messages)
        return {
            "bootTimestamp": str(self.boot_ms),
            "runtime": runtime_text(now_ms - self.boot_ms),
            "putMessageTimesTotal": str(times),
            "putMessageSizeTotal": str(self.put_bytes),
            "putMessageAverageSize": java_double(self.put_bytes / times),
            "putTps": self._put_samples.rates_text(),
            "getFoundTps": self._found_samples.rates_text(),
            "getMissTps": self._miss_samples.rates_text(),
            "getTotalTps": self._total_tps(),
            "getTransferredTps": transferred,
            "getTransferedTps": transferred,
            "msgPutTotalTodayNow": str(self.user_put),
            "msgGetTotalTodayNow": str(self.user_get),
            "msgPutTotalTodayMorning": str(self.today_morning[0]),
            "msgGetTotalTodayMorning": str(self.today_morning[1]),
            "msgPutTotalYesterdayMorning": str(self.yesterday_morning[0]),
            "msgGetTotalYesterdayMorning": str(self.yesterday_morning[1]),
        }
