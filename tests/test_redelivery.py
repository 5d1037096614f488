"""When a killed worker's member comes back, on each kind of taskiq-redis broker.

taskiq-redis 1.2.4's ``RedisStreamBroker.listen`` takes back a dead worker's
unacknowledged messages (``XAUTOCLAIM``, idle at least ``idle_timeout`` ms) only
right after one of its ``XREADGROUP`` reads returned a new message: a read that
blocks ``xread_block`` ms and returns nothing goes straight to the next read. On
a quiet queue the member waits for the next message, or for the sweep.
``ListQueueBroker`` hands a message over with ``BRPOP``: a dead worker's member
is gone from Redis, and only the sweep re-drives it from the ledger.

Real ``taskiq worker`` processes of ``tests.fault_app`` (``idle_timeout`` of 1 s
here), the member SIGKILLed with its worker proper mid-body; its body's starts are
counted on the observation server (``started``), which outlives every process.
Then the brokers alone, against an entry a consumer read and never acknowledged
(what a killed worker leaves): which read takes it back on ``RedisStreamBroker``,
and that ``RedisStreamClusterBroker`` never does.
"""

import asyncio
import contextlib
import os
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator
from subprocess import Popen

import pytest
from redis.asyncio import Redis, RedisCluster
from taskiq import AckableMessage, AsyncBroker, BrokerMessage
from taskiq_redis import RedisStreamBroker, RedisStreamClusterBroker

from taskiq_fanin import GroupStatus, sweep
from taskiq_fanin.domain.ids import member_task_id
from taskiq_fanin.inspection import group_status
from taskiq_fanin.sweeping import FindingKind
from tests.fault_harness import (
    Rig,
    alive,
    completed_and_drained,
    continuations,
    fault_rig,
    plan,
    summary,
    the_child,
)
from tests.harness import eventually

pytestmark = pytest.mark.faults

IDLE_TIMEOUT_MS = 1000
MEMBERS = 3
#: The member whose worker is killed while its body runs.
KILLED = 1
#: Seconds: the group's deadline, when the sweep is what recovers the member.
DEADLINE = 2.0


async def status(rig: Rig, group_id: str) -> GroupStatus:
    return await group_status(rig.fanin, group_id)


async def starts(rig: Rig, task_id: str) -> int:
    """Starts of the member's body, by any process (``fault_app.hang_if_chosen``)."""
    return (await rig.counted("started")).get(task_id, 0)


async def kill_the_member_mid_run(
    rig: Rig, group_id: str, workers: list[Popen[bytes]]
) -> tuple[int, float]:
    """Plan the group, wait until the chosen member hangs and the others are done
    (the queue is quiet), SIGKILL the worker proper running it; its pid and when."""
    await plan(rig, group_id, MEMBERS)
    await eventually(lambda: _hung(rig), what="the chosen member to hang")
    pid = int(await rig.flag("hung") or 0)
    assert pid in {the_child(process) for process in workers}
    await eventually(
        lambda: _done_but_one(rig, group_id), what="every other member to be recorded"
    )
    os.kill(pid, signal.SIGKILL)
    killed_at = time.monotonic()
    await eventually(lambda: not alive(pid), what="the worker to die")
    return pid, killed_at


async def _hung(rig: Rig) -> bool:
    return await rig.flag("hung") is not None


async def _done_but_one(rig: Rig, group_id: str) -> bool:
    return (await status(rig, group_id)).done == MEMBERS - 1


async def started_again(rig: Rig, task_id: str, since: float) -> float:
    """Wait until the member's body starts a second time; seconds after ``since``."""

    async def condition() -> bool:
        return await starts(rig, task_id) >= 2

    await eventually(condition, timeout=20, what=f"{task_id} to start again")
    return time.monotonic() - since


async def idle_pending(rig: Rig) -> int:
    """Stream entries left unacknowledged for longer than the idle timeout: what
    XAUTOCLAIM would take, were it run."""
    found = await rig.redis.xpending_range(
        rig.app.STREAM, "taskiq", min="-", max="+", count=10, idle=IDLE_TIMEOUT_MS
    )
    return len(found)


async def test_on_a_quiet_stream_a_killed_member_waits_for_the_next_message(
    tmp_path, monkeypatch
):
    group_id, task_id = "quiet", member_task_id("quiet", KILLED)
    async with fault_rig(
        tmp_path, monkeypatch, HANG=task_id, IDLE_TIMEOUT_MS=str(IDLE_TIMEOUT_MS)
    ) as rig:
        with rig.worker("a") as a, rig.worker("b") as b:
            pid, killed_at = await kill_the_member_mid_run(rig, group_id, [a, b])
            # The one bounded wait for a non-event: three idle timeouts with live
            # workers reading the stream, and nothing else sent. What is checked
            # after it is a state (the entry is idle past the timeout, the body
            # did not start again), and the wait is kept short.
            await asyncio.sleep(3 * IDLE_TIMEOUT_MS / 1000)
            quiet_for = time.monotonic() - killed_at
            pending_idle = await idle_pending(rig)
            starts_while_quiet = await starts(rig, task_id)
            state_while_quiet = (await status(rig, group_id)).state.value

            nudged_at = time.monotonic()
            await rig.app.nudge.kiq()
            after_nudge = await started_again(rig, task_id, nudged_at)
            after_kill = time.monotonic() - killed_at
            await eventually(
                lambda: completed_and_drained(rig, group_id),
                what="the group to complete and the stream to drain",
            )
            ran = await continuations(rig)
            total_starts = await starts(rig, task_id)

    summary(
        "stream broker, quiet queue",
        idle_timeout_ms=IDLE_TIMEOUT_MS,
        quiet_for=round(quiet_for, 2),
        back_after_the_nudge=round(after_nudge, 2),
        back_after_the_kill=round(after_kill, 2),
        starts=total_starts,
    )
    assert not alive(pid)
    # The killed worker's member (and whatever else it had read ahead, which
    # depends on timing: seen as 2 on a busy machine) are idle past the
    # timeout: XAUTOCLAIM would take them, but no read returned anything.
    assert pending_idle >= 1
    assert starts_while_quiet == 1
    assert state_while_quiet == "open"
    assert total_starts == 2  # the killed run, and the one the nudge brought back
    assert len(ran) == 1
    assert (ran[0]["succeeded"], ran[0]["lost"]) == (MEMBERS, 0)


async def test_on_a_quiet_stream_the_sweep_redrives_a_killed_member_past_its_deadline(
    tmp_path, monkeypatch
):
    group_id, task_id = "swept", member_task_id("swept", KILLED)
    async with fault_rig(
        tmp_path,
        monkeypatch,
        HANG=task_id,
        IDLE_TIMEOUT_MS=str(IDLE_TIMEOUT_MS),
        DEADLINE=str(DEADLINE),
    ) as rig:
        with rig.worker("a") as a, rig.worker("b") as b:
            pid, killed_at = await kill_the_member_mid_run(rig, group_id, [a, b])
            await eventually(
                lambda: _overdue_and_idle(rig, group_id),
                what="the deadline, with the entry idle past the idle timeout",
            )
            starts_before_sweep = await starts(rig, task_id)
            state_before_sweep = (await status(rig, group_id)).state.value

            swept_at = time.monotonic()
            report = await sweep(rig.app.broker, sweep_policy="redrive")
            after_sweep = await started_again(rig, task_id, swept_at)
            after_kill = time.monotonic() - killed_at
            await eventually(
                lambda: completed_and_drained(rig, group_id),
                what="the group to complete and the stream to drain",
            )
            ran = await continuations(rig)
            total_starts = await starts(rig, task_id)
            redrives = (await status(rig, group_id)).redrives

    summary(
        "stream broker, quiet queue, sweep",
        idle_timeout_ms=IDLE_TIMEOUT_MS,
        deadline=DEADLINE,
        back_after_the_sweep=round(after_sweep, 2),
        back_after_the_kill=round(after_kill, 2),
        starts=total_starts,
    )
    assert not alive(pid)
    assert (starts_before_sweep, state_before_sweep) == (1, "open")
    (finding,) = report.findings
    assert (finding.kind, finding.missing, finding.applied) == (
        FindingKind.STUCK,
        [KILLED],
        True,
    )
    assert redrives == 1
    # The re-driven copy is a new message: the read that returns it takes back
    # the dead worker's copy too, so the body starts twice more; counted once.
    assert total_starts == 3
    assert len(ran) == 1
    assert (ran[0]["succeeded"], ran[0]["lost"]) == (MEMBERS, 0)


async def _overdue_and_idle(rig: Rig, group_id: str) -> bool:
    return (await status(rig, group_id)).overdue() and await idle_pending(rig) >= 1


async def test_on_a_list_broker_a_killed_member_never_comes_back_but_is_redriven(
    tmp_path, monkeypatch
):
    group_id, task_id = "listed", member_task_id("listed", KILLED)
    async with fault_rig(
        tmp_path, monkeypatch, BROKER="list", HANG=task_id, DEADLINE=str(DEADLINE)
    ) as rig:
        app = rig.app
        with rig.worker("a") as a, rig.worker("b") as b:
            pid, killed_at = await kill_the_member_mid_run(rig, group_id, [a, b])
            # Traffic does not bring it back: a message sent after the kill runs,
            # and the killed member's is nowhere in Redis.
            await app.nudge.kiq()
            await eventually(
                lambda: _nudge_ran(rig), what="a message sent after the kill to run"
            )
            queued_after_kill = await rig.redis.llen(app.QUEUE)
            starts_before_sweep = await starts(rig, task_id)
            await eventually(
                lambda: _overdue(rig, group_id), what="the group's deadline"
            )
            state_before_sweep = (await status(rig, group_id)).state.value

            swept_at = time.monotonic()
            report = await sweep(app.broker, sweep_policy="redrive")
            after_sweep = await started_again(rig, task_id, swept_at)
            after_kill = time.monotonic() - killed_at
            await eventually(
                lambda: _completed_and_list_drained(rig, group_id),
                what="the group to complete and the list to drain",
            )
            ran = await continuations(rig)
            total_starts = await starts(rig, task_id)

    summary(
        "list broker",
        deadline=DEADLINE,
        back_after_the_sweep=round(after_sweep, 2),
        back_after_the_kill=round(after_kill, 2),
        starts=total_starts,
    )
    assert not alive(pid)
    assert queued_after_kill == 0
    assert (starts_before_sweep, state_before_sweep) == (1, "open")
    (finding,) = report.findings
    assert (finding.missing, finding.applied) == ([KILLED], True)
    assert total_starts == 2  # the killed run, and the re-driven one
    assert len(ran) == 1
    assert (ran[0]["succeeded"], ran[0]["lost"]) == (MEMBERS, 0)


async def _nudge_ran(rig: Rig) -> bool:
    return await rig.delivered(rig.app.nudge.task_name) >= 1


async def _overdue(rig: Rig, group_id: str) -> bool:
    return (await status(rig, group_id)).overdue()


async def _completed_and_list_drained(rig: Rig, group_id: str) -> bool:
    """The continuation ran to its end, nothing waits in the list, and no
    continuation body runs in a live worker."""
    if (await status(rig, group_id)).state.value != "completed":
        return False
    if await rig.redis.llen(rig.app.QUEUE):
        return False
    bodies = await rig.counted("running")
    return not any(count and alive(int(pid)) for pid, count in bodies.items())


# -- the broker alone: which read takes a dead consumer's entry back ------------
#
# What a killed worker leaves on a stream is an entry pending under a consumer
# name no live process reads with again: here a consumer that read and never
# acknowledged. A listener of the broker under test runs beside it.

DEAD_CONSUMER = "dead"


def message(body: str) -> BrokerMessage:
    """A message for the broker alone: only its bytes are looked at."""
    return BrokerMessage(
        task_id=body, task_name="nudge", message=body.encode(), labels={}
    )


#: The last message a listener is sent: it stops there.
STOP = b"stop"


@contextlib.asynccontextmanager
async def listening(broker: AsyncBroker) -> AsyncIterator[list[bytes]]:
    """What ``broker.listen()`` yields, in order, while the block runs; each is
    acknowledged, as a worker would once done with it.

    The listener is stopped by a message, not cancelled: a cancelled read of
    the cluster broker could hang.
    """
    got: list[bytes] = []

    async def loop() -> None:
        async for message in broker.listen():
            assert isinstance(message, AckableMessage)
            await message.ack()
            if message.data == STOP:
                return
            got.append(message.data)

    task = asyncio.create_task(loop())
    try:
        yield got
    finally:
        await broker.kick(message(STOP.decode()))
        await asyncio.wait_for(task, timeout=10)


async def _read_by_a_consumer_that_dies(
    redis: Redis | RedisCluster, stream: str
) -> None:
    await redis.xadd(stream, {b"data": b"killed"})
    await redis.xreadgroup("taskiq", DEAD_CONSUMER, {stream: ">"}, count=1)


async def _pending_under(redis: Redis | RedisCluster, stream: str) -> dict[str, int]:
    """Pending entries by consumer."""
    found = await redis.xpending_range(stream, "taskiq", min="-", max="+", count=10)
    return dict(Counter(entry["consumer"].decode() for entry in found))


async def test_the_stream_broker_takes_a_dead_entry_back_after_the_first_read_past_idle(
    redis_client: Redis, redis_url: str, key_prefix: str
) -> None:
    stream = f"{key_prefix}:stream"
    broker = RedisStreamBroker(
        redis_url, queue_name=stream, xread_block=100, idle_timeout=IDLE_TIMEOUT_MS
    )
    await broker.startup()
    try:
        await _read_by_a_consumer_that_dies(redis_client, stream)
        async with listening(broker) as got:
            # A message within the idle timeout: read, and nothing taken back.
            await broker.kick(message("early"))
            await eventually(lambda: got == [b"early"], what="the early message")
            await eventually(
                lambda: _idle_past_timeout(redis_client, stream),
                what="the dead entry to be idle past the idle timeout",
            )
            # The first message after it: its read is followed by XAUTOCLAIM.
            await broker.kick(message("late"))
            await eventually(lambda: len(got) == 3, what="the late message and more")
        pending = await _pending_under(redis_client, stream)
    finally:
        await broker.shutdown()

    assert got == [b"early", b"late", b"killed"]
    assert pending == {}  # the dead entry was taken over, run and acknowledged


async def _idle_past_timeout(redis: Redis, stream: str) -> bool:
    found = await redis.xpending_range(
        stream, "taskiq", min="-", max="+", count=10, idle=IDLE_TIMEOUT_MS
    )
    return [entry["consumer"] for entry in found] == [DEAD_CONSUMER.encode()]


@pytest.mark.cluster
async def test_the_cluster_stream_broker_never_takes_a_dead_entry_back(
    redis_cluster_url: str, key_prefix: str
) -> None:
    stream = f"{key_prefix}:stream"
    broker = RedisStreamClusterBroker(
        redis_cluster_url, queue_name=stream, xread_block=100
    )
    await broker.startup()
    try:
        await _read_by_a_consumer_that_dies(broker.redis, stream)
        async with listening(broker) as got:
            await broker.kick(message("traffic"))
            await eventually(lambda: len(got) == 1, what="the first message")
            # RedisStreamBroker yields the dead entry right after that read;
            # here the next thing yielded is the next message.
            await broker.kick(message("more"))
            await eventually(lambda: len(got) == 2, what="the second message")
        pending = await _pending_under(broker.redis, stream)
        await broker.redis.delete(stream)
    finally:
        await broker.shutdown()

    assert got == [b"traffic", b"more"]
    # The dead entry is left where the dead consumer left it.
    assert pending == {DEAD_CONSUMER: 1}
