"""A worker app for the locked-down Redis test: TLS and an ACL user, defaults else.

A ``RedisStreamBroker`` and a ``FanInMiddleware`` on ``REDIS_URL`` (a
``rediss://`` URL of the ACL user the README's rule makes), with their default
stream (``taskiq``), consumer group and key prefix (``fanin``): exactly what
the rule names. The tasks say what they did on ``OBS_URL``, a plain server of
the test's own.
"""

import asyncio
import os
from typing import Any

from redis.asyncio import Redis
from taskiq_redis import RedisStreamBroker

from taskiq_fanin import ChainFailure, FanInMiddleware, GroupResult

REDIS_URL = os.environ.get("REDIS_URL", "rediss://127.0.0.1:6379/0")
OBS_URL = os.environ.get("OBS_URL", "redis://127.0.0.1:6379/0")

broker = RedisStreamBroker(REDIS_URL, xread_block=100).with_middlewares(
    FanInMiddleware(REDIS_URL, finaliser_lease=1, deadline=60)
)

_obs: Redis | None = None


def obs() -> Redis:
    """This process's client of the observation server."""
    global _obs  # noqa: PLW0603 - one client per process, made on first use
    if _obs is None:
        _obs = Redis.from_url(OBS_URL, decode_responses=True)
    return _obs


@broker.task(task_name="locked.member")
async def member(index: int) -> int:
    """A member; the one numbered 99 waits for the test's ``go`` (the sweep's)."""
    if index == 99:
        while not await obs().exists("go"):
            await asyncio.sleep(0.02)
    return index


@broker.task(task_name="locked.publish")
async def publish(result: GroupResult) -> None:
    """A group's continuation: says what it got."""
    await obs().rpush(
        "continuations", f"{result.group_id} {result.done_count} {result.lost_count}"
    )


@broker.task(task_name="locked.step")
async def step(previous: int, add: int) -> int:
    """A chain step."""
    return previous + add


@broker.task(task_name="locked.last")
async def last(previous: int, chain_id: str) -> None:
    """A chain's last step: says what it got."""
    await obs().rpush("chains", f"{chain_id} {previous}")


@broker.task(task_name="locked.fail")
async def fail(*_: Any) -> None:
    """A step that fails for good."""
    raise RuntimeError("on purpose")


@broker.task(task_name="locked.undo")
async def undo(chain_id: str) -> None:
    """A compensation: says it ran."""
    await obs().rpush("compensations", chain_id)


@broker.task(task_name="locked.on_error")
async def on_error(failure: ChainFailure) -> None:
    """A chain's error continuation: says it ran."""
    await obs().rpush("on_error", f"{failure.chain_id} {failure.step}")
