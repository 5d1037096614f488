"""A worker SIGKILLed between recording a windowed member's outcome and kicking
the member it released: the window is refilled, by redelivery or by the sweep.

Real ``taskiq worker`` processes of ``tests.fault_app``; its kill switch kills
the worker proper in ``pre_send`` of the first member a worker kicks (only an
outcome's release kicks a member there): the outcome is recorded in Redis, the
released member never sent. On ``RedisStreamBroker`` the killed member's
message comes back (unacknowledged, idle past the timeout), is a duplicate, and
kicks what it released once the release's lease ran out. ``ListQueueBroker``
never gives it back: the group stalls with a place of its window empty until
the sweep, past the deadline, re-drives the released member.
"""

import time

import pytest

from taskiq_fanin import Signature, group, sweep
from taskiq_fanin.domain.ids import member_task_id
from taskiq_fanin.inspection import group_status
from taskiq_fanin.sweeping import SweepAction
from tests.fault_harness import (
    RECOVERY,
    Rig,
    alive,
    completed_and_drained,
    continuations,
    fault_rig,
    killed_by_kill_switch,
    nudging,
    summary,
)
from tests.harness import eventually

pytestmark = pytest.mark.faults

MEMBERS, WINDOW = 8, 2
DEADLINE = 2.0


async def plan_windowed(rig: Rig, group_id: str) -> None:
    app = rig.app
    await group(
        [Signature.of(app.member, group_id, index) for index in range(MEMBERS)],
        then=app.publish,
        group_id=group_id,
        max_in_flight=WINDOW,
    ).kiq(app.broker)


async def killed(rig: Rig) -> bool:
    return await rig.flag("killed") is not None


async def test_on_a_stream_the_killed_members_redelivery_kicks_what_it_released(
    tmp_path, monkeypatch
):
    async with fault_rig(
        tmp_path,
        monkeypatch,
        KILL_ON="released",
        FINALISER_LEASE="0.5",  # the release's lease: shorter than the idle timeout
        IDLE_TIMEOUT_MS="1000",
        MEMBER_SECONDS="0.05",
    ) as rig:
        started = time.monotonic()
        with rig.worker("a"), rig.worker("b"):
            await plan_windowed(rig, "refill")
            await eventually(lambda: killed(rig), what="a kill before a kick")
            pid, sending = await killed_by_kill_switch(rig)
            async with nudging(rig) as nudges:
                await eventually(
                    lambda: completed_and_drained(rig, "refill"),
                    timeout=RECOVERY,
                    what="the group to complete and the stream to drain",
                )
            ran = await continuations(rig)
            deliveries = await rig.counted("delivered_ids")

    summary(
        "windowed member SIGKILLed between its record and its kick (stream)",
        members=MEMBERS,
        window=WINDOW,
        nudges=nudges.sent,
        member_deliveries=sum(
            n for task, n in deliveries.items() if task.startswith("refill~")
        ),
        seconds=round(time.monotonic() - started, 1),
    )
    assert not alive(pid)
    assert sending == member_task_id("refill", WINDOW)  # the first one released
    assert deliveries[sending] >= 1  # kicked after all, by the redelivered copy
    assert len(ran) == 1
    assert (ran[0]["succeeded"], ran[0]["lost"]) == (MEMBERS, 0)


async def test_on_a_list_broker_the_sweep_refills_the_window(tmp_path, monkeypatch):
    async with fault_rig(
        tmp_path,
        monkeypatch,
        BROKER="list",
        KILL_ON="released",
        DEADLINE=str(DEADLINE),
        MEMBER_SECONDS="0.05",
    ) as rig:
        with rig.worker("a"), rig.worker("b"):
            await plan_windowed(rig, "stalled")
            await eventually(lambda: killed(rig), what="a kill before a kick")
            pid, sending = await killed_by_kill_switch(rig)
            await eventually(lambda: overdue(rig, "stalled"), what="the deadline")
            stalled = await group_status(rig.fanin, "stalled")
            report = await sweep(rig.app.broker, sweep_policy="redrive")
            await eventually(
                lambda: completed(rig, "stalled"),
                timeout=RECOVERY,
                what="the group to complete",
            )
            ran = await continuations(rig)

    assert not alive(pid)
    released = stalled.done + stalled.failed + stalled.in_flight
    assert stalled.in_flight >= 1  # the released member: never sent
    assert released + stalled.waiting == MEMBERS
    (finding,) = report.findings
    assert (finding.action, finding.applied) == (SweepAction.REDRIVE, True)
    # What the window released and has no outcome: the member never sent, and
    # the killed worker's own (gone with it, from the list), never a waiting one.
    assert int(sending.rsplit("~", 1)[1]) in finding.missing
    assert all(index < released for index in finding.missing)
    assert finding.missing_count == stalled.in_flight
    assert len(ran) == 1
    assert (ran[0]["succeeded"], ran[0]["lost"]) == (MEMBERS, 0)


async def overdue(rig: Rig, group_id: str) -> bool:
    return (await group_status(rig.fanin, group_id)).overdue()


async def completed(rig: Rig, group_id: str) -> bool:
    return (await group_status(rig.fanin, group_id)).state.value == "completed"
