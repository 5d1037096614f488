"""An error continuation runs once, however a failure's aftermath is interrupted.

A chain's ``on_error`` and a group's (``failure_policy="fail"``) are bodies the
library kicks like any continuation: a worker SIGKILLed just after the kick,
before what comes next (the compensations, the dispatch's record) leaves the
sweep to kick it again, and both copies reach a worker. Real ``taskiq worker``
processes of ``tests.fault_app`` on a RedisStreamBroker; every count is read
from the observation server once the stream is drained (``Rig.drained``), so a
second run would have shown. Then taskiq's retry middlewares on an ``on_error``
that fails: its retry runs (the guard lets it), and nothing else does.
"""

import json
import os
import signal
import time
from collections.abc import Callable

import pytest
from taskiq import SimpleRetryMiddleware, SmartRetryMiddleware, TaskiqMiddleware

from taskiq_fanin import ChainFailure, ChainHandle, GroupResult, Signature, chain, group
from taskiq_fanin.api.chains import Chain
from taskiq_fanin.sweeping import FindingKind
from tests.fault_harness import Rig, alive, fault_rig, nudging, summary
from tests.harness import drained, eventually, stream_broker, worker
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
@pytest.mark.xfail(strict=True, reason="a chain's on_error has no run guard yet")
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


@pytest.mark.faults
async def test_a_group_whose_finaliser_died_after_kicking_on_error_runs_it_once(
    tmp_path, monkeypatch
):
    """Under failure policy ``fail``: the finaliser dies once the group's
    ``on_error`` is on the stream, before the dispatch is recorded; the sweep
    dispatches it again. Both copies are delivered; one runs."""
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

            async def completed_and_drained() -> bool:
                return await rig.drained() and await state_of(rig, "grp") == "completed"

            async with nudging(rig):
                _, sweeps = await sweep_until(rig, FindingKind.FINALISER_LOST)
                await eventually(
                    completed_and_drained,
                    timeout=RECOVERY,
                    what="the group to complete and the stream to drain",
                )
            ran = [json.loads(item) for item in await rig.listed("group_on_error")]
            deliveries = await rig.delivered_id("grp~on_error")

    summary(
        "group finaliser SIGKILLed after kicking on_error",
        faults="1 SIGKILL (in post_send of the group's on_error)",
        sweeps=sweeps,
        on_error_deliveries=deliveries,
        on_error_run=len(ran),
        seconds=round(time.monotonic() - started, 1),
    )
    assert not alive(pid)
    assert sent == "grp~on_error"
    assert deliveries >= 2  # the dead finaliser's kick and the sweep's
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
