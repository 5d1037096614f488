"""Group transitions and sweep findings are observable: Prometheus counters (the
dev extra installs prometheus_client) and structured log fields.
"""

import logging

import pytest
from fakeredis.aioredis import FakeRedis
from prometheus_client import REGISTRY
from taskiq import BrokerMessage, InMemoryBroker

from taskiq_fanin import (
    FanInMiddleware,
    GroupHandle,
    GroupResult,
    Signature,
    group,
    sweep,
)
from tests.harness import eventually


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def group_samples() -> tuple[float, ...]:
    return (
        sample("taskiq_fanin_groups_planned_total"),
        sample("taskiq_fanin_members_recorded_total", outcome="done"),
        sample("taskiq_fanin_members_recorded_total", outcome="failed"),
        sample("taskiq_fanin_groups_finalised_total", continuation="then"),
        sample("taskiq_fanin_continuation_dispatch_seconds_count"),
    )


async def test_a_group_counts_planned_recorded_and_finalised(
    fake_redis: FakeRedis, caplog: pytest.LogCaptureFixture
) -> None:
    fanin = FanInMiddleware(fake_redis, prefix="metrics")
    broker = InMemoryBroker().with_middlewares(fanin)

    @broker.task
    async def member(index: int) -> None:
        if index == 2:
            raise ValueError("bad")

    @broker.task
    async def then(result: GroupResult) -> None:
        return None

    before = group_samples()
    await broker.startup()
    with caplog.at_level(logging.INFO, logger="taskiq_fanin"):
        await group([Signature.of(member, i) for i in range(3)], then=then).kiq(broker)
        await broker.wait_all()
    await broker.shutdown()
    after = group_samples()

    assert [b - a for a, b in zip(before, after, strict=True)] == [1, 2, 1, 1, 1]
    (finalised,) = [
        r for r in caplog.records if getattr(r, "fanin_event", "") == "finalised"
    ]
    assert (finalised.done, finalised.failed, finalised.continuation) == (2, 1, "then")  # type: ignore[attr-defined]


class SilentBroker(InMemoryBroker):
    """Accepts every message and delivers none: members that never arrive."""

    async def kick(self, message: BrokerMessage) -> None:
        return None


async def test_a_sweep_sets_the_stuck_gauge_and_counts_findings(
    fake_redis: FakeRedis,
) -> None:
    fanin = FanInMiddleware(fake_redis, prefix="stuck")
    broker = SilentBroker().with_middlewares(fanin)

    @broker.task
    async def member(index: int) -> None:
        return None

    await broker.startup()
    stuck_before = sample("taskiq_fanin_sweep_findings_total", kind="stuck")
    handle = await group([Signature.of(member, 0)], deadline=0.05).kiq(broker)
    await eventually(lambda: _overdue(handle), what="the group to pass its deadline")
    await sweep(fanin, dry_run=True)
    stuck_gauge = sample("taskiq_fanin_stuck_groups")
    await broker.shutdown()

    assert stuck_gauge == 1
    assert sample("taskiq_fanin_sweep_findings_total", kind="stuck") == stuck_before + 1


async def _overdue(handle: GroupHandle) -> bool:
    return (await handle.status()).overdue()
