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
"""

import asyncio
import os
import signal
import time
from subprocess import Popen

import pytest

from taskiq_fanin import FindingKind, GroupStatus, group_status, sweep
from tests.fault_harness import Rig, alive, fault_rig, summary, the_child
from tests.harness import eventually
from tests.test_faults import completed_and_drained, continuations, plan

pytestmark = [pytest.mark.faults, pytest.mark.integration]

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
    group_id, task_id = "quiet", f"quiet.{KILLED}"
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
    assert pending_idle == 1  # XAUTOCLAIM would take it, but no read returned
    assert starts_while_quiet == 1
    assert state_while_quiet == "open"
    assert total_starts == 2  # the killed run, and the one the nudge brought back
    assert len(ran) == 1
    assert (ran[0]["succeeded"], ran[0]["lost"]) == (MEMBERS, 0)


async def test_on_a_quiet_stream_the_sweep_redrives_a_killed_member_past_its_deadline(
    tmp_path, monkeypatch
):
    group_id, task_id = "swept", f"swept.{KILLED}"
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
            report = await sweep(rig.app.broker, policy="redrive")
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
    return (await status(rig, group_id)).overdue() and await idle_pending(rig) == 1


async def test_on_a_list_broker_a_killed_member_never_comes_back_but_is_redriven(
    tmp_path, monkeypatch
):
    group_id, task_id = "listed", f"listed.{KILLED}"
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
            report = await sweep(app.broker, policy="redrive")
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
