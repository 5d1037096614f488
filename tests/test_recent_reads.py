"""RecentReads: one read per key per ``fresh_for`` however many callers ask, none
kept when it failed, and its waiters not stranded when its reader is cancelled."""

import asyncio

import pytest

from taskiq_fanin.transport import recent_reads
from taskiq_fanin.transport.recent_reads import RecentReads


class Clock:
    """The module's monotonic clock, moved by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(recent_reads.time, "monotonic", clock)
    return clock


async def test_callers_at_once_share_one_read_and_a_fresh_value_is_not_read_again(
    clock: Clock,
) -> None:
    reads = RecentReads[bool](fresh_for=1.0)
    gate = asyncio.Event()
    calls: list[str] = []

    async def read() -> bool:
        calls.append("read")
        await gate.wait()
        return True

    waiting = [asyncio.ensure_future(reads.get("g", read)) for _ in range(100)]
    await asyncio.sleep(0)  # every caller is waiting on the one read
    gate.set()
    assert await asyncio.gather(*waiting) == [True] * 100
    clock.now += 0.9
    assert await reads.get("g", read) is True
    assert calls == ["read"]
    clock.now += 0.1  # a second after the read: read again
    assert await reads.get("g", read) is True
    assert calls == ["read", "read"]
    assert await reads.get("other", read) is True  # each key its own
    assert calls == ["read", "read", "read"]


async def test_a_failed_read_is_shared_with_its_waiters_and_not_kept(
    clock: Clock,
) -> None:
    reads = RecentReads[bool]()
    gate = asyncio.Event()
    answers = iter([ConnectionError("Redis is away"), False])

    async def read() -> bool:
        await gate.wait()
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    first = asyncio.ensure_future(reads.get("g", read))
    second = asyncio.ensure_future(reads.get("g", read))
    await asyncio.sleep(0)
    gate.set()
    for caller in (first, second):
        with pytest.raises(ConnectionError):
            await caller
    assert await reads.get("g", read) is False  # read again at once


async def test_waiters_of_a_cancelled_reader_read_again_themselves(
    clock: Clock,
) -> None:
    reads = RecentReads[bool]()
    gate = asyncio.Event()
    calls: list[str] = []

    async def read() -> bool:
        calls.append("read")
        await gate.wait()
        return True

    reader = asyncio.ensure_future(reads.get("g", read))
    await asyncio.sleep(0)
    waiter = asyncio.ensure_future(reads.get("g", read))
    await asyncio.sleep(0)
    reader.cancel()
    await asyncio.sleep(0)
    gate.set()
    assert await waiter is True
    assert reader.cancelled()
    assert calls == ["read", "read"]


async def test_stale_keys_are_dropped_once_many_were_read(clock: Clock) -> None:
    reads = RecentReads[int]()

    async def read() -> int:
        return 1

    for key in range(recent_reads.PRUNE_AT):
        await reads.get(key, read)
    clock.now += 1.0
    await reads.get("new", read)
    assert len(reads._reads) == 1
