"""An error continuation runs once, however a failure's aftermath is interrupted.

A chain's ``on_error`` and a group's (``failure_policy="fail"``) are bodies the
library kicks like any continuation: a worker SIGKILLed just after the kick,
before what comes next (the compensations, the dispatch's record) leaves the
sweep to kick it again, and both copies reach a worker. Real ``taskiq worker``
processes of ``tests.fault_app`` on a RedisStreamBroker; every count is read
from the observation server once the stream is drained (``Rig.drained``), so a
second run would have shown. The guard itself, the sweep's re-kicks of a lost
``on_error`` in the test process, and taskiq's retry middlewares on one that
fails are ``tests/test_on_error_guard.py``'s.
"""

import json
import os
import signal
import time

import pytest

from taskiq_fanin import ChainHandle, Signature, chain, group, sweep
from taskiq_fanin.domain.config import DEFAULT_MAX_REDRIVES
from taskiq_fanin.domain.ids import undo_chain_id
from taskiq_fanin.inspection import chain_status
from taskiq_fanin.models import Chain, Group
from taskiq_fanin.sweeping import FindingKind, SweepAction, SweepReport
from tests.fault_harness import (
    RECOVERY,
    SHORT_LEASE,
    Rig,
    alive,
    fault_rig,
    killed_by_kill_switch,
    nudging,
    state_of,
    summary,
    sweep_until,
)
from tests.harness import eventually


def saga(rig: Rig, chain_id: str) -> Chain:
    """Two steps that each have a compensation, then one that fails for good."""
    app = rig.app
    return chain(
        Signature.of(app.step, 0, chain_id, 0).with_compensation(
            Signature.of(app.compensate, chain_id, 0)
        ),
        Signature.of(app.step, chain_id, 1).with_compensation(
            Signature.of(app.compensate, chain_id, 1)
        ),
        Signature.of(app.fail_step, chain_id),
        on_error=app.on_error,
        chain_id=chain_id,
    )


def failing_group(rig: Rig, group_id: str, members: int) -> Group:
    """Members that all fail, under failure policy ``fail``: the group's
    ``on_error`` runs (``group_on_error``, with how many members)."""
    app = rig.app
    return group(
        [Signature.of(app.failing_member, group_id, i) for i in range(members)],
        on_error=app.group_failed,
        failure_policy="fail",
        group_id=group_id,
    )


async def _hung(rig: Rig) -> int:
    """Wait until a body chosen to hang (``HANG``) hangs: its worker's pid."""
    await eventually(lambda: rig.flagged("hung"), what="on_error to hang")
    return int(await rig.flag("hung") or 0)


async def _ran(rig: Rig, name: str) -> list[object]:
    """What the ``on_error`` bodies that ran to their end said (``name``: the
    chain's ``on_error`` or the group's ``group_on_error``)."""
    return [json.loads(item) for item in await rig.listed(name)]


async def _copies(rig: Rig, task_id: str) -> tuple[int, int]:
    """How many times the body with ``task_id`` began, and was delivered."""
    starts = (await rig.counted("started")).get(task_id, 0)
    return starts, await rig.delivered_id(task_id)


@pytest.mark.faults
async def test_a_chain_whose_worker_died_after_kicking_on_error_runs_it_once(
    tmp_path, monkeypatch
):
    """The worker dies once ``on_error`` is on the stream, before the
    compensations are kicked: the chain stays ``failing``; the sweep kicks
    ``on_error`` again and starts the compensations. Both copies of ``on_error``
    are delivered; one runs."""
    async with fault_rig(
        tmp_path, monkeypatch, KILL_AFTER="on_error", FINALISER_LEASE="1", DEADLINE="2"
    ) as rig:
        started = time.monotonic()
        with rig.worker("a"), rig.worker("b"):
            handle = await saga(rig, "saga").kiq(rig.app.broker)
            await eventually(lambda: rig.flagged("killed"), what="the worker to die")
            pid, sent = await killed_by_kill_switch(rig)
            failing = await handle.status()
            async with nudging(rig):
                _, sweeps = await sweep_until(rig, FindingKind.CHAIN_FAILING)
                await eventually(
                    lambda: rig.failed_and_drained(handle),
                    timeout=RECOVERY,
                    what="the chain to end and the stream to drain",
                )
            on_errors = await _ran(rig, "on_error")
            deliveries = await rig.delivered_id("saga~on_error")
            compensations = await rig.listed("compensations")
            status = await handle.status()

    summary(
        "chain SIGKILLed after kicking on_error",
        faults="1 SIGKILL (in post_send of on_error)",
        sweeps=sweeps,
        on_error_deliveries=deliveries,
        on_error_run=len(on_errors),
        compensations_run=len(compensations),
        seconds=round(time.monotonic() - started, 1),
    )
    assert not alive(pid)
    assert (sent, failing.state.value) == ("saga~on_error", "failing")
    assert deliveries >= 2  # the dead worker's kick and the sweep's
    assert on_errors == [["saga", 2]]
    assert compensations == ["saga~1", "saga~0"]  # each once, last first
    assert (status.state.value, status.failed_step) == ("failed", 2)


#: What a worker's guard logs when it refuses a copy of the group's on_error.
REFUSED = (
    "Group grp: continuation skipped",
    "Group grp: continuation running elsewhere",
)


@pytest.mark.faults
async def test_a_group_whose_finaliser_died_after_kicking_on_error_runs_it_once(
    tmp_path, monkeypatch
):
    """Under failure policy ``fail``: the finaliser dies once the group's
    ``on_error`` is on the stream, before the dispatch is recorded; the sweep
    dispatches it again, unless the first copy completed the group before it
    looked. However many copies are delivered, one runs."""
    members = 3
    async with fault_rig(
        tmp_path, monkeypatch, KILL_AFTER="continuation", FINALISER_LEASE="1"
    ) as rig:
        app = rig.app
        started = time.monotonic()
        with rig.worker("a"), rig.worker("b"):
            await failing_group(rig, "grp", members).kiq(app.broker)
            await eventually(lambda: rig.flagged("killed"), what="the worker to die")
            pid, sent = await killed_by_kill_switch(rig)

            found: list[FindingKind] = []

            async def swept_until_completed_and_drained() -> bool:
                # The sweep dispatches it again (finaliser_lost), unless a
                # redelivered member's retry of the finalising got there first.
                found.extend(f.kind for f in (await sweep(app.broker)).findings)
                return await rig.drained() and await state_of(rig, "grp") == "completed"

            async with nudging(rig):
                await eventually(
                    swept_until_completed_and_drained,
                    timeout=RECOVERY,
                    what="the group to complete and the stream to drain",
                )

                # Drained: every copy dispatched (the sweep's, or a redelivered
                # claimant's, unless the first copy completed the group before
                # either looked) has been delivered and finished with.
                await eventually(rig.drained, timeout=RECOVERY, what="the drain")
            refused = any(said in rig.worker_logs() for said in REFUSED)
            ran = await _ran(rig, "group_on_error")
            deliveries = await rig.delivered_id("grp~on_error")

    summary(
        "group finaliser SIGKILLed after kicking on_error",
        faults="1 SIGKILL (in post_send of the group's on_error)",
        sweep_findings=sorted({kind.value for kind in found}),
        on_error_deliveries=deliveries,
        on_error_run=len(ran),
        second_copy_refused=refused,
        seconds=round(time.monotonic() - started, 1),
    )
    assert not alive(pid)
    assert sent == "grp~on_error"
    assert deliveries >= 1
    assert ran == [["grp", members]]


@pytest.mark.faults
async def test_an_on_error_whose_worker_is_killed_mid_run_runs_again_once(
    tmp_path, monkeypatch
):
    """The guard holds no dead copy's lease for ever: the copy the broker
    delivers again after the worker died runs once the lease has run out."""
    async with fault_rig(
        tmp_path, monkeypatch, HANG="mid~on_error", DEADLINE="8", **SHORT_LEASE
    ) as rig:
        started = time.monotonic()
        with rig.worker("a"), rig.worker("b"):
            await saga(rig, "mid").kiq(rig.app.broker)
            pid = await _hung(rig)
            os.kill(pid, signal.SIGKILL)

            async def ran_and_drained() -> bool:
                return await rig.count("on_error") >= 1 and await rig.drained()

            async with nudging(rig) as nudges:
                await eventually(
                    ran_and_drained, timeout=RECOVERY, what="on_error to run again"
                )
            on_errors = await _ran(rig, "on_error")
            starts, deliveries = await _copies(rig, "mid~on_error")

    summary(
        "on_error SIGKILLed mid-run",
        faults="1 SIGKILL",
        on_error_deliveries=deliveries,
        on_error_starts=starts,
        on_error_completed=len(on_errors),
        nudges=nudges.sent,
        seconds=round(time.monotonic() - started, 1),
    )
    assert not alive(pid)
    assert deliveries >= 2  # the killed delivery, and the one after it
    assert starts >= 2
    assert on_errors == [["mid", 2]]


# -- a broker that never redelivers ----------------------------------------------

#: What a worker's guard logs when it refuses a copy of the chain's on_error.
ON_ERROR_REFUSED = "Chain lst: on_error running elsewhere"


async def _failed(handle: ChainHandle) -> bool:
    return (await handle.status()).state.value == "failed"


async def _list_drained(rig: Rig) -> bool:
    """Nothing waits in the list, and no body runs in a live worker."""
    if await rig.redis.llen(rig.app.QUEUE):
        return False
    bodies = await rig.counted("running")
    return not any(count and alive(int(pid)) for pid, count in bodies.items())


@pytest.mark.faults
async def test_on_a_list_broker_an_on_error_refused_then_killed_runs_again_once(
    tmp_path, monkeypatch
):
    """ListQueueBroker never redelivers: the copy of ``on_error`` the guard
    refused while the first ran is gone, and the first goes with its SIGKILLed
    worker. The sweep kicks it again once its run lease has run out: it runs to
    its end once more, and the chain's compensations ran once."""
    async with fault_rig(
        tmp_path,
        monkeypatch,
        BROKER="list",
        HANG="lst~on_error",
        DUPLICATE="lst~on_error",
        DEADLINE="8",
        **SHORT_LEASE,
    ) as rig:
        started = time.monotonic()
        with rig.worker("a"), rig.worker("b"):
            handle = await saga(rig, "lst").kiq(rig.app.broker)
            pid = await _hung(rig)
            await eventually(
                lambda: _said(rig, ON_ERROR_REFUSED), what="its other copy refused"
            )
            await eventually(lambda: _failed(handle), what="the chain to fail")
            # The compensations end first: a list broker would lose a step of
            # theirs that the killed worker had taken (the sweep's, not this).
            await eventually(lambda: _undone(rig, "lst"), what="the compensations")
            os.kill(pid, signal.SIGKILL)
            # Both copies were taken off the list: nothing is left to come back.
            queued = await rig.redis.llen(rig.app.QUEUE)
            # The app's policy (report): once the lease ran out, reported only.
            reported, sweeps = await sweep_until(rig, FindingKind.ON_ERROR_LOST)
            kicked_on_report = await rig.redis.llen(rig.app.QUEUE)
            reports = await _redriven_until_it_ran(rig, "on_error")
            sweeps += len(reports)
            redispatched = [
                (f.kind, f.action, f.applied) for r in reports for f in r.findings
            ]
            on_errors = await _ran(rig, "on_error")
            starts, deliveries = await _copies(rig, "lst~on_error")
            compensations = await rig.listed("compensations")
            status = await handle.status()

    summary(
        "on_error refused, then SIGKILLed mid-run, on a list broker",
        faults="1 duplicate kick, 1 SIGKILL",
        sweeps=sweeps,
        on_error_deliveries=deliveries,
        on_error_starts=starts,
        on_error_completed=len(on_errors),
        seconds=round(time.monotonic() - started, 1),
    )
    assert not alive(pid)
    assert queued == 0
    lost = [f for f in reported.findings if f.kind is FindingKind.ON_ERROR_LOST]
    assert [(f.group_id, f.action, f.applied) for f in lost] == [
        ("lst", SweepAction.REPORT, True)
    ]
    assert kicked_on_report == 0
    # What is promised: it runs to its end once; the sweep kicked it again at
    # least once and at most max_redrives times (once, unless its copy had not
    # begun a span on, on a loaded machine: a second copy is then refused).
    kicks = [found for found in redispatched if found[1] is SweepAction.REDISPATCH]
    assert set(redispatched) <= {
        (FindingKind.ON_ERROR_LOST, SweepAction.REDISPATCH, True),
        (FindingKind.ON_ERROR_LOST, SweepAction.REPORT, True),  # past the cap
    }
    assert 1 <= len(kicks) <= DEFAULT_MAX_REDRIVES
    assert on_errors == [["lst", 2]]
    assert starts == 2  # the killed run, and one copy the sweep kicked
    assert deliveries == 2 + len(kicks)  # the first, the refused duplicate, ...
    assert compensations == ["lst~1", "lst~0"]  # each once, last first
    assert (status.state.value, status.failed_step) == ("failed", 2)


async def _redriven_until_it_ran(rig: Rig, name: str) -> list[SweepReport]:
    """Sweep (``redrive``) until an ``on_error`` ran to its end (``name``, as
    ``_ran``), then wait until the list drained: the sweeps' reports."""
    reports: list[SweepReport] = []

    async def swept_until_it_ran() -> bool:
        reports.append(await sweep(rig.app.broker, sweep_policy="redrive"))
        return await rig.count(name) >= 1

    await eventually(
        swept_until_it_ran, timeout=30, interval=0.2, what="on_error to run to its end"
    )
    await eventually(lambda: _list_drained(rig), what="the list to drain")
    return reports


async def _undone(rig: Rig, chain_id: str) -> bool:
    """The chain's compensations (a chain of their own) ended."""
    undo = await chain_status(rig.app.broker, undo_chain_id(chain_id))
    return undo.state.value == "done"


async def _said(rig: Rig, line: str) -> bool:
    return line in rig.worker_logs()


#: What a worker's guard logs when it refuses a copy of the group's on_error.
CONTINUATION_REFUSED = "Group glst: continuation running elsewhere"


@pytest.mark.faults
async def test_on_a_list_broker_a_groups_on_error_refused_then_killed_runs_again_once(
    tmp_path, monkeypatch
):
    """The same for a group's ``on_error`` (failure policy ``fail``), a
    continuation: the sweep dispatches it again (``redrive``) once it is overdue
    (its dispatch plus the group's deadline span) and its run lease ran out."""
    members = 3
    async with fault_rig(
        tmp_path,
        monkeypatch,
        BROKER="list",
        HANG="glst~on_error",
        DUPLICATE="glst~on_error",
        DEADLINE="4",
        **SHORT_LEASE,
    ) as rig:
        app = rig.app
        started = time.monotonic()
        with rig.worker("a"), rig.worker("b"):
            await failing_group(rig, "glst", members).kiq(app.broker)
            pid = await _hung(rig)
            await eventually(
                lambda: _said(rig, CONTINUATION_REFUSED), what="its other copy refused"
            )
            os.kill(pid, signal.SIGKILL)
            queued = await rig.redis.llen(rig.app.QUEUE)
            reports = await _redriven_until_it_ran(rig, "group_on_error")
            found = [f.kind for r in reports for f in r.findings]
            await eventually(
                lambda: _state_is(rig, "glst", "completed"), what="the group to end"
            )
            ran = await _ran(rig, "group_on_error")
            starts, deliveries = await _copies(rig, "glst~on_error")

    summary(
        "a group's on_error refused, then SIGKILLed mid-run, on a list broker",
        faults="1 duplicate kick, 1 SIGKILL",
        sweep_findings=sorted({kind.value for kind in found}),
        on_error_deliveries=deliveries,
        on_error_starts=starts,
        on_error_completed=len(ran),
        seconds=round(time.monotonic() - started, 1),
    )
    assert not alive(pid)
    assert queued == 0
    assert FindingKind.CONTINUATION_OVERDUE in found
    assert ran == [["glst", members]]
    assert starts == 2  # the killed run, and the copy the sweep dispatched
    assert deliveries == 3  # the first, the refused duplicate, the sweep's


async def _state_is(rig: Rig, group_id: str, state: str) -> bool:
    return await state_of(rig, group_id) == state
