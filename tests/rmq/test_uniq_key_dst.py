"""Review s30: our UNIQ_KEY ids against Java 4.9.4's MessageClientIDSetter, ported below as the reference.

Java (common/src/main/java/org/apache/rocketmq/common/message/MessageClientIDSetter.java, tag
rocketmq-all-4.9.4) takes the start of the month with a ``Calendar`` of the default time zone, i.e. with
that zone's rules for the first of the month (lines 50-61), and writes ``(int)(current - startTime)``
(lines 114-131). rmq/msgid.py takes the start of the month with the UTC offset in force *now*
(``astimezone()`` gives a fixed offset), which is an hour off whenever a DST change lies between the
first of the month and now.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
import time
from collections.abc import Iterator
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocksidecar.rmq.msgid import UniqIdGenerator

IP, PID, MAGIC = bytes([10, 0, 0, 5]), 0xC35B, 0x18B4AAC2
FIX = (IP + PID.to_bytes(2, "big") + MAGIC.to_bytes(4, "big")).hex().upper()


def _java_int(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


def _java_month_start(millis: int, zone: ZoneInfo, add_months: int = 0) -> int:
    """Calendar.getInstance() (default zone), setTimeInMillis, DAY_OF_MONTH=1, 00:00:00.000, then
    add(MONTH, add_months): MessageClientIDSetter.java 4.9.4 lines 51-60 and 76-85."""
    local = dt.datetime.fromtimestamp(millis / 1000, zone)
    month = local.year * 12 + (local.month - 1) + add_months
    start = dt.datetime(month // 12, month % 12 + 1, 1, tzinfo=zone)
    return int(start.timestamp() * 1000)


class JavaIdSetter:
    """MessageClientIDSetter 4.9.4 with FIX_STRING = FIX and COUNTER = 0 (lines 33-48, 50-61, 114-131)."""

    def __init__(self, zone: ZoneInfo, millis: int) -> None:
        self.zone = zone
        self.counter = 0
        self._set_start_time(millis)

    def _set_start_time(self, millis: int) -> None:  # lines 50-61
        self.start = _java_month_start(millis, self.zone)
        self.next_start = _java_month_start(millis, self.zone, 1)

    def create_uniq_id(self, current: int) -> str:  # lines 114-131
        if current >= self.next_start:
            self._set_start_time(current)
        diff = _java_int(current - self.start)
        if -1_000_000 < diff < 0:  # "may cause by NTP"
            diff = 0
        n = self.counter
        self.counter += 1
        return FIX + f"{diff & 0xFFFFFFFF:08X}" + f"{n & 0xFFFF:04X}"


def java_nearly_time_from_id(msg_id: str, now: int, zone: ZoneInfo) -> int:
    """MessageClientIDSetter.getNearlyTimeFromID, 4.9.4 lines 63-88 (an IPv4 id), with the current time
    ``now``: what MQAdminImpl.queryMessageByUniqKey (4.9.4 lines 287-288) starts its index query from,
    less 1000 ms."""
    span = int(msg_id[20:28], 16)  # bytes ipLength+2+4 .. +4
    mon_start = _java_month_start(now, zone)
    if mon_start + span >= now:
        mon_start = _java_month_start(now, zone, -1)
    return mon_start + span


@pytest.fixture
def berlin() -> Iterator[ZoneInfo]:
    """The process's local zone is Europe/Berlin (Java's Calendar.getInstance() zone likewise)."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = "Europe/Berlin"
    time.tzset()
    try:
        yield ZoneInfo("Europe/Berlin")
    finally:
        if old is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = old
        time.tzset()


def _ms(zone: ZoneInfo, year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> int:
    return int(dt.datetime(year, month, day, hour, minute, tzinfo=zone).timestamp() * 1000)


def test_uniq_key_time_part_is_java_s_after_dst_started_this_month(berlin: ZoneInfo) -> None:
    # 2026-03-31 12:00 CEST; 1 March was CET (DST began on 29 March).
    now = _ms(berlin, 2026, 3, 31, 12, 0)
    ours = UniqIdGenerator(ip=IP, pid=PID, magic=MAGIC, now_ms=lambda: now).next_id()
    java = JavaIdSetter(berlin, now).create_uniq_id(now)
    # Expected Java's ms-since-1-March-00:00-CET; ours counts from 1 March 00:00 *+02:00*: 3 600 000 more.
    assert int(ours[20:28], 16) == int(java[20:28], 16), (
        f"time part {int(ours[20:28], 16) - int(java[20:28], 16)} ms off Java's"
    )
    # What a Java tool reads back two hours later (mqadmin queryMsgByUniqueKey / viewMessage start the
    # index query at this time less 1 s): the send time, not an hour after it (which misses the message).
    assert java_nearly_time_from_id(ours, now + 2 * 3_600_000, berlin) == now


def test_uniq_key_time_part_does_not_step_back_an_hour_when_dst_ended_this_month(berlin: ZoneInfo) -> None:
    # The generator first stamps on 15 October (CEST), so its month end is 1 Nov 00:00 +02:00, i.e.
    # 31 Oct 23:00 CET; there it recomputes the month's start with +01:00: an hour later than before.
    clock = [_ms(berlin, 2026, 10, 15, 12, 0)]
    gen = UniqIdGenerator(ip=IP, pid=PID, magic=MAGIC, now_ms=lambda: clock[0])
    gen._counter = itertools.count(0)  # Java's COUNTER starts at 0; deterministic here
    java = JavaIdSetter(berlin, clock[0])
    gen.next_id(), java.create_uniq_id(clock[0])

    t1 = _ms(berlin, 2026, 10, 31, 22, 30)  # CET, before our month end
    clock[0] = t1
    first, java_first = gen.next_id(), java.create_uniq_id(t1)
    clock[0] = t1 + 1
    for _ in range(0xFFFF):  # the 16-bit counter goes round: the next id's counter is first's
        gen.next_id()  # (one by one: a batch of ids, next_ids, skips to 0 rather than wrap inside it)
    for _ in range(0xFFFF):
        java.create_uniq_id(t1 + 1)
    clock[0] = t2 = t1 + 3_600_000  # 23:30 CET, still October
    later, java_later = gen.next_id(), java.create_uniq_id(t2)

    assert java_later[28:] == java_first[28:] and java_later != java_first  # Java: time moved on
    assert later[28:] == first[28:]  # the same counter value, as in Java
    assert later != first, f"UNIQ_KEY {later} issued twice by one generator, an hour apart"
    assert int(later[20:28], 16) - int(first[20:28], 16) == 3_600_000, "the time part stepped back an hour"


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(["Europe/Berlin", "America/New_York", "Australia/Sydney"]),
    st.integers(_ms(ZoneInfo("UTC"), 2026, 1, 1), _ms(ZoneInfo("UTC"), 2027, 1, 1)),
)
def test_uniq_key_time_part_is_java_s_any_day_of_the_year(zone_name: str, now: int) -> None:
    zone = ZoneInfo(zone_name)
    old = os.environ.get("TZ")
    os.environ["TZ"] = zone_name
    time.tzset()
    try:
        ours = UniqIdGenerator(ip=IP, pid=PID, magic=MAGIC, now_ms=lambda: now).next_id()
    finally:
        if old is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = old
        time.tzset()
    java = JavaIdSetter(zone, now).create_uniq_id(now)
    assert ours[:28] == java[:28], (
        f"{zone_name} {dt.datetime.fromtimestamp(now / 1000, zone)}: time part "
        f"{int(ours[20:28], 16) - int(java[20:28], 16)} ms off Java's"
    )
