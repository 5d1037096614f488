"""The sweep against a real redis-server and a real Receiver: lost members
re-driven from the ledger, crashed finalisers and planners recovered, give-up,
concurrent sweeps, and the scheduled sweep task.
"""

import asyncio
import importlib
import json
import os
import signal

import pytest
from redis.asyncio import Redis
from taskiq import SendTaskError, TaskiqMessage, TaskiqMiddleware
from taskiq.schedule_sources import LabelScheduleSource

from taskiq_fanin import FanInMiddleware, GroupResult, Signature, chain, group, sweep
from taskiq_fanin.api.broker import find_fanin
from taskiq_fanin.domain.labels import CONTINUATION_LABEL, takes_over
from taskiq_fanin.inspection import group_status
from taskiq_fanin.storage.keys import ChainKeys, GroupKeys
from taskiq_fanin.storage.replies import Begin
from taskiq_fanin.sweeping import (
    SWEEP_TASK_NAME,
    FindingKind,
    SweepAction,
    SweepReport,
    register_sweep_task,
)
from tests.harness import (
    SentMessages,
    drained,
    eventually,
    lossy_stream_broker,
    overdue,
    sweep_sees,
    worker,
    worker_process,
)

SHORT = 0.3  # seconds: deadlines and leases short enough to pass within a test


async def test_a_member_never_dispatched_is_reported_then_redriven_once(
    redis_url: str, key_prefix: str
) -> None:
    sent = SentMessages()
    broker, fanin = lossy_stream_broker(redis_url, key_prefix, sent)
    results: list[GroupResult] = []
    runs: list[int] = []

    @broker.task
    async def member(index: int) -> int:
        runs.append(index)
        return index

    @broker.task
    async def then(result: GroupResult) -> None:
        results.append(result)

    broker.drop = {"lost~2"}
    async with worker(broker, max_async_tasks=5) as receiver:
        members = [Signature.of(member, i) for i in range(4)]
        await group(members, then=then, group_id="lost", deadline=SHORT).kiq(broker)
        await eventually(lambda: _done(fanin, "lost", 3), what="three members")
        await eventually(lambda: overdue(fanin, "lost"), what="the deadline")

        dry = await sweep(fanin, dry_run=True)
        (finding,) = dry.findings
        assert (finding.group_id, finding.kind, finding.missing) == (
            "lost",
            FindingKind.STUCK,
            [2],
        )
        assert (finding.action, finding.applied) == (SweepAction.REPORT, False)
        assert (
            await group_status(fanin, "lost")
        ).redrives == 0  # a dry run writes nothing

        redriven = await sweep(fanin, sweep_policy="redrive")
        assert [(f.action, f.applied, f.missing) for f in redriven.findings] == [
            (SweepAction.REDRIVE, True, [2])
        ]
        await eventually(lambda: len(results) == 1, what="the continuation")
        await eventually(
            lambda: sent.executions_of(then.task_name) == 1, what="completion"
        )
        status = await group_status(fanin, "lost")
        after = await sweep(fanin, dry_run=True)
        await drained(broker, receiver)

    assert sorted(runs) == [0, 1, 2, 3]  # only the missing member ran again
    assert results[0].succeeded == [0, 1, 2, 3]
    assert (status.state.value, status.redrives) == ("completed", 1)
    assert after.findings == []  # a completed group leaves the index


async def test_a_planner_that_died_mid_dispatch_is_finished_by_the_sweep(
    redis_url: str, key_prefix: str
) -> None:
    # Its kicks refused past retry_for: the caller's kiq() gives up.
    broker, fanin = lossy_stream_broker(
        redis_url, key_prefix, sweep_policy="redrive", retry_for=0.2
    )
    results: list[GroupResult] = []

    @broker.task
    async def member(index: int) -> int:
        return index

    @broker.task
    async def then(result: GroupResult) -> None:
        results.append(result)

    async with worker(broker, max_async_tasks=5):
        broker.fail_after = broker.sent + 2
        members = [Signature.of(member, i) for i in range(5)]
        with pytest.raises(SendTaskError):  # the planner "dies" here
            await group(members, then=then, group_id="half", deadline=SHORT).kiq(broker)
        broker.fail_after = None
        await eventually(lambda: overdue(fanin, "half"), what="the deadline")
        report = await sweep(fanin)  # the group's own policy: redrive
        await eventually(lambda: len(results) == 1, what="the continuation")

    (finding,) = report.findings
    assert finding.kind is FindingKind.UNPLANNED
    assert finding.missing == [2, 3, 4]
    assert results[0].results == [0, 1, 2, 3, 4]


class FailFirstContinuationKick(TaskiqMiddleware):
    """The finaliser "dies" between its claim and the continuation's kick.

    Not an error of Redis being away (the worker would retry that itself): the
    worker gives up on the message, as one that died would.
    """

    def __init__(self, error: Exception | None = None) -> None:
        super().__init__()
        self.error = error or RuntimeError("worker died after claiming")
        self.failed = False

    def pre_send(self, message: TaskiqMessage) -> TaskiqMessage:
        if CONTINUATION_LABEL in message.labels and not self.failed:
            self.failed = True
            raise self.error
        return message


async def test_a_finaliser_whose_kick_meets_redis_away_retries_without_the_sweep(
    redis_url: str, key_prefix: str
) -> None:
    fault = FailFirstContinuationKick(ConnectionError("Redis went away"))
    sent = SentMessages()
    broker, fanin = lossy_stream_broker(redis_url, key_prefix, fault, sent)
    ran: list[GroupResult] = []

    @broker.task
    async def member(index: int) -> int:
        return index

    @broker.task
    async def then(result: GroupResult) -> None:
        ran.append(result)

    async with worker(broker, max_async_tasks=5) as receiver:
        members = [Signature.of(member, i) for i in range(3)]
        await group(members, then=then, group_id="away").kiq(broker)
        await eventually(
            lambda: sent.executions_of(then.task_name) == 1, what="the continuation"
        )
        status = await group_status(fanin, "away")
        await drained(broker, receiver)

    assert fault.failed
    assert [result.results for result in ran] == [[0, 1, 2]]
    assert len(sent.of_task(then.task_name)) == 1  # kicked once
    assert status.state.value == "completed"


async def test_a_finaliser_that_died_after_its_claim_is_recovered_once(
    redis_url: str, key_prefix: str
) -> None:
    fault = FailFirstContinuationKick()
    sent = SentMessages()
    broker, fanin = lossy_stream_broker(
        redis_url, key_prefix, fault, sent, finaliser_lease=SHORT
    )
    ran: list[GroupResult] = []

    @broker.task
    async def member(index: int) -> int:
        return index

    @broker.task
    async def then(result: GroupResult) -> None:
        ran.append(result)

    claim = GroupKeys(key_prefix, "crash").claim
    async with worker(broker, max_async_tasks=5) as receiver:
        members = [Signature.of(member, i) for i in range(3)]
        await group(members, then=then, group_id="crash").kiq(broker)
        await eventually(lambda: fault.failed, what="the injected crash")
        assert (await group_status(fanin, "crash")).state.value == "claimed"
        early = await sweep(fanin)
        assert early.findings == []  # the lease is still held
        await eventually(
            lambda: _gone(fanin.context.redis, claim), what="the lease to end"
        )
        # The sweep's index looks again once the lease is over, on Redis's
        # clock (a moment after the claim key itself expired).
        report = await sweep_until(fanin, FindingKind.FINALISER_LOST)
        await eventually(lambda: len(ran) == 1, what="the continuation")
        await eventually(lambda: sent.executions_of(then.task_name) == 1, what="end")
        again = await sweep(fanin)
        await drained(broker, receiver, abandoned=1)  # the member that "died"

    (finding,) = report.findings
    assert (finding.kind, finding.action, finding.applied) == (
        FindingKind.FINALISER_LOST,
        SweepAction.REDISPATCH,
        True,
    )
    assert [result.results for result in ran] == [[0, 1, 2]]
    assert [f.kind for f in again.findings] in ([], [FindingKind.GONE])


async def sweep_until(fanin: FanInMiddleware, kind: FindingKind) -> SweepReport:
    """Sweep until a sweep finds (and acts on) a finding of ``kind``."""
    reports: list[SweepReport] = []

    async def found() -> bool:
        reports.append(await sweep(fanin))
        return any(f.kind is kind for f in reports[-1].findings)

    await eventually(found, what=f"a sweep to find {kind.value}")
    return reports[-1]


async def _gone(redis: Redis, key: str) -> bool:
    return await redis.exists(key) == 0


async def test_give_up_runs_the_continuation_once_with_the_lost_members(
    redis_url: str, key_prefix: str
) -> None:
    sent = SentMessages()
    broker, fanin = lossy_stream_broker(redis_url, key_prefix, sent)
    results: list[GroupResult] = []
    runs: list[int] = []

    @broker.task
    async def member(index: int) -> int:
        runs.append(index)
        return index

    @broker.task
    async def then(result: GroupResult) -> None:
        results.append(result)

    broker.drop = {"partial~1", "partial~3"}
    async with worker(broker, max_async_tasks=5) as receiver:
        members = [Signature.of(member, i) for i in range(4)]
        await group(
            members,
            then=then,
            group_id="partial",
            deadline=SHORT,
            sweep_policy="give_up",
        ).kiq(broker)
        await eventually(lambda: _done(fanin, "partial", 2), what="two members")
        await eventually(lambda: overdue(fanin, "partial"), what="the deadline")
        report = await sweep(fanin)
        await eventually(lambda: len(results) == 1, what="the continuation")
        # A lost member that turns up after all changes nothing.
        await (
            member.kicker()
            .with_task_id("partial~1")
            .with_labels(fanin_member=f"partial/1/{await _token(fanin, 'partial')}")
            .kiq(1)
        )
        await eventually(
            lambda: sent.executions_of(member.task_name) == 3, what="the late member"
        )
        await drained(broker, receiver)

    (finding,) = report.findings
    assert (finding.action, finding.applied, finding.missing) == (
        SweepAction.GIVE_UP,
        True,
        [1, 3],
    )
    (result,) = results
    assert (result.succeeded, result.lost, result.results) == ([0, 2], [1, 3], [0, 2])


async def _token(fanin: FanInMiddleware, group_id: str) -> str:
    token = await fanin.context.redis.hget(
        GroupKeys(fanin.config.prefix, group_id).meta, "token"
    )
    return token.decode()


async def test_two_sweeps_at_the_same_moment_act_once(
    redis_url: str, key_prefix: str
) -> None:
    broker, fanin = lossy_stream_broker(redis_url, key_prefix, sweep_policy="redrive")

    @broker.task
    async def member(index: int) -> None:
        return None

    await broker.startup()
    try:
        for name in ("a", "b", "c"):
            broker.drop.add(f"{name}~0")
            await group(
                [Signature.of(member, 0), Signature.of(member, 1)],
                group_id=name,
                deadline=SHORT,
            ).kiq(broker)
        await eventually(lambda: overdue(fanin, "c"), what="the deadlines")
        reports = await asyncio.gather(sweep(fanin), sweep(fanin))
        redrives = [
            (await group_status(fanin, name)).redrives for name in ("a", "b", "c")
        ]
    finally:
        await broker.shutdown()

    assert sorted(r.skipped for r in reports) == [False, True]
    (acted,) = [r for r in reports if not r.skipped]
    assert sorted(f.group_id for f in acted.findings) == ["a", "b", "c"]
    assert redrives == [1, 1, 1]


async def test_redrives_stop_at_the_maximum(redis_url: str, key_prefix: str) -> None:
    broker, fanin = lossy_stream_broker(redis_url, key_prefix, max_redrives=1)

    @broker.task
    async def member(index: int) -> None:
        return None

    await broker.startup()
    try:
        broker.drop = {"g~0"}
        await group([Signature.of(member, 0)], group_id="g", deadline=SHORT).kiq(broker)
        await eventually(lambda: overdue(fanin, "g"), what="the deadline")
        first = await sweep(fanin, sweep_policy="redrive")
        # The sweep looks again when its index says: a moment after the new
        # deadline (rescheduled after the re-drive, on Redis's clock).
        await eventually(lambda: sweep_sees(fanin, "g"), what="the new deadline")
        second = await sweep(fanin, sweep_policy="redrive")
    finally:
        await broker.shutdown()

    assert [f.applied for f in first.findings] == [True]
    (finding,) = second.findings
    assert (finding.applied, finding.redrives) == (False, 1)
    assert "re-drives used" in finding.note


async def test_the_sweep_task_is_scheduled_by_taskiq_and_returns_its_report(
    redis_url: str, key_prefix: str
) -> None:
    broker, fanin = lossy_stream_broker(redis_url, key_prefix)
    sweep_task = register_sweep_task(broker, schedule=[{"interval": 60}])

    @broker.task
    async def member(index: int) -> None:
        return None

    source = LabelScheduleSource(broker)
    await source.startup()
    schedules = await source.get_schedules()
    assert [(s.task_name, s.interval) for s in schedules] == [(SWEEP_TASK_NAME, 60)]
    assert sweep_task.task_name == SWEEP_TASK_NAME

    async with worker(broker, max_async_tasks=2):
        broker.drop = {"s~0"}
        await group([Signature.of(member, 0)], group_id="s", deadline=SHORT).kiq(broker)
        await eventually(lambda: overdue(fanin, "s"), what="the deadline")
        sent = SentMessages()
        broker.add_middlewares(sent)
        await sweep_task.kiq(dry_run=True)
        await eventually(
            lambda: sent.executions_of(SWEEP_TASK_NAME) == 1, what="the sweep task"
        )
        status = await group_status(fanin, "s")

    report = sent.results[-1]
    assert isinstance(report, dict)
    assert [f["group_id"] for f in report["findings"]] == ["s"]
    assert (status.redrives, status.state.value) == (0, "open")  # dry run


async def test_a_member_lost_with_a_killed_worker_is_redriven_on_a_list_broker(
    redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {"REDIS_URL": redis_url, "APP_PREFIX": key_prefix}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    app = importlib.reload(importlib.import_module("tests.sweep_app"))
    fanin = find_fanin(app.broker)
    redis = Redis.from_url(redis_url)
    await app.broker.startup()
    try:
        with worker_process(
            "tests.sweep_app:broker", {**env, "BLOCK_MEMBER": "1"}
        ) as doomed:
            members = [Signature.of(app.member, i) for i in range(3)]
            await group(
                members, then=app.publish, group_id="killed", deadline=SHORT
            ).kiq(app.broker)
            await eventually(
                lambda: _llen_is(redis, app.STARTED, 3),
                what="all three members to start",
            )
            await eventually(lambda: _done(fanin, "killed", 2), what="two members done")
            # SIGKILL, mid-member, to the worker and its children: ListQueueBroker
            # has already handed the message over and never redelivers it.
            os.killpg(doomed.pid, signal.SIGKILL)
            doomed.wait()
        assert await redis.llen(app.QUEUE) == 0  # the message is gone for good
        # Until Redis has dropped the dead worker's blocked BRPOP, it would hand
        # that connection the next message too (a list never gives it back).
        await eventually(
            lambda: _nobody_blocked_on_a_list(redis),
            what="Redis to drop the dead worker's connection",
        )
        await eventually(lambda: overdue(fanin, "killed"), what="the deadline")

        with worker_process("tests.sweep_app:broker", env):
            report = await sweep(fanin, sweep_policy="redrive")
            await eventually(
                lambda: _llen_is(redis, app.PUBLISHED, 1), what="the continuation"
            )
        published = [
            json.loads(raw) for raw in await redis.lrange(app.PUBLISHED, 0, -1)
        ]
    finally:
        await app.broker.shutdown()
        await redis.aclose()

    (finding,) = report.findings
    assert (finding.missing, finding.applied) == ([1], True)
    assert len(published) == 1
    assert published[0]["results"] == [0, 1, 2]


async def _nobody_blocked_on_a_list(redis: Redis) -> bool:
    clients = await redis.client_list()
    return not any(client.get("cmd") == "brpop" for client in clients)


async def _llen_is(redis: Redis, key: str, length: int) -> bool:
    return await redis.llen(key) == length


async def test_a_lost_continuation_is_reported_then_dispatched_again_once(
    redis_url: str, key_prefix: str
) -> None:
    sent = SentMessages()
    # The sweep first looks again at a finalised group when the finaliser's lease
    # ends: a short one here, so that the continuation's deadline decides.
    broker, fanin = lossy_stream_broker(
        redis_url, key_prefix, sent, finaliser_lease=SHORT
    )
    ran: list[GroupResult] = []

    @broker.task
    async def member(index: int) -> int:
        return index

    @broker.task
    async def then(result: GroupResult) -> None:
        ran.append(result)

    broker.drop = {"cont~then"}  # the continuation's message is lost on its way
    async with worker(broker, max_async_tasks=5) as receiver:
        members = [Signature.of(member, i) for i in range(2)]
        await group(members, then=then, group_id="cont", deadline=SHORT).kiq(broker)
        await eventually(
            lambda: _state_is(fanin, "cont", "dispatched"), what="the dispatch"
        )
        await eventually(lambda: _continuation_overdue(fanin), what="its deadline")
        reported = await sweep(fanin)  # the group's policy: report
        assert ran == []
        redispatched = await sweep(fanin, sweep_policy="redrive")
        await eventually(lambda: len(ran) == 1, what="the continuation")
        await eventually(lambda: sent.executions_of(then.task_name) == 1, what="end")
        await drained(broker, receiver)

    assert [(f.kind, f.action, f.applied) for f in reported.findings] == [
        (FindingKind.CONTINUATION_OVERDUE, SweepAction.REPORT, True)
    ]
    assert [(f.kind, f.action) for f in redispatched.findings] == [
        (FindingKind.CONTINUATION_OVERDUE, SweepAction.REDISPATCH)
    ]
    assert [result.results for result in ran] == [[0, 1]]


class LostContinuation:
    """A group of two whose finaliser's copy of its continuation is lost (the
    broker drops it), on a broker the test may make lose or refuse more."""

    def __init__(
        self, redis_url: str, prefix: str, group_id: str, *, max_redrives: int
    ) -> None:
        self.group_id, self.sent = group_id, SentMessages()
        self.ran: list[GroupResult] = []
        self.broker, self.fanin = lossy_stream_broker(
            redis_url,
            prefix,
            self.sent,
            finaliser_lease=SHORT,
            max_redrives=max_redrives,
        )
        ran = self.ran

        @self.broker.task
        async def member(index: int) -> int:
            return index

        @self.broker.task
        async def then(result: GroupResult) -> None:
            ran.append(result)

        self.member, self.then = member, then
        self.broker.drop = {f"{group_id}~then"}

    async def dispatched(self) -> None:
        """Plan the group; return once its (lost) continuation is dispatched."""
        members = [Signature.of(self.member, i) for i in range(2)]
        await group(
            members, then=self.then, group_id=self.group_id, deadline=SHORT
        ).kiq(self.broker)
        await eventually(
            lambda: _state_is(self.fanin, self.group_id, "dispatched"),
            what="the dispatch",
        )


async def test_a_continuation_lost_every_time_is_dispatched_again_at_most_max_redrives(
    redis_url: str, key_prefix: str
) -> None:
    """Every copy of the continuation lost on its way, none ever begins: under
    ``redrive`` the sweep dispatches it again, each counted (``redrives``), at
    most ``max_redrives`` times; past that it reports it, its note naming
    ``max_redrives``, and sends nothing more."""
    app = LostContinuation(redis_url, key_prefix, "capc", max_redrives=2)
    broker, fanin, sent, ran = app.broker, app.fanin, app.sent, app.ran
    seen: list[tuple[SweepAction, bool, int]] = []
    async with worker(broker, max_async_tasks=5) as receiver:
        await app.dispatched()

        async def reported_past_the_cap() -> bool:
            broker.drop.add("capc~then")  # this copy is lost too
            report = await sweep(fanin, sweep_policy="redrive")
            seen.extend(
                (f.action, f.applied, f.redrives)
                for f in report.findings
                if f.kind is FindingKind.CONTINUATION_OVERDUE
            )
            return bool(seen) and seen[-1][0] is SweepAction.REPORT

        await eventually(
            reported_past_the_cap, timeout=10, interval=0.1, what="the cap"
        )
        (later,) = (await sweep(fanin, sweep_policy="redrive")).findings
        await drained(broker, receiver)

    assert seen == [
        (SweepAction.REDISPATCH, True, 1),
        (SweepAction.REDISPATCH, True, 2),
        (SweepAction.REPORT, True, 2),
    ]
    assert (later.kind, later.action, later.redrives) == (
        FindingKind.CONTINUATION_OVERDUE,
        SweepAction.REPORT,
        2,
    )
    assert "max_redrives" in later.note
    # The finaliser's copy and the sweep's two: no more.
    assert len(sent.of_task(app.then.task_name)) == 3
    assert ran == []


async def test_a_redispatch_whose_kick_failed_is_not_counted_and_goes_again(
    redis_url: str, key_prefix: str
) -> None:
    """The finaliser's copy of the continuation is lost; the sweep's one
    re-dispatch (``max_redrives=1``) meets a broker error: nothing was sent, so
    nothing is counted, and the next sweep sends it (counting what was sent)."""
    app = LostContinuation(redis_url, key_prefix, "kf", max_redrives=1)
    broker, fanin, sent, ran = app.broker, app.fanin, app.sent, app.ran
    async with worker(broker, max_async_tasks=5) as receiver:
        await app.dispatched()
        await eventually(lambda: _continuation_overdue(fanin), what="its deadline")
        broker.fail_after = broker.sent  # the sweep's kick meets a broker error
        failed = await sweep(fanin, sweep_policy="redrive")
        broker.fail_after = None
        counted = await fanin.context.redis.hget(
            GroupKeys(key_prefix, "kf").meta, "continuation_redrives"
        )
        seen: list[tuple[SweepAction, int]] = []

        async def ran_once_swept() -> bool:
            report = await sweep(fanin, sweep_policy="redrive")
            seen.extend(
                (f.action, f.redrives)
                for f in report.findings
                if f.kind is FindingKind.CONTINUATION_OVERDUE
            )
            return bool(ran)

        await eventually(ran_once_swept, timeout=10, interval=0.1, what="it ran")
        await drained(broker, receiver)

    assert failed.findings == []  # its kick raised: reported in the log
    assert counted in (None, b"0")
    assert seen == [(SweepAction.REDISPATCH, 1)]
    assert [result.results for result in ran] == [[0, 1]]
    assert sent.executions_of(app.then.task_name) == 1


async def test_a_redispatch_whose_dispatch_record_failed_is_counted_all_the_same(
    redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sweep's copy went, then recording the dispatch failed (Redis away,
    or a refused ``WAIT``): the copy is counted all the same, so the cap holds;
    uncounted, every sweep would send another, without end."""
    app = LostContinuation(redis_url, key_prefix, "md", max_redrives=1)
    broker, fanin, sent = app.broker, app.fanin, app.sent

    async def refused(*args: object, **kwargs: object) -> bool:
        raise ConnectionError("Redis went away after the kick")

    seen: list[SweepAction] = []
    async with worker(broker, max_async_tasks=5) as receiver:
        await app.dispatched()
        monkeypatch.setattr(fanin.context.scripts, "mark_dispatched", refused)

        async def reported_past_the_cap() -> bool:
            broker.drop.add("md~then")  # this copy is lost too
            report = await sweep(fanin, sweep_policy="redrive")
            seen.extend(
                f.action
                for f in report.findings
                if f.kind is FindingKind.CONTINUATION_OVERDUE
            )
            return SweepAction.REPORT in seen

        await eventually(
            reported_past_the_cap, timeout=10, interval=0.1, what="the cap"
        )
        await drained(broker, receiver)

    # The finaliser's copy and the sweep's one (its finding lost with the
    # error, reported in the log): no more.
    assert len(sent.of_task(app.then.task_name)) == 2
    assert seen == [SweepAction.REPORT]


async def _state_is(fanin: FanInMiddleware, group_id: str, state: str) -> bool:
    return (await group_status(fanin, group_id)).state.value == state


async def _continuation_overdue(fanin: FanInMiddleware) -> bool:
    report = await sweep(fanin, dry_run=True)
    return any(f.kind is FindingKind.CONTINUATION_OVERDUE for f in report.findings)


async def _done(fanin: FanInMiddleware, group_id: str, count: int) -> bool:
    """True once ``count`` members have their outcome recorded (not just started)."""
    return (await group_status(fanin, group_id)).done == count


async def test_a_chain_whose_next_step_was_lost_is_reported_then_redriven(
    redis_url: str, key_prefix: str
) -> None:
    broker, fanin = lossy_stream_broker(redis_url, key_prefix, deadline=SHORT)
    ran: list[str] = []

    @broker.task
    async def probe(video: str) -> str:
        ran.append(f"probe {video}")
        return f"{video}.meta"

    @broker.task
    async def transcode(meta: str) -> None:
        ran.append(f"transcode {meta}")

    async with worker(broker, max_async_tasks=2) as receiver:
        broker.drop = {"video~1"}  # lost on its way, as if the worker died
        handle = await chain(
            Signature.of(probe, "cat"), Signature.of(transcode), chain_id="video"
        ).kiq(broker)
        await eventually(lambda: ran == ["probe cat"], what="the first step")
        await eventually(
            lambda: _chain_reported(fanin, "video"), what="the sweep to report it"
        )
        reported = await sweep(fanin)
        redriven = await sweep(fanin, sweep_policy="redrive")
        await eventually(
            lambda: _chain_state_is(handle, "done"), what="the chain to end"
        )
        await drained(broker, receiver)

    (finding,) = reported.findings
    assert (finding.group_id, finding.kind) == ("video", FindingKind.CHAIN_STUCK)
    assert finding.started is False
    assert finding.note.startswith(
        f"at step 2 of 2 ({transcode.task_name}); never started: no worker ran "
        f"{transcode.task_name}"
    )
    assert reported.stuck == [finding]
    assert [(f.action, f.applied) for f in redriven.findings] == [
        (SweepAction.REDRIVE, True)
    ]
    # The lost step ran once, with the result of the step before it.
    assert ran == ["probe cat", "transcode cat.meta"]


async def test_a_chain_step_whose_copy_was_lost_is_redriven_as_the_next_attempt(
    redis_url: str, key_prefix: str
) -> None:
    """A copy of the step began, and its worker died (played on the record by
    hand, its message lost): the sweep kicks the step again as the attempt
    after it, marked the sweep's copy, so that no late copy of the lost one,
    nor the retry it kicked, runs beside it; the step runs once."""
    sent = SentMessages()
    broker, fanin = lossy_stream_broker(redis_url, key_prefix, sent, deadline=SHORT)
    ran: list[str] = []

    @broker.task
    async def probe(video: str) -> str:
        ran.append(f"probe {video}")
        return f"{video}.meta"

    @broker.task
    async def transcode(meta: str) -> None:
        ran.append(f"transcode {meta}")

    keys = ChainKeys(key_prefix, "died")
    async with worker(broker, max_async_tasks=2) as receiver:
        broker.drop = {"died~1"}  # taken by a worker that died: played by hand
        handle = await chain(
            Signature.of(probe, "cat"), Signature.of(transcode), chain_id="died"
        ).kiq(broker)
        await eventually(lambda: ran == ["probe cat"], what="the first step")

        async def at_the_second_step() -> bool:
            return (await handle.status()).step == 1

        # The body ran; the chain moves on once its post_execute recorded it.
        await eventually(at_the_second_step, what="the chain to reach step 2")
        scripts = fanin.context.chain_scripts
        token = (await scripts.read(keys)).token
        lost = await scripts.begin_step(
            keys, token=token, step=1, attempt=0, delivery="a0", lease_ms=60_000
        )
        await fanin.context.redis.hset(keys.record, "run_until", 1)  # it died
        await eventually(
            lambda: _chain_reported(fanin, "died"), what="the sweep to report it"
        )
        redriven = await sweep(fanin, sweep_policy="redrive")
        await eventually(
            lambda: _chain_state_is(handle, "done"), what="the chain to end"
        )
        await drained(broker, receiver)

    assert lost is Begin.RUN
    assert [(f.action, f.applied) for f in redriven.findings] == [
        (SweepAction.REDRIVE, True)
    ]
    (finding,) = redriven.findings
    assert finding.started is True  # apart from a step that never started
    assert finding.note.endswith("a copy of it began and never finished")
    kicked = sent.of_task(transcode.task_name)[-1]  # the sweep's
    assert int(kicked.labels["_retries"]) == 1
    assert not takes_over(kicked.labels)
    assert ran == ["probe cat", "transcode cat.meta"]


async def _chain_state_is(handle: object, state: str) -> bool:
    status = await handle.status()  # type: ignore[attr-defined]
    return status.state.value == state


async def _chain_reported(fanin: FanInMiddleware, chain_id: str) -> bool:
    report = await sweep(fanin, dry_run=True)
    return [f.group_id for f in report.findings] == [chain_id]
