"""An error continuation runs once, however a failure's aftermath is interrupted.

A chain's ``on_error`` and a group's (``failure_policy="fail"``) are bodies the
library kicks like any continuation: a worker SIGKILLed just after the kick,
before what comes next (the compensations, the dispatch's record) leaves the
sweep to kick it again, and both copies reach a worker. Real ``taskiq worker``
processes of ``tests.fault_app`` on a RedisStreamBroker; every count is read
from the observation server once the stream is drained (``Rig.drained``), so a
second run would have shown. Then taskiq's retry middlewares on an ``on_error``
that fails: its retry runs (the guard lets it), and nothing else does; and the
guard's scripts, on fakeredis and a real server.
"""

import asyncio
import json
import os
import signal
import time
from collections.abc import Callable

import pytest
from redis.asyncio import Redis
from taskiq import SimpleRetryMiddleware, SmartRetryMiddleware, TaskiqMiddleware

from taskiq_fanin import (
    ChainFailure,
    ChainHandle,
    FanInMiddleware,
    GroupResult,
    Signature,
    chain,
    group,
    sweep,
)
from taskiq_fanin.api.chains import Chain
from taskiq_fanin.inspection import chain_status, list_chains
from taskiq_fanin.model.config import DEFAULT_MAX_REDRIVES
from taskiq_fanin.model.ids import member_task_id, undo_chain_id
from taskiq_fanin.model.labels import RETRIES_LABEL, retry_labels, takes_over
from taskiq_fanin.store.chain_scripts import ChainScripts
from taskiq_fanin.store.keys import ChainKeys, chain_index_key
from taskiq_fanin.store.pipeline import PipelineBatcher
from taskiq_fanin.store.records import ChainRecord
from taskiq_fanin.store.replies import Begin, Failed
from taskiq_fanin.sweep import chains as sweep_chains
from taskiq_fanin.sweeping import Finding, FindingKind, SweepAction, SweepReport
from tests.fault_harness import Rig, alive, fault_rig, nudging, summary
from tests.harness import (
    SentMessages,
    drained,
    eventually,
    lossy_stream_broker,
    stream_broker,
    worker,
)
from tests.test_faults import (
    RECOVERY,
    SHORT_LEASE,
    killed_by_kill_switch,
    state_of,
    sweep_until,
)


async def _flagged(rig: Rig, name: str) -> bool:
    return await rig.flag(name) is not None


async def _failed_and_drained(rig: Rig, handle: ChainHandle) -> bool:
    return (await handle.status()).state.value == "failed" and await rig.drained()


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
            await eventually(lambda: _flagged(rig, "killed"), what="the worker to die")
            pid, sent = await killed_by_kill_switch(rig)
            failing = await handle.status()
            async with nudging(rig):
                _, sweeps = await sweep_until(rig, FindingKind.CHAIN_FAILING)
                await eventually(
                    lambda: _failed_and_drained(rig, handle),
                    timeout=RECOVERY,
                    what="the chain to end and the stream to drain",
                )
            on_errors = [json.loads(item) for item in await rig.listed("on_error")]
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
            await group(
                [Signature.of(app.failing_member, "grp", i) for i in range(members)],
                on_error=app.group_failed,
                failure_policy="fail",
                group_id="grp",
            ).kiq(app.broker)
            await eventually(lambda: _flagged(rig, "killed"), what="the worker to die")
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
            ran = [json.loads(item) for item in await rig.listed("group_on_error")]
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
            await eventually(lambda: _flagged(rig, "hung"), what="on_error to hang")
            pid = int(await rig.flag("hung") or 0)
            os.kill(pid, signal.SIGKILL)

            async def ran_and_drained() -> bool:
                return await rig.count("on_error") >= 1 and await rig.drained()

            async with nudging(rig) as nudges:
                await eventually(
                    ran_and_drained, timeout=RECOVERY, what="on_error to run again"
                )
            on_errors = [json.loads(item) for item in await rig.listed("on_error")]
            starts = (await rig.counted("started")).get("mid~on_error", 0)
            deliveries = await rig.delivered_id("mid~on_error")

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
            await eventually(lambda: _flagged(rig, "hung"), what="on_error to hang")
            await eventually(
                lambda: _said(rig, ON_ERROR_REFUSED), what="its other copy refused"
            )
            await eventually(lambda: _failed(handle), what="the chain to fail")
            # The compensations end first: a list broker would lose a step of
            # theirs that the killed worker had taken (the sweep's, not this).
            await eventually(lambda: _undone(rig, "lst"), what="the compensations")
            pid = int(await rig.flag("hung") or 0)
            os.kill(pid, signal.SIGKILL)
            # Both copies were taken off the list: nothing is left to come back.
            queued = await rig.redis.llen(rig.app.QUEUE)
            # The app's policy (report): once the lease ran out, reported only.
            reported, sweeps = await sweep_until(rig, FindingKind.ON_ERROR_LOST)
            kicked_on_report = await rig.redis.llen(rig.app.QUEUE)
            redispatched: list[tuple[FindingKind, SweepAction, bool]] = []

            async def swept_until_it_ran() -> bool:
                nonlocal sweeps
                sweeps += 1
                report = await sweep(rig.app.broker, policy="redrive")
                redispatched.extend(
                    (f.kind, f.action, f.applied) for f in report.findings
                )
                return await rig.count("on_error") >= 1

            await eventually(
                swept_until_it_ran,
                timeout=30,
                interval=0.2,
                what="on_error to run to its end",
            )
            await eventually(lambda: _list_drained(rig), what="the list to drain")
            on_errors = [json.loads(item) for item in await rig.listed("on_error")]
            starts = (await rig.counted("started")).get("lst~on_error", 0)
            deliveries = await rig.delivered_id("lst~on_error")
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
            await group(
                [Signature.of(app.failing_member, "glst", i) for i in range(members)],
                on_error=app.group_failed,
                failure_policy="fail",
                group_id="glst",
            ).kiq(app.broker)
            await eventually(lambda: _flagged(rig, "hung"), what="on_error to hang")
            await eventually(
                lambda: _said(rig, CONTINUATION_REFUSED), what="its other copy refused"
            )
            pid = int(await rig.flag("hung") or 0)
            os.kill(pid, signal.SIGKILL)
            queued = await rig.redis.llen(rig.app.QUEUE)
            found: list[FindingKind] = []

            async def swept_until_it_ran() -> bool:
                report = await sweep(app.broker, policy="redrive")
                found.extend(f.kind for f in report.findings)
                return await rig.count("group_on_error") >= 1

            await eventually(
                swept_until_it_ran,
                timeout=30,
                interval=0.2,
                what="on_error to run to its end",
            )
            await eventually(lambda: _list_drained(rig), what="the list to drain")
            await eventually(
                lambda: _state_is(rig, "glst", "completed"), what="the group to end"
            )
            ran = [json.loads(item) for item in await rig.listed("group_on_error")]
            starts = (await rig.counted("started")).get("glst~on_error", 0)
            deliveries = await rig.delivered_id("glst~on_error")

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


#: Seconds: a chain's step span and run lease short enough to pass within a test.
SHORT = 0.3


async def test_a_chains_on_error_lost_before_any_copy_began_is_kicked_again_once(
    redis_url: str, key_prefix: str
) -> None:
    """Its message lost on the way (a list broker's worker killed before the
    guard, a purge): no copy began a step span after the failure. The sweep
    reports it; with ``redrive`` kicks it again, once a span; once it ran to
    its end the chain leaves the index."""
    sent = SentMessages()
    broker, fanin = lossy_stream_broker(
        redis_url, key_prefix, sent, deadline=SHORT, finaliser_lease=SHORT
    )
    ran: list[ChainFailure] = []

    @broker.task
    async def fails() -> None:
        raise RuntimeError("on purpose")

    @broker.task
    async def chain_failed(failure: ChainFailure) -> None:
        ran.append(failure)

    broker.drop = {"lost~on_error"}  # its one kick is lost on its way
    async with worker(broker, max_async_tasks=4) as receiver:
        handle = await chain(
            Signature.of(fails), on_error=chain_failed, chain_id="lost"
        ).kiq(broker)
        await eventually(lambda: _failed(handle), what="the chain to fail")
        reported = await _sweep_until_lost(fanin, policy=None)
        await drained(broker, receiver)
        ran_on_report = len(ran)
        again = await _sweep_until_lost(fanin, policy="redrive")
        await eventually(lambda: len(ran) == 1, what="on_error to run")
        await drained(broker, receiver)
        index = chain_index_key(key_prefix)

        async def pruned() -> bool:
            await sweep(fanin)
            return await fanin.context.redis.zscore(index, "lost") is None

        await eventually(pruned, interval=0.1, what="the chain to leave the index")
        await drained(broker, receiver)

    assert (reported.action, reported.applied, ran_on_report) == (
        SweepAction.REPORT,
        True,
        0,
    )
    assert "no copy began" in reported.note
    assert (again.action, again.applied) == (SweepAction.REDISPATCH, True)
    assert sent.executions_of(chain_failed.task_name) == 1
    assert [(f.chain_id, f.step, f.error.type) for f in ran] == [
        ("lost", 0, "RuntimeError")
    ]


async def test_the_sweep_watches_a_failed_chain_until_its_on_error_ran_to_its_end(
    redis_url: str, key_prefix: str
) -> None:
    """While a copy of ``on_error`` holds its lease, or has released it for a
    retry middleware's next attempt, the sweep leaves it and keeps the chain
    indexed; once the lease ran out it reports it (the app's policy); once a
    copy ran to its end the chain leaves the index. The record's lease and the
    index are set by hand (a worker's death, the sweep's time come)."""
    broker, fanin = stream_broker(redis_url, key_prefix)  # a 60 s lease
    go = asyncio.Event()
    ran: list[ChainFailure] = []

    @broker.task
    async def fails() -> None:
        raise RuntimeError("on purpose")

    @broker.task
    async def chain_failed(failure: ChainFailure) -> None:
        await go.wait()
        ran.append(failure)

    index = chain_index_key(key_prefix)
    record = ChainKeys(key_prefix, "w").record
    seen: list[tuple[str, list[tuple[FindingKind, SweepAction]], bool]] = []

    async def look(moment: str) -> None:
        """Make the chain due, sweep, and note what was found and if indexed."""
        await redis.zadd(index, {"w": 0})
        report = await sweep(fanin)
        found = [(f.kind, f.action) for f in report.findings]
        seen.append((moment, found, await redis.zscore(index, "w") is not None))

    async with worker(broker, max_async_tasks=4) as receiver:
        redis = fanin.context.redis
        handle = await chain(
            Signature.of(fails), on_error=chain_failed, chain_id="w"
        ).kiq(broker)
        await eventually(lambda: _failed(handle), what="the chain to fail")
        await eventually(
            lambda: _on_error_is(redis, record, "running"), what="on_error to begin"
        )
        await look("running")
        await redis.hset(record, "on_error_until", 0)  # released for a retry
        await look("released")
        await redis.hset(record, "on_error_until", 1)  # its worker died long ago
        await look("lease ran out")
        go.set()
        await eventually(lambda: len(ran) == 1, what="on_error to end")
        await eventually(
            lambda: _on_error_is(redis, record, "completed"), what="its completion"
        )
        await look("completed")
        await drained(broker, receiver)

    lost = [(FindingKind.ON_ERROR_LOST, SweepAction.REPORT)]
    assert seen == [
        ("running", [], True),
        ("released", [], True),
        ("lease ran out", lost, True),
        ("completed", [], False),
    ]


async def _on_error_is(redis: Redis, record: str, state: str) -> bool:
    found = await redis.hget(record, "on_error_state")
    return found is not None and found.decode() == state


async def _sweep_until_lost(fanin: FanInMiddleware, *, policy: str | None) -> Finding:
    """Sweep until a sweep finds a chain's ``on_error`` lost: that finding."""
    found: list[Finding] = []

    async def lost() -> bool:
        report = await sweep(fanin, policy=policy)
        found.extend(f for f in report.findings if f.kind is FindingKind.ON_ERROR_LOST)
        return bool(found)

    await eventually(lost, interval=0.05, what="a sweep to find on_error lost")
    (finding,) = found
    return finding


#: How the attempts of a chain's on_error stood when its holder's worker died,
#: and the late copies that may still come (a reclaimed one, a retry it kicked).
_HOLDERS = {
    # Attempt 0 failed and its retry middleware kicked attempt 1; its worker
    # died before it released the lease (or mid-body: nothing comes then).
    "attempt 0": ([0], [0, 1]),
    # Attempt 0 failed and released; attempt 1 ran and its worker died: the
    # stream broker reclaims attempt 1 an idle timeout later.
    "attempt 1": ([0, 1], [0, 1, 2]),
}


@pytest.mark.parametrize("holder", list(_HOLDERS))
async def test_a_late_copy_never_takes_the_lease_over_from_the_sweeps_copy(
    redis_url: str, key_prefix: str, holder: str
) -> None:
    """The copy of ``on_error`` the sweep kicks once the holder's lease ran out
    holds the lease alone: no late copy of the holder's attempt (reclaimed by
    the stream broker), nor the retry the holder kicked, takes it over. The
    attempts before it are played on the record by hand (their message lost)."""
    broker, fanin = lossy_stream_broker(redis_url, key_prefix)
    go = asyncio.Event()
    began: list[ChainFailure] = []

    @broker.task
    async def fails() -> None:
        raise RuntimeError("on purpose")

    @broker.task
    async def chain_failed(failure: ChainFailure) -> None:
        began.append(failure)
        await go.wait()

    played, late = _HOLDERS[holder]
    broker.drop = {"late~on_error"}  # the failure's kick: played by hand
    keys = ChainKeys(key_prefix, "late")
    async with worker(broker, max_async_tasks=4) as receiver:
        redis = fanin.context.redis
        scripts = fanin.context.chain_scripts
        handle = await chain(
            Signature.of(fails), on_error=chain_failed, chain_id="late"
        ).kiq(broker)
        await eventually(lambda: _failed(handle), what="the chain to fail")
        token = (await scripts.read(keys)).token

        async def begin(attempt: int, delivery: str) -> Begin:
            return await scripts.begin_on_error(
                keys, token=token, attempt=attempt, delivery=delivery, lease_ms=60_000
            )

        for attempt in played:
            assert await begin(attempt, f"a{attempt}") is Begin.RUN
            if attempt != played[-1]:
                assert await scripts.release_on_error(
                    keys, token=token, attempt=attempt, span_ms=60_000
                )
        await redis.hset(keys.record, "on_error_until", 1)  # its worker died
        await redis.zadd(chain_index_key(key_prefix), {"late": 0})
        finding = await _sweep_until_lost(fanin, policy="redrive")
        await eventually(lambda: bool(began), what="the sweep's copy to begin")
        answers = {attempt: await begin(attempt, f"late{attempt}") for attempt in late}
        go.set()
        await eventually(
            lambda: _on_error_is(redis, keys.record, "completed"),
            what="on_error to complete",
        )
        await drained(broker, receiver)

    assert (finding.action, finding.applied) == (SweepAction.REDISPATCH, True)
    assert answers == dict.fromkeys(late, Begin.RUNNING_ELSEWHERE)
    assert len(began) == 1


async def test_a_lost_on_error_is_kicked_again_at_most_max_redrives_times(
    redis_url: str, key_prefix: str
) -> None:
    """Every kick of it lost on its way, no copy ever begins: under ``redrive``
    the sweep kicks it again once a span, each counted (``redrives``), at most
    ``max_redrives`` times; past that it reports it, and the chain stays
    indexed (a copy may still come)."""
    broker, fanin = lossy_stream_broker(
        redis_url, key_prefix, deadline=SHORT, finaliser_lease=SHORT, max_redrives=2
    )
    ran: list[ChainFailure] = []

    @broker.task
    async def fails() -> None:
        raise RuntimeError("on purpose")

    @broker.task
    async def chain_failed(failure: ChainFailure) -> None:
        ran.append(failure)

    seen: list[tuple[SweepAction, bool, int]] = []
    async with worker(broker, max_async_tasks=4) as receiver:
        broker.drop = {"cap~on_error"}
        handle = await chain(
            Signature.of(fails), on_error=chain_failed, chain_id="cap"
        ).kiq(broker)
        await eventually(lambda: _failed(handle), what="the chain to fail")

        async def reported_past_the_cap() -> bool:
            broker.drop.add("cap~on_error")  # this kick is lost too
            report = await sweep(fanin, policy="redrive")
            seen.extend(
                (f.action, f.applied, f.redrives)
                for f in report.findings
                if f.kind is FindingKind.ON_ERROR_LOST
            )
            return bool(seen) and seen[-1][0] is SweepAction.REPORT

        await eventually(
            reported_past_the_cap, timeout=10, interval=0.1, what="the cap"
        )
        await drained(broker, receiver)
        indexed = await fanin.context.redis.zscore(chain_index_key(key_prefix), "cap")
        note = await _last_note(fanin, "cap")

    assert seen == [
        (SweepAction.REDISPATCH, True, 1),
        (SweepAction.REDISPATCH, True, 2),
        (SweepAction.REPORT, True, 2),
    ]
    assert "2 re-kicks used" in note
    assert ran == []
    assert indexed is not None


async def _last_note(fanin: FanInMiddleware, chain_id: str) -> str:
    """The note of what a sweep now finds of the chain (a dry run)."""
    await fanin.context.redis.zadd(
        chain_index_key(fanin.context.config.prefix), {chain_id: 0}
    )
    report = await sweep(fanin, policy="redrive", dry_run=True)
    (finding,) = [f for f in report.findings if f.group_id == chain_id]
    return finding.note


async def test_a_released_on_error_whose_retry_is_lost_is_kicked_as_the_next_attempt(
    redis_url: str, key_prefix: str
) -> None:
    """Attempt 0 failed and released its lease for the retry middleware's
    attempt 1, whose message was lost. A span after the release the sweep
    reports it; under ``redrive`` it kicks it again as attempt 1, which runs
    to its end. Attempt 0 is played on the record by hand."""
    sent = SentMessages()
    broker, fanin = lossy_stream_broker(
        redis_url, key_prefix, sent, deadline=SHORT, finaliser_lease=SHORT
    )
    ran: list[ChainFailure] = []

    @broker.task
    async def fails() -> None:
        raise RuntimeError("on purpose")

    @broker.task
    async def chain_failed(failure: ChainFailure) -> None:
        ran.append(failure)

    broker.drop = {"rel~on_error"}  # the failure's kick: played by hand
    keys = ChainKeys(key_prefix, "rel")
    async with worker(broker, max_async_tasks=4) as receiver:
        scripts = fanin.context.chain_scripts
        handle = await chain(
            Signature.of(fails), on_error=chain_failed, chain_id="rel"
        ).kiq(broker)
        await eventually(lambda: _failed(handle), what="the chain to fail")
        token = (await scripts.read(keys)).token
        began = await scripts.begin_on_error(
            keys, token=token, attempt=0, delivery="a0", lease_ms=60_000
        )
        assert await scripts.release_on_error(
            keys, token=token, attempt=0, span_ms=60_000
        )
        reported = await _sweep_until_lost(fanin, policy=None)
        again = await _sweep_until_lost(fanin, policy="redrive")
        await eventually(lambda: len(ran) == 1, what="on_error to run")
        await drained(broker, receiver)

    assert began is Begin.RUN
    assert (reported.action, reported.applied) == (SweepAction.REPORT, True)
    assert "its retry did not begin" in reported.note
    assert (again.action, again.applied) == (SweepAction.REDISPATCH, True)
    (kicked,) = [m for m in sent.executed if m.task_name == chain_failed.task_name]
    assert int(kicked.labels["_retries"]) == 1


async def test_a_watched_failed_member_chain_is_settled_once(
    redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A group member's chain failed; its ``on_error`` runs long, so the sweep
    keeps the chain indexed and visits it again and again: what its end may
    have left undone (the member's outcome) is settled at the first visit
    only, not with a ``recordOutcome`` call at every one."""
    broker, fanin = stream_broker(redis_url, key_prefix)
    go = asyncio.Event()
    settled: list[str] = []
    settle = sweep_chains.settle_member

    async def counted(ctx: object, chain: ChainRecord, *, delivery: str) -> None:
        settled.append(delivery)
        await settle(ctx, chain, delivery=delivery)  # type: ignore[arg-type]

    monkeypatch.setattr(sweep_chains, "settle_member", counted)

    @broker.task
    async def fails() -> None:
        raise RuntimeError("on purpose")

    @broker.task
    async def chain_failed(failure: ChainFailure) -> None:
        await go.wait()

    index = chain_index_key(key_prefix)
    member = member_task_id("gm", 0)  # the member chain's id
    record = ChainKeys(key_prefix, member).record
    async with worker(broker, max_async_tasks=4) as receiver:
        redis = fanin.context.redis
        await group(
            [chain(Signature.of(fails), on_error=chain_failed)],
            failure_policy="fail",
            group_id="gm",
        ).kiq(broker)
        await eventually(
            lambda: _on_error_is(redis, record, "running"), what="on_error to begin"
        )
        for _ in range(3):
            await redis.zadd(index, {member: 0})
            await sweep(fanin)
        go.set()
        await eventually(
            lambda: _on_error_is(redis, record, "completed"), what="its completion"
        )
        await drained(broker, receiver)

    assert len(settled) == 1


async def test_failed_chains_watched_in_the_index_hide_no_running_chain_from_list(
    redis_url: str, key_prefix: str
) -> None:
    """Failed chains the sweep watches (their ``on_error`` lost, reported
    each visit) sit in the chains' index ahead of a running chain: a listing
    of ``limit`` chains still finds the running one."""
    broker, fanin = stream_broker(redis_url, key_prefix)
    await broker.startup()
    try:
        scripts = fanin.context.chain_scripts
        index = chain_index_key(key_prefix)
        for n in range(3):
            keys = ChainKeys(key_prefix, f"f{n}")
            await scripts.start(
                keys, token="tok", names="[]", steps=1, ttl_ms=60_000,
                pending="", deadline_ms=60_000,
            )  # fmt: skip
            await scripts.begin_failing(
                keys, token="tok", step=0, error="{}", delivery="step"
            )
            assert await scripts.end_failing(keys, token="tok")
            await fanin.context.redis.zadd(index, {f"f{n}": n})
        await scripts.start(
            ChainKeys(key_prefix, "run"), token="tok", names="[]", steps=1,
            ttl_ms=60_000, pending="", deadline_ms=60_000,
        )  # fmt: skip
        await fanin.context.redis.zadd(index, {"run": 10})
        listed = await list_chains(fanin, limit=2)
    finally:
        await broker.shutdown()

    assert [status.chain_id for status in listed] == ["run"]


async def test_the_sweeps_copy_takes_no_lease_over_from_a_copy_begun_after_its_kick(
    redis_url: str, key_prefix: str
) -> None:
    """The sweep kicked its copy once the holder's lease ran out; before that
    copy began, the broker brought the holder's message back (reclaimed) and
    it took the lease. The sweep's copy goes as the next attempt, but no
    attempt ended: it takes no lease over, and is left unacknowledged."""
    sent = SentMessages()
    broker, fanin = lossy_stream_broker(redis_url, key_prefix, sent)
    began: list[ChainFailure] = []

    @broker.task
    async def fails() -> None:
        raise RuntimeError("on purpose")

    @broker.task
    async def chain_failed(failure: ChainFailure) -> None:
        began.append(failure)

    broker.drop = {"race~on_error"}  # the failure's kick: played by hand
    keys = ChainKeys(key_prefix, "race")
    async with worker(broker, max_async_tasks=4) as receiver:
        redis = fanin.context.redis
        scripts = fanin.context.chain_scripts
        handle = await chain(
            Signature.of(fails), on_error=chain_failed, chain_id="race"
        ).kiq(broker)
        await eventually(lambda: _failed(handle), what="the chain to fail")
        token = (await scripts.read(keys)).token

        async def begin(delivery: str) -> Begin:
            return await scripts.begin_on_error(
                keys, token=token, attempt=0, delivery=delivery, lease_ms=60_000
            )

        assert await begin("a0") is Begin.RUN
        await redis.hset(keys.record, "on_error_until", 1)  # its worker died
        await redis.zadd(chain_index_key(key_prefix), {"race": 0})
        broker.drop.add("race~on_error")  # the sweep's kick: held back here
        finding = await _sweep_until_lost(fanin, policy="redrive")
        reclaimed = await begin("a0-reclaimed")  # the broker brought a0 back
        kicked = sent.of_task(chain_failed.task_name)[-1]  # the sweep's
        await sent.resend(kicked)  # now the sweep's copy reaches a worker
        await drained(broker, receiver, abandoned=1)  # refused, unacknowledged

    assert (finding.action, finding.applied) == (SweepAction.REDISPATCH, True)
    assert reclaimed is Begin.RUN
    assert int(kicked.labels["_retries"]) == 1
    assert began == []


# -- taskiq's retry middlewares on an on_error that fails -----------------------


def _simple() -> TaskiqMiddleware:
    return SimpleRetryMiddleware(default_retry_count=3)


def _smart() -> TaskiqMiddleware:
    return SmartRetryMiddleware(
        default_retry_count=3,
        default_delay=0,
        use_jitter=False,
        use_delay_exponent=False,
    )


@pytest.mark.parametrize("retry", [_simple, _smart], ids=["simple", "smart"])
@pytest.mark.parametrize("where", ["chain", "group"])
async def test_an_on_error_that_fails_is_retried_and_runs_to_its_end_once(
    redis_url: str,
    key_prefix: str,
    retry: Callable[[], TaskiqMiddleware],
    where: str,
) -> None:
    """``retry_on_error``: its first two attempts fail, the third succeeds; no
    attempt runs twice and none is blocked by the guard."""
    broker, _ = stream_broker(redis_url, key_prefix, retry())
    attempts: list[str] = []
    ended: list[str] = []

    @broker.task
    async def fails() -> None:
        raise RuntimeError("on purpose")

    def attempt(kind: str) -> None:
        attempts.append(kind)
        if len(attempts) < 3:
            raise RuntimeError(f"on_error attempt {len(attempts)} fails")
        ended.append(kind)

    @broker.task(retry_on_error=True, max_retries=3)
    async def chain_failed(failure: ChainFailure) -> None:
        attempt(type(failure).__name__)

    @broker.task(retry_on_error=True, max_retries=3)
    async def group_failed(result: GroupResult) -> None:
        attempt(type(result).__name__)

    async with worker(broker, max_async_tasks=4) as receiver:
        if where == "chain":
            await chain(Signature.of(fails), on_error=chain_failed).kiq(broker)
        else:
            await group(
                [Signature.of(fails)], on_error=group_failed, failure_policy="fail"
            ).kiq(broker)
        await eventually(lambda: len(ended) == 1, what="on_error to succeed")
        await drained(broker, receiver)

    kind = "ChainFailure" if where == "chain" else "GroupResult"
    assert attempts == [kind] * 3
    assert ended == [kind]


# -- the guard's scripts ----------------------------------------------------------


async def _failed_chain(
    client: Redis, key_prefix: str
) -> tuple[ChainScripts, ChainKeys]:
    """A one-step chain failed at its step, its on_error kicked."""
    scripts = ChainScripts(client, PipelineBatcher(client))
    keys = ChainKeys(key_prefix, "c")
    await scripts.start(
        keys, token="tok", names="[]", steps=1, ttl_ms=60_000, pending="",
        deadline_ms=60_000,
    )  # fmt: skip
    failed, _ = await scripts.begin_failing(
        keys, token="tok", step=0, error="{}", delivery="step"
    )
    assert failed is Failed.FAILING
    assert await scripts.end_failing(keys, token="tok")
    return scripts, keys


async def _state(client: Redis, keys: ChainKeys) -> ChainRecord:
    return ChainRecord.from_hash(await client.hgetall(keys.record))


async def test_one_copy_of_on_error_runs_at_a_time_and_none_after_it_ran(
    client: Redis, key_prefix: str
) -> None:
    scripts, keys = await _failed_chain(client, key_prefix)

    async def begin(delivery: str, attempt: int = 0, token: str = "tok") -> Begin:
        return await scripts.begin_on_error(
            keys, token=token, attempt=attempt, delivery=delivery, lease_ms=60_000
        )

    assert await begin("d1") is Begin.RUN
    assert (await _state(client, keys)).on_error_state == "running"
    assert await begin("d2") is Begin.RUNNING_ELSEWHERE
    assert await begin("d1") is Begin.RUN  # the same delivery renews its lease
    # d1's worker died: once its lease is over, a redelivered copy runs.
    await client.hset(keys.record, "on_error_until", 0)
    assert await begin("d2") is Begin.RUN
    assert await scripts.complete_on_error(keys, token="tok")
    assert not await scripts.complete_on_error(keys, token="tok")  # once
    assert await begin("d3") is Begin.SKIP
    assert await begin("d4", attempt=5) is Begin.SKIP  # even a later attempt
    found = await _state(client, keys)
    assert (found.on_error_state, found.state.value) == ("completed", "failed")
    # Another chain's token, or no record at all: run rather than lose the work.
    assert await begin("d5", token="other") is Begin.RUN
    gone = ChainKeys(key_prefix, "gone")
    assert await scripts.begin_on_error(
        gone, token="tok", attempt=0, delivery="d6", lease_ms=60_000
    ) is Begin.RUN  # fmt: skip


async def test_a_failed_attempt_of_on_error_lets_its_retry_run(
    client: Redis, key_prefix: str
) -> None:
    """The retry middleware kicks attempt 1 before attempt 0 releases its lease."""
    scripts, keys = await _failed_chain(client, key_prefix)

    async def begin(delivery: str, attempt: int) -> Begin:
        return await scripts.begin_on_error(
            keys, token="tok", attempt=attempt, delivery=delivery, lease_ms=60_000
        )

    assert await begin("a0", 0) is Begin.RUN
    assert await begin("a1", 1) is Begin.RUN  # the retry takes the lease over
    assert await begin("a1-copy", 1) is Begin.RUNNING_ELSEWHERE
    assert await begin("a0-copy", 0) is Begin.RUNNING_ELSEWHERE
    # Attempt 0's worker releases late: the retry's lease stays.
    assert not await scripts.release_on_error(
        keys, token="tok", attempt=0, span_ms=60_000
    )
    assert (await _state(client, keys)).on_error_until > 0
    # Attempt 1 fails too and releases: a copy of it may run, the state stays.
    assert await scripts.release_on_error(keys, token="tok", attempt=1, span_ms=60_000)
    found = await _state(client, keys)
    assert (found.on_error_state, found.on_error_until) == ("running", 0)
    assert await begin("a1-copy", 1) is Begin.RUN


async def test_the_attempt_recorded_for_on_error_never_goes_down(
    client: Redis, key_prefix: str
) -> None:
    """Attempt n exists only once a copy of attempt n-1 ended: a copy of an
    earlier attempt than the one recorded never runs, lease or not, and a later
    one takes a held lease over only from the attempt just before it. So the
    sweep's copy, kicked as the attempt after the holder whose worker died,
    is taken over by no late copy of that holder nor by the retry it kicked."""
    scripts, keys = await _failed_chain(client, key_prefix)

    async def begin(delivery: str, attempt: int, *, takes_over: bool = True) -> Begin:
        return await scripts.begin_on_error(
            keys,
            token="tok",
            attempt=attempt,
            delivery=delivery,
            lease_ms=60_000,
            takes_over=takes_over,
        )

    assert await begin("a0", 0) is Begin.RUN
    await client.hset(keys.record, "on_error_until", 1)  # a0's worker died
    assert await begin("sweep", 1) is Begin.RUN  # the sweep's copy: attempt 1
    assert await begin("a1-late", 1) is Begin.RUNNING_ELSEWHERE  # a0's retry
    assert await begin("a0-again", 0) is Begin.RUNNING_ELSEWHERE
    await client.hset(keys.record, "on_error_until", 1)  # the sweep's died too
    assert await begin("a0-again", 0) is Begin.RUNNING_ELSEWHERE  # never lower
    assert (await _state(client, keys)).on_error_attempt == 1
    assert await begin("a2", 2) is Begin.RUN
    assert await begin("a4", 4) is Begin.RUNNING_ELSEWHERE  # a jump: lease held
    assert await begin("a3", 3) is Begin.RUN  # the attempt after a2's
    assert (await _state(client, keys)).on_error_attempt == 3
    # The sweep's copy, as attempt 4, takes no held lease over: a3 may run.
    assert await begin("sweep4", 4, takes_over=False) is Begin.RUNNING_ELSEWHERE
    await client.hset(keys.record, "on_error_until", 1)  # a3's worker died
    assert await begin("sweep4", 4, takes_over=False) is Begin.RUN


def test_a_retry_of_the_sweeps_copy_takes_over_and_the_copy_does_not() -> None:
    """taskiq's retry middlewares copy every label to the next attempt."""
    sweeps = retry_labels(2, sweep_copy=True)
    assert not takes_over(sweeps)
    assert takes_over({**sweeps, RETRIES_LABEL: 3})  # the retry of it
    assert takes_over({RETRIES_LABEL: 1})
    assert takes_over({})
    assert retry_labels(0, sweep_copy=False) == {}


def test_a_lost_on_error_counts_as_stuck() -> None:
    """For the stuck gauge, ``--fail-on-stuck`` and alerts (``report.stuck``)."""
    finding = Finding(
        group_id="c",
        kind=FindingKind.ON_ERROR_LOST,
        action=SweepAction.REPORT,
        applied=True,
        state="failed",
    )
    assert SweepReport(dry_run=False, findings=[finding]).stuck == [finding]
