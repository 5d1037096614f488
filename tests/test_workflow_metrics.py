"""End-to-end durations, queue waits between chain steps, and the open and
overdue gauges, read back through prometheus_client's registry.

On a real redis-server with a real Receiver: a named group and a named chain
(with a group step) run with members, steps and the continuation delivered
twice, and each workflow is observed once, with its duration on Redis's clock;
a cancel is observed once however often it is asked; a sweep sets the overdue
gauge over a group and a chain past their deadline and back to 0 once they
ended. The registry is the process's: every name a test uses is its own
(``key_prefix`` in it), so tests in one process count apart.
"""

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fakeredis.aioredis import FakeRedis
from prometheus_client import REGISTRY
from taskiq import BrokerMessage, InMemoryBroker, SimpleRetryMiddleware

from taskiq_fanin import (
    ChainStatus,
    FanInMiddleware,
    GroupResult,
    GroupStatus,
    Signature,
    chain,
    group,
    status,
    sweep,
)
from taskiq_fanin.models import ChainState, GroupState
from tests.harness import (
    DuplicatingMiddleware,
    SentMessages,
    drained,
    eventually,
    overdue,
    stream_broker,
    worker,
)

DURATION = "taskiq_fanin_workflow_duration_seconds"
WAIT = "taskiq_fanin_chain_step_wait_seconds"


def sample(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def ended(kind: str, workflow: str, state: str) -> tuple[float | None, float | None]:
    """The duration histogram's count and sum for one workflow and end state."""
    labels = {"kind": kind, "workflow": workflow, "state": state}
    return sample(f"{DURATION}_count", **labels), sample(f"{DURATION}_sum", **labels)


def gauges(kind: str) -> tuple[float | None, float | None]:
    return (
        sample("taskiq_fanin_open_workflows", kind=kind),
        sample("taskiq_fanin_overdue_workflows", kind=kind),
    )


def seconds_between(found: GroupStatus | ChainStatus) -> float:
    start = found.created if isinstance(found, GroupStatus) else found.started
    assert start is not None
    assert found.finished is not None
    return (found.finished - start).total_seconds()


async def test_each_workflow_is_observed_once_under_duplicate_delivery(
    redis_url: str, key_prefix: str
) -> None:
    album, pipeline = f"album-{key_prefix}", f"import-{key_prefix}"
    photo_task = f"{key_prefix}:photo"  # the unnamed group's name: its member's

    # Members are delivered twice as they are sent; a step is retried once;
    # every message of the chains' steps and the continuation once more after
    # all ended.
    duplicating = DuplicatingMiddleware(
        lambda m: m.task_id in ("album~2", "plain~0", "imp~1~1")
    )
    sent = SentMessages()
    retry = SimpleRetryMiddleware(default_retry_count=3)
    broker, _ = stream_broker(redis_url, key_prefix, retry, duplicating, sent)
    collected: list[GroupResult] = []
    fetches: list[int] = []

    @broker.task(task_name=photo_task)
    async def photo(index: int) -> int:
        return index

    @broker.task(task_name=f"{key_prefix}:collect")
    async def collect(result: GroupResult) -> None:
        collected.append(result)

    @broker.task(task_name=f"{key_prefix}:fetch", retry_on_error=True)
    async def fetch() -> int:
        fetches.append(1)
        if len(fetches) == 1:  # the chain's first step runs twice: one wait
            raise ConnectionError("transient")
        return 3

    @broker.task(task_name=f"{key_prefix}:store")
    async def store(result: GroupResult) -> int:
        return result.done_count

    @broker.task(task_name=f"{key_prefix}:boom")
    async def boom() -> None:
        raise ValueError("boom")

    async with worker(broker, max_async_tasks=4) as receiver:
        members = [Signature.of(photo, i) for i in range(5)]
        await group(members, then=collect, name=album, group_id="album").kiq(broker)
        await group(members[:2], group_id="plain").kiq(broker)
        steps = (
            Signature.of(fetch),
            group([Signature.of(photo)] * 3),
            Signature.of(store),
        )
        await chain(*steps, name=pipeline, chain_id="imp").kiq(broker)
        await chain(
            Signature.of(boom), Signature.of(fetch).immutable(), chain_id="bad"
        ).kiq(broker)

        async def all_ended() -> bool:
            ids = ("album", "plain", "imp", "bad")
            found = [await status(broker, i) for i in ids]
            over = (GroupState.COMPLETED, ChainState.DONE, ChainState.FAILED)
            return all(s.state in over for s in found)

        await eventually(all_ended, what="the groups and the chains to end")
        await drained(broker, receiver)
        late = [
            m
            for m in sent.sent
            if m.task_name.split(":")[-1] in ("collect", "fetch", "store", "boom")
        ]
        kinds = {m.task_name.split(":")[-1] for m in late}
        assert kinds == {"collect", "fetch", "store", "boom"}
        for message in late:
            await sent.resend(message)
        await drained(broker, receiver)
        album_status = await status(broker, "album")
        plain_status = await status(broker, "plain")
        chain_status = await status(broker, "imp")
        failed_status = await status(broker, "bad")
        step_status = await status(broker, "imp~1")

    assert {m.task_id for m in duplicating.duplicated} == {
        "album~2",
        "plain~0",
        "imp~1~1",
    }
    assert len(collected) == 1
    assert len(fetches) == 2  # the named chain's first step, retried once
    observed_once(
        key_prefix,
        album=album_status,
        plain=plain_status,
        imp=chain_status,
        bad=failed_status,
        step=step_status,
    )


def observed_once(key_prefix: str, **found: GroupStatus | ChainStatus) -> None:
    """Each workflow's duration once, as its record says; each task step's wait
    once (fetch and store: a group step has no body), shorter than the chain."""
    album, pipeline = f"album-{key_prefix}", f"import-{key_prefix}"
    photo_task = f"{key_prefix}:photo"
    names = [found[i].name for i in ("album", "imp", "plain", "step")]
    # The chain's group step is a group of the chain's name.
    assert names == [album, pipeline, photo_task, pipeline]
    for kind, name, status_, state in (
        ("group", album, found["album"], "completed"),
        ("group", photo_task, found["plain"], "completed"),
        ("chain", pipeline, found["imp"], "done"),
        ("chain", f"{key_prefix}:boom", found["bad"], "failed"),
    ):
        count, total = ended(kind, name, state)
        assert count == 1, (kind, name)
        assert total == pytest.approx(seconds_between(status_), abs=0.0015)
    assert ended("group", pipeline, "completed")[0] == 1
    assert ended("group", album, "cancelled") == (None, None)
    assert sample(f"{WAIT}_count", workflow=pipeline) == 2
    wait_sum = sample(f"{WAIT}_sum", workflow=pipeline)
    assert wait_sum is not None
    assert 0 <= wait_sum <= seconds_between(found["imp"])


class HoldingBroker(InMemoryBroker):
    """Holds every message unsent: nothing runs, so the workflows stay open."""

    async def kick(self, message: BrokerMessage) -> None:
        return None


@pytest.fixture
async def holding(fake_redis: FakeRedis) -> AsyncIterator[InMemoryBroker]:
    broker = HoldingBroker()
    broker.add_middlewares(FanInMiddleware(fake_redis, prefix="cancels"))
    broker.register_task(_noop, task_name="member")
    await broker.startup()
    yield broker
    await broker.shutdown()


async def _noop(*_: Any) -> None:
    return None


async def test_a_cancel_is_observed_once_however_often_it_is_asked(
    holding: InMemoryBroker, key_prefix: str
) -> None:
    name = f"cancelled-{key_prefix}"
    handle = await group([Signature.of("member")], name=name).kiq(holding)
    assert await handle.cancel()
    assert not await handle.cancel()
    chained = await chain(Signature.of("member"), name=name).kiq(holding)
    assert await chained.cancel()
    assert not await chained.cancel()
    assert ended("group", name, "cancelled")[0] == 1
    assert ended("chain", name, "cancelled")[0] == 1
    assert ended("group", name, "completed") == (None, None)


SHORT = 0.3  # seconds: a deadline short enough to pass within a test


async def test_the_sweep_sets_the_overdue_gauges_and_they_fall_back_once_ended(
    redis_url: str, key_prefix: str
) -> None:
    """A group and a chain (the middleware's deadline: a step may take that long)
    held past their deadline are overdue at the sweep; once ended, the next
    sweep counts neither open nor overdue."""
    broker, fanin = stream_broker(redis_url, key_prefix, deadline=SHORT)
    go = asyncio.Event()

    @broker.task(task_name=f"{key_prefix}:hold")
    async def hold() -> None:
        await go.wait()

    async with worker(broker, max_async_tasks=4) as receiver:
        await group([Signature.of(hold)], group_id="late").kiq(broker)
        await chain(Signature.of(hold), chain_id="slow").kiq(broker)
        await eventually(lambda: overdue(fanin, "late"), what="the group overdue")

        async def both_overdue() -> bool:
            await sweep(fanin, sweep_policy="report")
            return gauges("group")[1] == 1 and gauges("chain")[1] == 1

        await eventually(both_overdue, what="the sweep to find both overdue")
        assert gauges("group") == (1, 1)
        assert gauges("chain") == (1, 1)

        go.set()

        async def both_ended() -> bool:
            found = [await status(broker, i) for i in ("late", "slow")]
            return [s.state for s in found] == [GroupState.COMPLETED, ChainState.DONE]

        await eventually(both_ended, what="the group and the chain to end")
        await drained(broker, receiver)
        await sweep(fanin, sweep_policy="report")

    assert gauges("group") == (0, 0)
    assert gauges("chain") == (0, 0)
