"""The sweep and a task no worker knows (a handler renamed in a deploy).

taskiq acknowledges and drops a message whose task its worker cannot find,
before any middleware runs: a chain at such a step, or a group with such a
member, stops with no error. The planner's broker knows the task (it passed
validation there); the worker's and the sweep's broker do not. Real
redis-server, real ``Receiver``.
"""

from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis
from taskiq import AsyncBroker

from taskiq_fanin import (
    ChainFailure,
    FanInMiddleware,
    FindingKind,
    Signature,
    chain,
    chain_status,
    sweep,
)
from tests.harness import eventually, stream_broker, worker

#: The renamed handler: the planner knows it, the worker and the sweep do not.
UNKNOWN = "deploy:s3"
DEADLINE = 0.5  # seconds a chain step may take before the sweep looks at it


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
        self.planner, self.planner_fanin = stream_broker(
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

        async def upload(artifact: str) -> None:  # the handler that was renamed
            raise AssertionError("no worker knows this task")

        known = {"deploy:build": build, "deploy:unbuild": unbuild}
        known["deploy:on_failure"] = on_failure
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


async def drained(redis: Redis, stream: str) -> bool:
    """Every message added to the stream was delivered and acknowledged."""
    info = await redis.xinfo_stream(stream)
    (group,) = await redis.xinfo_groups(stream)
    return (
        not group["pending"] and group["last-delivered-id"] == info["last-generated-id"]
    )


async def chain_stuck(fanin: FanInMiddleware, chain_id: str) -> bool:
    report = await sweep(fanin, dry_run=True)
    return any(
        f.group_id == chain_id and f.kind is FindingKind.CHAIN_STUCK
        for f in report.findings
    )


async def test_a_chain_at_a_step_no_worker_knows_is_not_redriven_and_given_up_once(
    redis_url: str, key_prefix: str, redis_client: Redis
) -> None:
    deploy = Deploy(redis_url, key_prefix)
    await deploy.planner.startup()
    try:
        async with worker(deploy.workers, max_async_tasks=2):
            await deploy.kick_chain("release")
            await eventually(lambda: deploy.built == ["release"], what="step 1")
            await eventually(
                lambda: chain_stuck(deploy.fanin, "release"), what="the deadline"
            )
            await eventually(
                lambda: drained(redis_client, deploy.stream), what="the drop"
            )
            kicked = await redis_client.xlen(deploy.stream)

            redriven = await sweep(deploy.fanin, policy="redrive")
            assert await redis_client.xlen(deploy.stream) == kicked  # nothing kicked
            (finding,) = redriven.findings
            assert finding.kind is FindingKind.CHAIN_STUCK
            assert finding.applied is False
            assert finding.unknown_tasks == [UNKNOWN]
            assert finding.note == (
                f"at step 2 of 2 ({UNKNOWN}); not re-driven: "
                f"task '{UNKNOWN}' unknown to this broker"
            )
            assert finding.redrives == 0  # no re-drive spent on nothing kicked

            await eventually(
                lambda: chain_stuck(deploy.fanin, "release"), what="still stuck"
            )
            given_up = await sweep(deploy.fanin, policy="give_up")
            await eventually(lambda: len(deploy.undone) == 1, what="the undo")
            await eventually(lambda: len(deploy.failures) == 1, what="on_error")
            await eventually(
                lambda: drained(redis_client, deploy.stream), what="the aftermath"
            )
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
