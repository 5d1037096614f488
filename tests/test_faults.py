"""Nothing lost: faults injected into real processes.

Real ``taskiq worker`` processes of ``tests.fault_app`` on a RedisStreamBroker
(unacknowledged messages come back after a 2 s idle timeout, with the next
message read: ``nudging`` sends one), a redis-server of the test's own that is
restarted, suspended, paused; workers SIGKILLed mid-task.
Every count comes from the observation server, which no fault touches, and is
asserted only once the stream is drained (``Rig.drained``): every message ever
sent was delivered and acknowledged, so a duplicate would have shown.
"""

import asyncio
import json
import logging
import os
import re
import signal
import time
from collections import Counter
from collections.abc import Awaitable, Coroutine
from typing import Any

import pytest
from redis.exceptions import RedisError

from taskiq_fanin import ChainHandle, Signature, chain
from taskiq_fanin.inspection import chain_status, group_status
from taskiq_fanin.sweeping import FindingKind, SweepAction
from tests.fault_harness import (
    AOF,
    POOL_EXHAUSTED,
    RECOVERY,
    RETRY_LOG,
    SHORT_LEASE,
    Rig,
    alive,
    children_of,
    completed_and_drained,
    continuations,
    fault_rig,
    killed_by_kill_switch,
    nudging,
    plan,
    state_of,
    summary,
    sweep_until,
    the_child,
)
from tests.harness import eventually

pytestmark = pytest.mark.faults


async def delivered_at_least(rig: Rig, task_name: str, least: int) -> bool:
    return await rig.delivered(task_name) >= least


def lost(ran: list[dict[str, Any]], members: int) -> int:
    """Members whose outcome the (first) continuation did not receive."""
    return members - int(ran[0]["succeeded"]) if ran else members


#: What a hook logs when it gives up on Redis (worker/middleware.py).
GAVE_UP_LOG = "left unacknowledged to come back"
#: What a step that comes back logs when it finds its next step's kick lost.
NEXT_KICK_LOST_LOG = "kick was lost: kicked again"


@pytest.mark.parametrize(
    ("down_for", "retry_for"),
    [(1.0, 30.0), (4.0, 1.0)],
    ids=["within-retry_for", "past-retry_for"],
)
async def test_a_group_completes_by_itself_across_a_redis_restart_with_aof(
    tmp_path, monkeypatch, down_for, retry_for
):
    """Down for less than ``retry_for``, the hooks wait for Redis; for longer,
    they give up and leave their messages unacknowledged, which the broker
    delivers again once Redis is back."""
    members = 120
    async with fault_rig(
        tmp_path,
        monkeypatch,
        redis_args=AOF,
        MEMBER_SECONDS="0.1",
        RETRY_FOR=str(retry_for),
    ) as rig:
        app = rig.app
        started = time.monotonic()
        with rig.worker("a"), rig.worker("b"):
            await plan(rig, "aof", members)
            await eventually(
                lambda: delivered_at_least(rig, app.member.task_name, 40),
                what="members to be running",
            )
            run_id = (await rig.redis.info("server"))["run_id"]
            # SIGKILL: no shutdown save; every write acknowledged is in the AOF.
            await asyncio.to_thread(rig.main.restart, down_for=down_for, crash=True)
            async with nudging(rig) as nudges:
                await eventually(
                    lambda: completed_and_drained(rig, "aof"),
                    timeout=RECOVERY,
                    what="the group to complete and the stream to drain",
                )
            ran = await continuations(rig)
            restarted = (await rig.redis.info("server"))["run_id"] != run_id
            indexed = await rig.redis.zscore(f"{rig.prefix}:index", "aof")
            delivered = await rig.delivered(app.member.task_name)
        logs = rig.worker_logs()

    summary(
        "redis restarted with AOF",
        faults=f"1 restart (SIGKILL, down {down_for:g} s)",
        retry_for=retry_for,
        members=members,
        member_deliveries=delivered,
        redelivered=delivered - members,
        hook_retries_logged=logs.count(RETRY_LOG),
        hooks_gave_up=logs.count(GAVE_UP_LOG),
        nudges=nudges.sent,
        continuations_run=len(ran),
        outcomes_lost=lost(ran, members),
        sweeps=0,
        seconds=round(time.monotonic() - started, 1),
    )
    assert restarted
    if down_for > retry_for:
        assert logs.count(GAVE_UP_LOG) > 0  # messages left to come back, and they did
    assert len(ran) == 1
    assert ran[0] == {
        "group_id": "aof",
        "succeeded": members,
        "failed": 0,
        "lost": 0,
        "results_in_order": True,
    }
    assert indexed is None  # completed by itself: nothing left for a sweep


async def test_chains_go_on_by_themselves_after_a_restart_longer_than_retry_for(
    tmp_path, monkeypatch
):
    """Past ``retry_for`` the hooks raise, so that taskiq leaves the message
    unacknowledged and it comes back (the work is idempotent). A step whose
    advance gave up comes back (the stream broker redelivers it), and so does
    one whose worker died in the outage (taskiq-redis's read of the stream
    fails, and taskiq starts a new worker process). Its first delivery's run
    lease, no longer renewed, runs out; meanwhile a copy finding it held is
    left unacknowledged too. Every chain goes on to the end.
    """
    chains, steps = 20, 5
    async with fault_rig(
        tmp_path,
        monkeypatch,
        redis_args=AOF,
        STEP_SECONDS="0.1",
        RETRY_FOR="1",
        **SHORT_LEASE,
    ) as rig:
        app = rig.app
        started = time.monotonic()
        with rig.worker("a"), rig.worker("b"):
            handles = await start_chains(rig, "restart", chains, steps)
            await eventually(
                lambda: delivered_at_least(rig, app.step.task_name, 30),
                what="steps to be running",
            )
            await asyncio.to_thread(rig.main.restart, down_for=4.0, crash=True)
            async with nudging(rig) as nudges:
                # Drained: no copy of any step is left that could still run.
                await eventually(
                    lambda: _either(chains_done(handles), rig.drained()),
                    timeout=RECOVERY,
                    what="the chains to end, or the stream to drain",
                )
            statuses = await asyncio.gather(*(handle.status() for handle in handles))
            step_runs = await rig.counted("steps")
        logs = rig.worker_logs()

    states = Counter(status.state.value for status in statuses)
    summary(
        "chains across a restart longer than retry_for",
        faults="1 restart (SIGKILL, down 4 s), retry_for=1",
        chains=chains,
        steps_run=sum(step_runs.values()),
        hooks_gave_up=logs.count(GAVE_UP_LOG),
        steps_skipped=len(re.findall(r"Chain \S+: step \d+ skipped", logs)),
        next_steps_kicked_again=logs.count(NEXT_KICK_LOST_LOG),
        nudges=nudges.sent,
        chain_states=dict(states),
        seconds=round(time.monotonic() - started, 1),
    )
    # Steps whose hooks gave up, and steps whose worker died with its read of
    # the stream (taskiq starts a new one): each is delivered again, and each
    # must go on; one whose advance landed and whose next kick did not kicks
    # the next step again (the guard's KICK_NEXT).
    assert states == {"done": chains}


#: How long Redis stalls, and the library's socket timeout: the stall outlasts
#: the client's own retries (3, each a timeout and a backoff), so the hooks'
#: ``retry_for`` carries the outcomes through.
SIGSTOP_SECONDS = 6.0
CLIENT_PAUSE_MS = 8000
SOCKET_TIMEOUT = 1.0
#: The broker's socket timeout in the stall tests: longer than the stall.
#: taskiq-redis reads the stream through redis-py's default (5 s, no retries),
#: so a stall longer than that kills a worker whose read is in flight (one with
#: a free slot); these tests are about the hooks riding out a stall in a worker
#: that lives (a worker that dies is the SIGKILL tests' case).
STALL_SAFE = {"SOCKET_TIMEOUT": str(SOCKET_TIMEOUT), "BROKER_SOCKET_TIMEOUT": "30"}


@pytest.mark.parametrize("stall", ["sigstop", "client-pause"])
async def test_groups_and_chains_go_on_by_themselves_when_redis_stalls(
    tmp_path, monkeypatch, stall
):
    """Past the socket timeout: replies are lost, requests run when Redis thaws
    (SIGSTOP) or are dropped with their connection (CLIENT PAUSE); the hooks
    retry with the same delivery, and claims and advances are carried on."""
    members, chains, steps = 120, 20, 5
    async with fault_rig(
        tmp_path,
        monkeypatch,
        MEMBER_SECONDS="0.1",
        STEP_SECONDS="0.1",
        **STALL_SAFE,
    ) as rig:
        app = rig.app
        started = time.monotonic()
        with rig.worker("a"), rig.worker("b"):
            await plan(rig, "stall", members)
            handles = await start_chains(rig, "stall", chains, steps)
            await eventually(
                lambda: delivered_at_least(rig, app.member.task_name, 40),
                what="members to be running",
            )
            if stall == "sigstop":
                # The whole server freezes; the kernel still takes connections
                # and requests, which run when it thaws, replies to clients
                # that gave up on them included.
                rig.main.suspend()
                try:
                    await asyncio.sleep(SIGSTOP_SECONDS)  # the fault's length
                finally:
                    rig.main.resume()
            else:
                pause = ("CLIENT", "PAUSE", CLIENT_PAUSE_MS, "ALL")
                await rig.redis.execute_command(*pause)  # type: ignore[no-untyped-call]
            async with nudging(rig) as nudges:
                await eventually(
                    lambda: _all_of(
                        completed_and_drained(rig, "stall"),
                        chains_done(handles),
                    ),
                    timeout=RECOVERY,
                    what="the group and the chains to end, and the stream to drain",
                )
            ran = await continuations(rig)
            indexed = await rig.redis.zscore(f"{rig.prefix}:index", "stall")
            delivered = await rig.delivered(app.member.task_name)
            step_runs = await rig.counted("steps")
            step_deliveries = await rig.delivered(app.step.task_name)
        logs = rig.worker_logs()

    summary(
        f"redis stalled ({stall})",
        faults=f"1 stall of {SIGSTOP_SECONDS:g} s"
        if stall == "sigstop"
        else f"1 CLIENT PAUSE {CLIENT_PAUSE_MS} ALL",
        socket_timeout=SOCKET_TIMEOUT,
        members=members,
        member_deliveries=delivered,
        redelivered=delivered - members,
        chain_steps=chains * steps,
        step_deliveries=step_deliveries,
        steps_run=sum(step_runs.values()),
        hook_retries_logged=logs.count(RETRY_LOG),
        nudges=nudges.sent,
        continuations_run=len(ran),
        outcomes_lost=lost(ran, members),
        sweeps=0,
        seconds=round(time.monotonic() - started, 1),
    )
    assert logs.count(RETRY_LOG) > 0  # the stall reached the hooks, which waited
    assert len(ran) == 1
    assert ran[0]["succeeded"] == members
    assert (ran[0]["failed"], ran[0]["lost"]) == (0, 0)
    assert indexed is None  # completed by itself: nothing left for a sweep
    # Every chain ended by itself, each step run once (the step guard).
    assert step_runs == {
        f"stall{c}~{n}": 1 for c in range(chains) for n in range(steps)
    }


async def test_a_claim_whose_reply_a_stall_lost_is_finalised_by_its_own_retry(
    tmp_path, monkeypatch
):
    """The last member's outcome goes to a frozen Redis: the script call times
    out (its reply is lost) and runs when Redis thaws, claiming the group for
    that delivery; the hook retries with the same delivery, is told that it
    holds the claim, and dispatches the continuation: no sweep is needed."""
    members = 3
    async with fault_rig(tmp_path, monkeypatch, HOLD="claim~2", **STALL_SAFE) as rig:
        started = time.monotonic()
        with rig.worker("a"):
            await plan(rig, "claim", members)
            await eventually(
                lambda: _all_of(_done(rig, "claim", 2), rig.flagged("held")),
                what="two members recorded and the last one running",
            )
            rig.main.suspend()
            try:
                await rig.obs.set(rig.key("go"), 1)  # the last member returns now
                await asyncio.sleep(SIGSTOP_SECONDS)  # the fault's length
            finally:
                rig.main.resume()
            async with nudging(rig) as nudges:
                await eventually(
                    lambda: completed_and_drained(rig, "claim"),
                    timeout=RECOVERY,
                    what="the group to complete and the stream to drain",
                )
            ran = await continuations(rig)
            indexed = await rig.redis.zscore(f"{rig.prefix}:index", "claim")
            continuation_deliveries = await rig.delivered_id("claim~then")
        logs = rig.worker_logs()

    retried = logs.count(f"recording the outcome of task claim~2: {RETRY_LOG}")
    summary(
        "claim reply lost in a stall",
        faults=f"1 stall of {SIGSTOP_SECONDS:g} s",
        socket_timeout=SOCKET_TIMEOUT,
        claim_retries_logged=retried,
        nudges=nudges.sent,
        continuation_deliveries=continuation_deliveries,
        continuations_run=len(ran),
        outcomes_lost=lost(ran, members),
        sweeps=0,
        seconds=round(time.monotonic() - started, 1),
    )
    assert retried > 0  # the claiming call failed, and its hook retried it
    assert len(ran) == 1
    assert ran[0]["succeeded"] == members
    assert indexed is None  # finalised by the claimant itself


async def _done(rig: Rig, group_id: str, count: int) -> bool:
    return (await group_status(rig.fanin, group_id)).done == count


async def start_chains(
    rig: Rig, name: str, chains: int, steps: int
) -> list[ChainHandle]:
    """``chains`` chains ``<name><c>`` of ``steps`` steps each, started together."""
    app = rig.app
    return await asyncio.gather(
        *(
            chain(
                Signature.of(app.step, 0, f"{name}{c}", 0),
                *(Signature.of(app.step, f"{name}{c}", n) for n in range(1, steps)),
                chain_id=f"{name}{c}",
            ).kiq(app.broker)
            for c in range(chains)
        )
    )


async def chains_done(handles: list[ChainHandle]) -> bool:
    try:
        statuses = await asyncio.gather(*(handle.status() for handle in handles))
    except RedisError:
        return False
    return all(status.state.value == "done" for status in statuses)


async def _all_of(*conditions: Awaitable[bool]) -> bool:
    held = [await condition for condition in conditions]
    return all(held)


async def test_a_member_whose_worker_is_killed_mid_run_is_redelivered_and_counted_once(
    tmp_path, monkeypatch
):
    members = 30
    async with fault_rig(
        tmp_path, monkeypatch, MEMBER_SECONDS="0.05", HANG="killed~7"
    ) as rig:
        app = rig.app
        started = time.monotonic()
        with rig.worker("a") as a, rig.worker("b") as b:
            await plan(rig, "killed", members)
            await eventually(lambda: rig.flagged("hung"), what="member 7 to hang")
            pid = int(await rig.flag("hung") or 0)
            workers = {the_child(a), the_child(b)}
            assert pid in workers  # a worker proper, in the middle of member 7
            os.kill(pid, signal.SIGKILL)
            async with nudging(rig) as nudges:
                await eventually(
                    lambda: completed_and_drained(rig, "killed"),
                    timeout=RECOVERY,
                    what="the group to complete and the stream to drain",
                )
            ran = await continuations(rig)
            hung_deliveries = await rig.delivered_id("killed~7")
            delivered = await rig.delivered(app.member.task_name)
            continuation_deliveries = await rig.delivered_id("killed~then")
            # taskiq worker starts a new process in place of the one killed.
            restarted = bool(set(children_of(a.pid) + children_of(b.pid)) - workers)

    summary(
        "worker SIGKILLed mid-member",
        faults="1 SIGKILL",
        members=members,
        member_deliveries=delivered,
        killed_member_deliveries=hung_deliveries,
        worker_restarted=restarted,
        nudges=nudges.sent,
        continuation_deliveries=continuation_deliveries,
        continuations_run=len(ran),
        outcomes_lost=lost(ran, members),
        sweeps=0,
        seconds=round(time.monotonic() - started, 1),
    )
    assert not alive(pid)
    assert hung_deliveries >= 2  # the killed delivery, and the one that ran
    assert len(ran) == 1
    assert ran[0]["succeeded"] == members
    assert (ran[0]["failed"], ran[0]["lost"]) == (0, 0)


async def test_a_finaliser_killed_after_its_claim_is_recovered_by_the_sweep_once(
    tmp_path, monkeypatch
):
    members = 10
    async with fault_rig(
        tmp_path, monkeypatch, KILL_ON="continuation", FINALISER_LEASE="1"
    ) as rig:
        app = rig.app
        started = time.monotonic()
        with rig.worker("a"):
            await plan(rig, "final", members)
            await eventually(lambda: rig.flagged("killed"), what="the finaliser to die")
            pid, sending = await killed_by_kill_switch(rig)
            claimed = await state_of(rig, "final")
            async with nudging(rig) as nudges:
                report, sweeps = await sweep_until(rig, FindingKind.FINALISER_LOST)
                await eventually(
                    lambda: completed_and_drained(rig, "final"),
                    timeout=RECOVERY,
                    what="the continuation to complete and the stream to drain",
                )
            ran = await continuations(rig)
            continuation_deliveries = await rig.delivered_id("final~then")
            delivered = await rig.delivered(app.member.task_name)

    summary(
        "finaliser SIGKILLed after its claim",
        faults="1 SIGKILL (in pre_send of the continuation)",
        members=members,
        member_deliveries=delivered,
        nudges=nudges.sent,
        sweeps=sweeps,
        continuation_deliveries=continuation_deliveries,
        continuations_run=len(ran),
        outcomes_lost=lost(ran, members),
        seconds=round(time.monotonic() - started, 1),
    )
    assert not alive(pid)
    assert (sending, claimed) == ("final~then", "claimed")
    (finding,) = [f for f in report.findings if f.kind is FindingKind.FINALISER_LOST]
    assert (finding.group_id, finding.action, finding.applied) == (
        "final",
        SweepAction.REDISPATCH,
        True,
    )
    assert continuation_deliveries == 1  # only the sweep's dispatch was ever sent
    assert len(ran) == 1
    assert ran[0]["succeeded"] == members


async def test_a_chain_killed_between_failing_and_undoing_is_finished_by_the_sweep(
    tmp_path, monkeypatch
):
    async with fault_rig(
        tmp_path, monkeypatch, KILL_ON="on_error", FINALISER_LEASE="1", DEADLINE="2"
    ) as rig:
        app = rig.app
        started = time.monotonic()
        with rig.worker("a"):
            handle = await chain(
                Signature.of(app.step, 0, "saga", 0).with_compensation(
                    Signature.of(app.compensate, "saga", 0)
                ),
                Signature.of(app.step, "saga", 1).with_compensation(
                    Signature.of(app.compensate, "saga", 1)
                ),
                Signature.of(app.fail_step, "saga"),
                on_error=app.on_error,
                chain_id="saga",
            ).kiq(app.broker)
            await eventually(lambda: rig.flagged("killed"), what="the worker to die")
            pid, sending = await killed_by_kill_switch(rig)
            failing = await handle.status()
            async with nudging(rig) as nudges:
                report, sweeps = await sweep_until(rig, FindingKind.CHAIN_FAILING)
                await eventually(
                    lambda: rig.failed_and_drained(handle),
                    timeout=RECOVERY,
                    what="the chain to end and the stream to drain",
                )
            status = await handle.status()
            on_errors = [json.loads(item) for item in await rig.listed("on_error")]
            compensations = await rig.listed("compensations")
            steps = await rig.counted("steps")
            undo = await chain_status(app.broker, "saga~undo")

    summary(
        "chain SIGKILLed between failing and its compensations",
        faults="1 SIGKILL (in pre_send of on_error)",
        nudges=nudges.sent,
        sweeps=sweeps,
        on_error_run=len(on_errors),
        compensations_run=len(compensations),
        steps_run=sum(steps.values()),
        final_state=status.state.value,
        seconds=round(time.monotonic() - started, 1),
    )
    assert not alive(pid)
    assert (sending, failing.state.value) == ("saga~on_error", "failing")
    (finding,) = [f for f in report.findings if f.kind is FindingKind.CHAIN_FAILING]
    assert (finding.group_id, finding.applied) == ("saga", True)
    assert on_errors == [["saga", 2]]
    assert compensations == ["saga~1", "saga~0"]  # each once, last first
    assert steps == {"saga~0": 1, "saga~1": 1, "saga~fail": 1}
    assert (status.state.value, status.failed_step) == ("failed", 2)
    assert undo.state.value == "done"


async def test_a_burst_of_300_chains_on_a_worker_with_300_slots_all_completes(
    tmp_path, monkeypatch, caplog
):
    chains, steps = 300, 3
    caplog.set_level(logging.WARNING)
    async with fault_rig(tmp_path, monkeypatch, STEP_SECONDS="0.2") as rig:
        app = rig.app
        started = time.monotonic()
        with rig.worker("a", max_async_tasks=chains):
            handles = await asyncio.gather(
                *(
                    chain(
                        Signature.of(app.step, 0, f"burst{i}", 0),
                        *(
                            Signature.of(app.step, f"burst{i}", n)
                            for n in range(1, steps)
                        ),
                        chain_id=f"burst{i}",
                    ).kiq(app.broker)
                    for i in range(chains)
                )
            )
            await eventually(
                lambda: _all_steps_ran_and_drained(rig, chains * steps),
                timeout=RECOVERY,
                what="every step to run and the stream to drain",
            )
            statuses = await asyncio.gather(*(handle.status() for handle in handles))
            runs = await rig.counted("steps")
            delivered = await rig.delivered(app.step.task_name)
        logs = rig.worker_logs()

    states = Counter(status.state.value for status in statuses)
    exhausted = POOL_EXHAUSTED.findall(logs) + [
        r.getMessage() for r in caplog.records if POOL_EXHAUSTED.search(r.getMessage())
    ]
    summary(
        "burst of 300 chains on 300 slots",
        chains=chains,
        steps=chains * steps,
        step_deliveries=delivered,
        steps_run=sum(runs.values()),
        chains_done=states["done"],
        pool_exhausted=len(exhausted),
        seconds=round(time.monotonic() - started, 1),
    )
    assert states == {"done": chains}
    assert set(runs.values()) == {1}  # every step ran, once
    assert exhausted == []


async def _all_steps_ran_and_drained(rig: Rig, steps: int) -> bool:
    return await rig.obs.hlen(rig.key("steps")) >= steps and await rig.drained()


@pytest.mark.parametrize("slow", ["continuation", "chain step"])
async def test_a_continuation_or_step_slower_than_the_idle_timeout_runs_once(
    tmp_path, monkeypatch, slow
):
    """The broker delivers a message again while its first copy still runs (its
    idle timeout is 2 s, and the body runs until another copy was delivered):
    the run guard lets one copy run; a copy that finds it running stays
    unacknowledged, comes back once it is over, and is skipped."""
    name = "slow~then" if slow == "continuation" else "slow~1"
    async with fault_rig(tmp_path, monkeypatch, SLOW=name) as rig:
        app = rig.app
        started = time.monotonic()
        with rig.worker("a"), rig.worker("b"):
            if slow == "continuation":
                await plan(rig, "slow", 5)
            else:
                handle = await chain(
                    Signature.of(app.step, 0, "slow", 0),
                    *(Signature.of(app.step, "slow", n) for n in (1, 2)),
                    chain_id="slow",
                ).kiq(app.broker)

            async def finished() -> bool:
                if slow == "continuation":
                    return await state_of(rig, "slow") == "completed"
                return (await handle.status()).state.value == "done"

            async with nudging(rig) as nudges:
                await eventually(
                    lambda: _all_of(finished(), rig.drained()),
                    timeout=RECOVERY,
                    what=f"{name} to finish and the stream to drain",
                )
            deliveries = await rig.delivered_id(name)
            ended = (await rig.counted("ended_ids")).get(name, 0)
            starts = (await rig.counted("started")).get(name, 0)

    summary(
        f"{slow} slower than the idle timeout",
        faults="redelivered while running",
        deliveries=deliveries,
        deliveries_ended=ended,
        body_starts=starts,
        nudges=nudges.sent,
        seconds=round(time.monotonic() - started, 1),
    )
    assert deliveries >= 2  # delivered again while the first copy ran
    assert starts == 1
    # The stream drained: every copy was acknowledged in the end, the refused
    # ones when they came back after the first copy had completed.
    assert 1 <= ended <= deliveries


@pytest.mark.parametrize("killed", ["continuation", "chain step"])
async def test_a_continuation_or_step_killed_mid_run_runs_again_once(
    tmp_path, monkeypatch, killed
):
    """A copy redelivered after its worker died runs once the dead copy's run
    lease has run out (no longer renewed): the stream broker delivers it again
    after its 2 s idle timeout; while the lease still holds, the guard leaves
    that copy unacknowledged, and it comes back. No sweep is needed.
    """
    hang = "mid~then" if killed == "continuation" else "mid~1"
    async with fault_rig(
        tmp_path, monkeypatch, HANG=hang, DEADLINE="8", **SHORT_LEASE
    ) as rig:
        app = rig.app
        started = time.monotonic()
        with rig.worker("a") as a, rig.worker("b") as b:
            workers = {the_child(a), the_child(b)}
            if killed == "continuation":
                await plan(rig, "mid", 5)
            else:
                handle = await chain(
                    *(Signature.of(app.step, 0, "mid", 0),),
                    *(Signature.of(app.step, "mid", n) for n in (1, 2)),
                    chain_id="mid",
                ).kiq(app.broker)
            await eventually(lambda: rig.flagged("hung"), what=f"{hang} to hang")
            pid = int(await rig.flag("hung") or 0)
            assert pid in workers
            os.kill(pid, signal.SIGKILL)

            async def finished() -> bool:
                if killed == "continuation":
                    return await state_of(rig, "mid") == "completed"
                return (await handle.status()).state.value == "done"

            async with nudging(rig) as nudges:
                # Drained: no copy is left anywhere that could still run it.
                await eventually(
                    lambda: _either(finished(), rig.drained()),
                    timeout=RECOVERY,
                    what=f"{hang} to finish, or the stream to drain",
                )
                await eventually(rig.drained, timeout=RECOVERY, what="the drain")
                done = await finished()
            deliveries = await rig.delivered_id(hang)
            completed_runs = (
                await rig.count("continuations")
                if killed == "continuation"
                else (await rig.counted("steps")).get(hang, 0)
            )

    summary(
        f"{killed} SIGKILLed mid-run",
        faults="1 SIGKILL",
        deliveries=deliveries,
        completed_runs=completed_runs,
        nudges=nudges.sent,
        finished=done,
        sweeps=0,
        seconds=round(time.monotonic() - started, 1),
    )
    assert deliveries >= 2  # the broker did deliver it again
    assert done
    assert completed_runs == 1


async def _either(
    first: Coroutine[Any, Any, bool], second: Coroutine[Any, Any, bool]
) -> bool:
    if await first:
        second.close()  # not needed: never awaited
        return True
    return await second
