"""The sweep and a task no worker knows (a handler renamed in a deploy).

taskiq acknowledges and drops a message whose task its worker cannot find,
before any middleware runs: a chain at such a step, or a group with such a
member, stops with no error. The planner's broker knows the task (it passed
validation there); the worker's and the sweep's broker do not. Real
redis-server, real ``Receiver``.
"""

import asyncio
import json
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis
from taskiq import AsyncBroker

from taskiq_fanin import (
    ChainFailure,
    GroupResult,
    Signature,
    chain,
    group,
    sweep,
)
from taskiq_fanin.domain.ids import member_task_id, step_id
from taskiq_fanin.inspection import chain_status, group_status
from taskiq_fanin.sweeping import FindingKind, SweepAction
from tests.harness import (
    drained,
    eventually,
    lossy_stream_broker,
    overdue,
    stream_broker,
    sweep_sees,
    worker,
)
from tests.stuck_chains import DEADLINE, chain_stuck

#: The renamed handler: the planner knows it, the worker and the sweep do not.
UNKNOWN = "deploy:s3"


def register(broker: AsyncBroker, tasks: dict[str, Callable[..., Any]]) -> None:
    for name, func in tasks.items():
        broker.register_task(func, task_name=name)


class Deploy:
    """A planner broker and a worker broker on one stream and prefix.

    The planner knows every task; the worker every task but ``UNKNOWN``.
    """

    def __init__(self, redis_url: str, prefix: str) -> None:
        self.failures: list[ChainFailure] = []
        self.undone: list[str] = []
        self.built: list[str] = []
        self.reports: list[GroupResult] = []
        # It can lose a message on its way, as a worker that died would.
        self.planner, self.planner_fanin = lossy_stream_broker(
            redis_url, prefix, deadline=DEADLINE
        )
        self.workers, self.fanin = stream_broker(redis_url, prefix, deadline=DEADLINE)
        self.stream = f"{prefix}:stream"

        async def build(name: str) -> str:
            self.built.append(name)
            return f"{name}.tar"

        async def unbuild(name: str) -> None:
            self.undone.append(name)

        async def on_failure(failure: ChainFailure) -> None:
            self.failures.append(failure)

        async def report(result: GroupResult) -> None:
            self.reports.append(result)

        async def upload(artifact: str) -> None:  # the handler that was renamed
            raise AssertionError("no worker knows this task")

        known = {"deploy:build": build, "deploy:unbuild": unbuild}
        known["deploy:on_failure"] = on_failure
        known["deploy:report"] = report
        register(self.planner, {**known, UNKNOWN: upload})
        register(self.workers, known)

    def steps(self, name: str) -> list[Signature]:
        build = Signature.of("deploy:build", name).with_compensation(
            Signature.of("deploy:unbuild", name)
        )
        return [build, Signature.of(UNKNOWN)]

    async def kick_chain(self, chain_id: str) -> None:
        await chain(
            *self.steps(chain_id),
            chain_id=chain_id,
            on_error=Signature.of("deploy:on_failure"),
        ).kiq(self.planner)


async def test_a_chain_at_a_step_no_worker_knows_is_not_redriven_and_given_up_once(
    redis_url: str, key_prefix: str, redis_client: Redis
) -> None:
    deploy = Deploy(redis_url, key_prefix)
    await deploy.planner.startup()
    try:
        async with worker(deploy.workers, max_async_tasks=2) as receiver:
            await deploy.kick_chain("release")
            await eventually(lambda: deploy.built == ["release"], what="step 1")
            await eventually(
                lambda: chain_stuck(deploy.fanin, "release"), what="the deadline"
            )
            await drained(deploy.workers, receiver)
            kicked = await redis_client.xlen(deploy.stream)

            redriven = await sweep(deploy.fanin, sweep_policy="redrive")
            assert await redis_client.xlen(deploy.stream) == kicked  # nothing kicked
            (finding,) = redriven.findings
            assert finding.kind is FindingKind.CHAIN_STUCK
            assert finding.applied is False
            assert finding.unknown_tasks == [UNKNOWN]
            assert finding.started is False  # kicked, dropped unrun by the worker
            assert finding.note == (
                f"at step 2 of 2 ({UNKNOWN}); never started: no worker ran "
                f"{UNKNOWN} (a worker that does not know a task drops its "
                "messages unrun: is it deployed?); not re-driven: "
                f"task '{UNKNOWN}' unknown to this broker"
            )
            assert finding.redrives == 0  # no re-drive spent on nothing kicked

            await eventually(
                lambda: chain_stuck(deploy.fanin, "release"), what="still stuck"
            )
            given_up = await sweep(deploy.fanin, sweep_policy="give_up")
            await eventually(lambda: len(deploy.undone) == 1, what="the undo")
            await eventually(lambda: len(deploy.failures) == 1, what="on_error")
            await drained(deploy.workers, receiver)
            status = await chain_status(deploy.fanin, "release")
    finally:
        await deploy.planner.shutdown()

    (finding,) = given_up.findings
    assert (finding.kind, finding.applied) == (FindingKind.CHAIN_STUCK, True)
    assert finding.action.value == "give_up"
    assert status.state.value == "failed"
    assert (status.failed_step, status.error and status.error.type) == (
        1,
        "ChainGivenUpError",
    )
    (failure,) = deploy.failures
    assert (failure.step, failure.step_name) == (1, UNKNOWN)
    assert failure.error.type == "ChainGivenUpError"
    assert "step 2 of 2" in failure.error.message
    assert f"'{UNKNOWN}'" in failure.error.message
    assert "unknown to this broker" in failure.error.message
    assert deploy.undone == ["release"]  # the completed step's compensation, once
    assert deploy.built == ["release"]


async def test_group_members_no_worker_knows_are_left_and_the_known_missing_redriven(
    redis_url: str, key_prefix: str, redis_client: Redis
) -> None:
    deploy = Deploy(redis_url, key_prefix)
    members = [
        Signature.of("deploy:build", "a"),
        Signature.of("deploy:build", "b"),
        Signature.of(UNKNOWN, "a.tar"),
        Signature.of(UNKNOWN, "b.tar"),
    ]
    deploy.planner.drop = {member_task_id("fleet", 1)}  # a known member lost on its way
    await deploy.planner.startup()
    try:
        async with worker(deploy.workers, max_async_tasks=4) as receiver:
            await group(members, group_id="fleet", deadline=DEADLINE).kiq(
                deploy.planner
            )
            await eventually(lambda: deploy.built == ["a"], what="member 0")
            await eventually(
                lambda: overdue(deploy.fanin, "fleet"), what="the deadline"
            )
            await drained(deploy.workers, receiver)
            kicked = await redis_client.xlen(deploy.stream)

            reported = await sweep(deploy.fanin, dry_run=True)  # policy: report
            dry = await sweep(deploy.fanin, sweep_policy="redrive", dry_run=True)
            first = await sweep(deploy.fanin, sweep_policy="redrive")
            await eventually(lambda: len(deploy.built) == 2, what="member 1")
            await drained(deploy.workers, receiver)
            rekicked = [
                fields[b"data"]
                for _, fields in (await redis_client.xrange(deploy.stream))[kicked:]
            ]
            # The sweep looks again when its index says: a moment after the
            # new deadline (rescheduled after the re-drive, on Redis's clock).
            await eventually(
                lambda: sweep_sees(deploy.fanin, "fleet"), what="the new deadline"
            )
            second = await sweep(deploy.fanin, sweep_policy="redrive")
            status = await group_status(deploy.fanin, "fleet")
    finally:
        await deploy.planner.shutdown()

    note = f"2 members not re-driven: task '{UNKNOWN}' unknown to this broker"
    (seen,) = reported.findings
    assert (seen.action, seen.unknown_tasks) == (SweepAction.REPORT, [UNKNOWN])
    assert seen.note == f"2 members: task '{UNKNOWN}' unknown to this broker"
    for report in (dry, first):
        (finding,) = report.findings
        assert (finding.kind, finding.action) == (
            FindingKind.STUCK,
            SweepAction.REDRIVE,
        )
        assert (finding.missing, finding.unknown_tasks) == ([1, 2, 3], [UNKNOWN])
        assert finding.note == note
    assert first.findings[0].applied is True
    assert [json.loads(data)["task_id"] for data in rekicked] == [
        member_task_id("fleet", 1)
    ]
    assert sorted(deploy.built) == ["a", "b"]
    (left,) = second.findings
    assert (left.missing, left.unknown_tasks, left.note) == ([2, 3], [UNKNOWN], note)
    assert left.applied is False
    assert status.redrives == 1  # none spent on the members left


async def test_a_slow_step_that_ends_after_the_give_up_moves_the_chain_no_more(
    redis_url: str, key_prefix: str, redis_client: Redis
) -> None:
    broker, fanin = stream_broker(redis_url, key_prefix, deadline=DEADLINE)
    stream = f"{key_prefix}:stream"
    release = asyncio.Event()
    ran: list[str] = []
    failures: list[ChainFailure] = []

    @broker.task(task_name="deploy:slow")
    async def slow() -> str:
        ran.append("slow")
        await release.wait()
        ran.append("slow ended")
        return "done"

    @broker.task(task_name="deploy:after")
    async def after(previous: str) -> None:
        ran.append("after")

    @broker.task(task_name="deploy:on_failure")
    async def on_failure(failure: ChainFailure) -> None:
        failures.append(failure)

    async with worker(broker, max_async_tasks=3) as receiver:
        await chain(
            Signature.of(slow),
            Signature.of(after),
            chain_id="slow",
            on_error=Signature.of(on_failure),
        ).kiq(broker)
        await eventually(lambda: ran == ["slow"], what="the slow step to start")
        await eventually(lambda: chain_stuck(fanin, "slow"), what="the deadline")
        given_up = await sweep(fanin, sweep_policy="give_up")
        await eventually(lambda: len(failures) == 1, what="on_error")
        release.set()
        await eventually(lambda: "slow ended" in ran, what="the slow step to end")
        await drained(broker, receiver)
        status = await chain_status(fanin, "slow")
        task_ids = [
            json.loads(fields[b"data"])["task_id"]
            for _, fields in await redis_client.xrange(stream)
        ]

    (finding,) = given_up.findings
    assert (finding.action, finding.applied) == (SweepAction.GIVE_UP, True)
    assert finding.unknown_tasks == []
    assert (status.state.value, status.failed_step) == ("failed", 0)
    assert status.error is not None
    assert status.error.type == "ChainGivenUpError"
    assert "at step 1 of 2 (deploy:slow)" in status.error.message
    assert "unknown" not in status.error.message
    assert ran == ["slow", "slow ended"]  # the next step never ran
    assert step_id("slow", 1) not in task_ids  # nor was it kicked
    assert [f.step_name for f in failures] == ["deploy:slow"]


async def test_a_chain_member_given_up_on_is_recorded_failed_in_its_group(
    redis_url: str, key_prefix: str, redis_client: Redis
) -> None:
    deploy = Deploy(redis_url, key_prefix)
    member = chain(*deploy.steps("edge"), on_error=Signature.of("deploy:on_failure"))
    await deploy.planner.startup()
    try:
        async with worker(deploy.workers, max_async_tasks=4) as receiver:
            # The group's own deadline is far: only its member chain is stuck.
            await group(
                [member],
                then=Signature.of("deploy:report"),
                group_id="edges",
                deadline=60,
            ).kiq(deploy.planner)
            await eventually(lambda: deploy.built == ["edge"], what="step 1")
            await eventually(
                lambda: chain_stuck(deploy.fanin, member_task_id("edges", 0)),
                what="the deadline",
            )
            report = await sweep(deploy.fanin, sweep_policy="give_up")
            await eventually(lambda: len(deploy.reports) == 1, what="the group's end")
            await drained(deploy.workers, receiver)
    finally:
        await deploy.planner.shutdown()

    assert [(f.group_id, f.applied) for f in report.findings] == [
        (member_task_id("edges", 0), True)
    ]
    (result,) = deploy.reports
    assert result.failed_count == 1
    assert result.failed[0].type == "ChainGivenUpError"
    assert len(deploy.failures) == 1
    assert deploy.undone == ["edge"]
