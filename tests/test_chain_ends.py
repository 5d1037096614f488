"""How a chain ends, on a real redis-server and a real Receiver: a result the next
step cannot take fails the step that returned it; a cancel undoes a running last
step, ends the group member the chain is at any step, and is finished by a
second call or the sweep if its caller died half-way; a member a chain ended
without recording is recorded by the sweep.
"""

import asyncio
from typing import Any

import pytest
from taskiq import AsyncBroker

from taskiq_fanin import (
    ChainFailure,
    FanInMiddleware,
    GroupResult,
    Signature,
    cancel,
    chain,
    group,
    sweep,
)
from taskiq_fanin.chains import progress, saga
from taskiq_fanin.errors import MemberNotSerializableError
from taskiq_fanin.inspection import chain_status, group_status
from taskiq_fanin.models import ChainState
from taskiq_fanin.sweeping import SweepAction, SweepReport
from tests.harness import (
    SentMessages,
    chain_reached,
    drained,
    eventually,
    stream_broker,
    worker,
)


class CallerDiedError(Exception):
    """The caller's process died half-way (Redis away is retried: api/retries)."""


SHORT = 0.3  # seconds: a deadline short enough for the sweep to look within a test


async def state_is(fanin: FanInMiddleware, chain_id: str, state: ChainState) -> bool:
    return (await chain_status(fanin, chain_id)).state is state


async def test_a_group_step_member_that_is_not_json_is_refused_before_any_write(
    redis_url: str, key_prefix: str
) -> None:
    sent = SentMessages()
    broker, fanin = stream_broker(redis_url, key_prefix, sent)

    @broker.task
    async def leaf(value: Any, extra: Any = None) -> None:
        """Never runs (as a group step's member, it gets the previous result first)."""

    await broker.startup()
    try:
        bad = chain(Signature.of(leaf, 1), group([Signature.of(leaf, object())]))
        with pytest.raises(MemberNotSerializableError, match="Member 0 of step 2"):
            await bad.kiq(broker)
        keys = await fanin.context.redis.keys(f"{key_prefix}*")
    finally:
        await broker.shutdown()

    assert sent.sent == []
    assert [k for k in keys if not k.endswith(b":stream")] == []


async def test_a_result_too_large_for_the_next_group_step_fails_the_step(
    redis_url: str, key_prefix: str
) -> None:
    """The check comes before the chain moves on: it fails, with on_error, its
    member's outcome and its own compensation (its body did its work), instead
    of stopping at a step it could never kick."""
    broker, fanin = stream_broker(redis_url, key_prefix, max_member_bytes=1024)
    failures: list[ChainFailure] = []
    results: list[GroupResult] = []
    refunds: list[int] = []

    @broker.task
    async def big() -> str:
        return "x" * 4096

    @broker.task
    async def refund(amount: int) -> None:
        refunds.append(amount)

    @broker.task
    async def use(text: str) -> int:
        return len(text)

    @broker.task
    async def on_error(failure: ChainFailure) -> None:
        failures.append(failure)

    @broker.task
    async def then(result: GroupResult) -> None:
        results.append(result)

    async with worker(broker, max_async_tasks=4) as receiver:
        member = chain(
            Signature.of(big).with_compensation(Signature.of(refund, 5)),
            group([Signature.of(use)]),
            on_error=Signature.of(on_error),
        )
        await group([member], then=then, group_id="outer").kiq(broker)
        await eventually(lambda: len(results) == 1, what="the outer continuation")
        await eventually(lambda: len(failures) == 1, what="on_error")
        await eventually(lambda: refunds == [5], what="the step's compensation")
        await eventually(
            lambda: chain_reached(fanin, "outer~0", ChainState.FAILED),
            what="the chain to be failed",
        )
        status = await chain_status(fanin, "outer~0")
        await drained(broker, receiver)

    assert status.state is ChainState.FAILED
    assert status.failed_step == 0
    assert status.error is not None
    assert status.error.type == "MemberTooLargeError"
    assert [failure.step for failure in failures] == [0]
    assert refunds == [5]  # the step's compensation, once
    assert results[0].failed[0].type == "MemberTooLargeError"


async def test_cancelling_during_the_last_step_undoes_it_and_cancels_the_member(
    redis_url: str, key_prefix: str
) -> None:
    broker, fanin = stream_broker(redis_url, key_prefix)
    journal: list[str] = []
    release = asyncio.Event()
    results: list[GroupResult] = []

    @broker.task
    async def step(name: str) -> str:
        journal.append(name)
        if name == "last":
            await release.wait()
        return name

    @broker.task
    async def undo(name: str) -> None:
        journal.append(f"undo {name}")

    @broker.task
    async def then(result: GroupResult) -> None:
        results.append(result)

    async with worker(broker, max_async_tasks=4) as receiver:
        member = chain(
            *[
                Signature.of(step, name)
                .immutable()
                .with_compensation(Signature.of(undo, name))
                for name in ("first", "last")
            ]
        )
        await group([member], then=then, group_id="g").kiq(broker)
        await eventually(lambda: "last" in journal, what="the last step to start")
        assert await cancel(broker, "g~0")
        release.set()
        await eventually(lambda: len(results) == 1, what="the outer continuation")
        for undo_id in ("g~0~undo", "g~0~undo1"):
            await eventually(
                lambda undo_id=undo_id: state_is(fanin, undo_id, ChainState.DONE),
                what=f"{undo_id} to end",
            )
        status = await chain_status(fanin, "g~0")
        await drained(broker, receiver)

    assert status.state is ChainState.CANCELLED
    assert sorted(journal[2:]) == ["undo first", "undo last"]
    assert results[0].failed[0].type == "ChainCancelledError"
    assert results[0].succeeded == []


async def test_cancelling_at_an_open_group_step_ends_the_member_at_once(
    redis_url: str, key_prefix: str
) -> None:
    """The step's group continues nothing now: the cancel records the member."""
    broker, fanin = stream_broker(redis_url, key_prefix)
    release = asyncio.Event()
    results: list[GroupResult] = []

    @broker.task
    async def start() -> int:
        return 1

    @broker.task
    async def held(previous: int) -> int:
        await release.wait()
        return previous

    @broker.task
    async def then(result: GroupResult) -> None:
        results.append(result)

    async with worker(broker, max_async_tasks=4):
        member = chain(Signature.of(start), group([Signature.of(held)] * 2))
        await group([member], then=then, group_id="g").kiq(broker)
        await eventually(
            lambda: _group_open(fanin, "g~0~1"), what="the group step to be planned"
        )
        assert await cancel(broker, "g~0")
        # Its members still hold their slots: the outer group ends without them.
        await eventually(lambda: len(results) == 1, what="the outer continuation")
        release.set()
        status = await chain_status(fanin, "g~0")

    assert status.state is ChainState.CANCELLED
    assert results[0].failed[0].type == "ChainCancelledError"


async def test_a_cancel_that_died_half_way_is_carried_out_by_the_next_call(
    redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker, fanin = stream_broker(redis_url, key_prefix)
    journal: list[str] = []
    release = asyncio.Event()

    @broker.task
    async def step(name: str) -> str:
        journal.append(name)
        if name == "2":
            await release.wait()
        return name

    @broker.task
    async def undo(name: str) -> None:
        journal.append(f"undo {name}")

    compensate = saga.compensate

    async def dies(*args: Any, **kwargs: Any) -> None:
        monkeypatch.setattr(saga, "compensate", compensate)
        raise CallerDiedError("the caller died half-way")

    async with worker(broker, max_async_tasks=2) as receiver:
        handle = await chain(
            *[
                Signature.of(step, n)
                .immutable()
                .with_compensation(Signature.of(undo, n))
                for n in ("1", "2", "3")
            ]
        ).kiq(broker)
        await eventually(lambda: "2" in journal, what="step 2 to start")
        monkeypatch.setattr(saga, "compensate", dies)
        with pytest.raises(CallerDiedError):
            await cancel(broker, handle.chain_id)
        # Cancelled, its compensations not started: the next call starts them.
        assert await state_is(fanin, handle.chain_id, ChainState.CANCELLED)
        assert not await cancel(broker, handle.chain_id)
        release.set()
        await eventually(
            lambda: state_is(fanin, f"{handle.chain_id}~undo", ChainState.DONE),
            what="the compensations to end",
        )
        await eventually(lambda: len(journal) == 4, what="step 2 undone")
        await drained(broker, receiver)

    assert sorted(journal[2:]) == ["undo 1", "undo 2"]


async def test_the_sweep_finishes_a_cancel_whose_caller_died(
    redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Redis away past retry_for: the caller's cancel() gives up.
    broker, fanin = stream_broker(redis_url, key_prefix, deadline=SHORT, retry_for=0.2)
    journal: list[str] = []

    @broker.task
    async def step(name: str) -> str:
        journal.append(name)
        return name

    @broker.task
    async def undo(name: str) -> None:
        journal.append(f"undo {name}")

    release = asyncio.Event()

    @broker.task
    async def hold() -> None:
        await release.wait()

    async def dies(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("the caller's Redis went away")

    async with worker(broker, max_async_tasks=2) as receiver:
        handle = await chain(
            Signature.of(step, "1").with_compensation(Signature.of(undo, "1")),
            Signature.of(hold).immutable(),
        ).kiq(broker)
        await eventually(lambda: "1" in journal, what="step 1 to end")

        async def at_the_second_step() -> bool:
            return (await handle.status()).step == 1

        # Its body ran; the chain moves on once its post_execute recorded it.
        await eventually(at_the_second_step, what="the chain to reach step 2")
        monkeypatch.setattr(saga, "compensate", dies)
        with pytest.raises(ConnectionError):
            await cancel(broker, handle.chain_id)
        monkeypatch.undo()
        release.set()
        await eventually(
            lambda: _swept_until_done(fanin, f"{handle.chain_id}~undo"),
            what="the sweep to start the compensations",
        )
        await eventually(lambda: "undo 1" in journal, what="the compensation")
        await drained(broker, receiver)

    assert journal == ["1", "undo 1"]  # the compensation, once


async def test_the_sweep_records_the_member_of_a_chain_that_ended_unrecorded(
    redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that died between the chain's end and its member's record: the
    chain's entry was brought to a lease after its end, and the sweep records it."""
    broker, fanin = stream_broker(
        redis_url, key_prefix, deadline=60, finaliser_lease=SHORT
    )
    app = UnrecordedMember(broker, monkeypatch)
    async with worker(broker, max_async_tasks=2):
        await app.run_until_the_chain_is_done(fanin)
        assert app.results == []
        await eventually(
            lambda: app.swept_until_recorded(fanin), what="the sweep to record it"
        )

    assert app.results[0].results == [4]


async def _group_open(fanin: FanInMiddleware, group_id: str) -> bool:
    return (await group_status(fanin, group_id)).state.value == "open"


async def _swept_until_done(fanin: FanInMiddleware, chain_id: str) -> bool:
    await sweep(fanin)
    return await state_is(fanin, chain_id, ChainState.DONE)


class UnrecordedMember:
    """A group ``g`` of one chain member (double 1, then double it) whose worker
    dies between the chain's end and its member's record: the chain is done,
    its member not recorded by its worker."""

    def __init__(self, broker: AsyncBroker, monkeypatch: pytest.MonkeyPatch) -> None:
        self.broker = broker
        self.runs: list[int] = []
        self.results: list[GroupResult] = []
        self.reports: list[SweepReport] = []

        @broker.task
        async def double(value: int) -> int:
            self.runs.append(value)
            return value * 2

        @broker.task
        async def then(result: GroupResult) -> None:
            self.results.append(result)

        async def dies_first(*args: Any, **kwargs: Any) -> None:
            """The chain's record moved; this worker records nothing more."""

        monkeypatch.setattr(progress, "end_member", dies_first)
        self.member = chain(Signature.of(double, 1), Signature.of(double))
        self.then = then

    async def run_until_the_chain_is_done(
        self, fanin: FanInMiddleware, *, deadline: float | None = None
    ) -> None:
        """``deadline``: the group's own, else the middleware's."""
        options = {} if deadline is None else {"deadline": deadline}
        await group([self.member], then=self.then, group_id="g", **options).kiq(
            self.broker
        )
        await eventually(lambda: state_is(fanin, "g~0", ChainState.DONE), what="done")

    async def swept_until_recorded(self, fanin: FanInMiddleware) -> bool:
        self.reports.append(await sweep(fanin))
        return bool(self.results)


async def test_a_last_step_undo_lost_with_its_worker_is_started_by_the_sweep(
    redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker of the step that ran through a cancel dies before starting that
    step's compensation: the record kept it, and the sweep starts it."""
    broker, fanin = stream_broker(redis_url, key_prefix, deadline=SHORT)
    journal: list[str] = []
    release = asyncio.Event()

    @broker.task
    async def step(name: str) -> str:
        journal.append(name)
        await release.wait()
        return name

    @broker.task
    async def undo(name: str) -> None:
        journal.append(f"undo {name}")

    async def dies(*args: Any, **kwargs: Any) -> None:
        """The record moved; this worker starts nothing more."""

    monkeypatch.setattr(saga, "undo_cancelled_step", dies)
    async with worker(broker, max_async_tasks=2) as receiver:
        handle = await chain(
            Signature.of(step, "only").with_compensation(Signature.of(undo, "only"))
        ).kiq(broker)
        await eventually(lambda: "only" in journal, what="the step to start")
        assert await cancel(broker, handle.chain_id)
        release.set()
        await eventually(
            lambda: _swept_until_done(fanin, f"{handle.chain_id}~undo0"),
            what="the sweep to start the step's compensation",
        )
        await eventually(lambda: "undo only" in journal, what="the compensation")
        await drained(broker, receiver)

    assert journal == ["only", "undo only"]


async def test_a_member_whose_chain_record_expired_mid_step_is_still_recorded(
    redis_url: str, key_prefix: str
) -> None:
    """A step whose record is gone still runs (losing it is worse), and then
    records its member: nothing else could."""
    broker, fanin = stream_broker(redis_url, key_prefix)
    release = asyncio.Event()
    started: list[int] = []
    results: list[GroupResult] = []

    @broker.task
    async def slow(value: int) -> int:
        started.append(value)
        await release.wait()
        return value + 1

    @broker.task
    async def then(result: GroupResult) -> None:
        results.append(result)

    async with worker(broker, max_async_tasks=2):
        member = chain(Signature.of(slow, 1))
        await group([member], then=then, group_id="g").kiq(broker)
        await eventually(lambda: started == [1], what="the step to start")
        await fanin.context.redis.delete(f"{key_prefix}:{{g.0}}:chain")
        release.set()
        await eventually(lambda: len(results) == 1, what="the outer continuation")

    assert results[0].results == [2]


async def test_a_redriven_chain_member_that_had_ended_is_recorded_not_rerun(
    redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The group's sweep re-drives a chain member whose worker died between the
    chain's end and the member's record: the ended chain is recorded instead.

    Only the group is due: the chain's own entry (due a deadline after it
    moved, and a lease after its end) would record the member too, and
    whichever sweep came first did (1 run in 20 under load, the chain's).
    """
    broker, fanin = stream_broker(
        redis_url, key_prefix, deadline=60, sweep_policy="redrive"
    )
    app = UnrecordedMember(broker, monkeypatch)
    async with worker(broker, max_async_tasks=2) as receiver:
        await app.run_until_the_chain_is_done(fanin, deadline=SHORT)
        await eventually(
            lambda: app.swept_until_recorded(fanin), what="the sweep to record it"
        )
        rerun = await chain_status(fanin, "g~0~r1")
        await drained(broker, receiver)
    reports = app.reports

    assert app.results[0].results == [4]
    assert app.runs == [1, 2]  # each step once: the chain did not start over
    assert rerun.state is ChainState.MISSING
    redriven = [
        (f.group_id, f.missing)
        for report in reports
        for f in report.findings
        if f.action is SweepAction.REDRIVE and f.applied
    ]
    assert redriven == [("g", [0])]
