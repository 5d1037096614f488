"""A workflow's name: ``group(..., name=...)`` and ``chain(..., name=...)``, kept
on the record and shown by status; when not given, the continuation's (or the
first member's) task name for a group, the first step's for a chain; a chain's
group steps carry the chain's. A bad name is refused before anything is written.
"""

from collections.abc import AsyncIterator
from typing import Any

import pytest
from fakeredis.aioredis import FakeRedis
from taskiq import BrokerMessage, InMemoryBroker

from taskiq_fanin import (
    ChainStatus,
    FanInMiddleware,
    GroupStatus,
    Signature,
    chain,
    group,
    status,
)
from taskiq_fanin.errors import InvalidOptionError


class HoldingBroker(InMemoryBroker):
    """Holds every message unsent: the records are all a test reads."""

    def __init__(self) -> None:
        super().__init__()
        self.held: list[BrokerMessage] = []

    async def kick(self, message: BrokerMessage) -> None:
        self.held.append(message)


@pytest.fixture
async def broker(fake_redis: FakeRedis) -> AsyncIterator[HoldingBroker]:
    broker = HoldingBroker()
    broker.add_middlewares(FanInMiddleware(fake_redis, prefix="names"))
    for name in ("fetch", "store", "collect"):
        broker.register_task(_noop, task_name=name)
    await broker.startup()
    yield broker
    await broker.shutdown()


async def _noop(*_: Any) -> None:
    return None


async def group_name_of(broker: HoldingBroker, group_id: str) -> str | None:
    found = await status(broker, group_id)
    assert isinstance(found, GroupStatus)
    return found.name


async def chain_name_of(broker: HoldingBroker, chain_id: str) -> str | None:
    found = await status(broker, chain_id)
    assert isinstance(found, ChainStatus)
    return found.name


async def test_a_group_is_named_as_given_else_after_its_continuation_or_member(
    broker: HoldingBroker,
) -> None:
    members = [Signature.of("fetch", 1), Signature.of("fetch", 2)]
    await group(members, then="collect", name="albums", group_id="g1").kiq(broker)
    await group(members, then="collect", group_id="g2").kiq(broker)
    await group(members, group_id="g3").kiq(broker)
    await group([chain(Signature.of("store"))], group_id="g4").kiq(broker)
    names = [await group_name_of(broker, f"g{n}") for n in range(1, 5)]
    assert names == ["albums", "collect", "fetch", "store"]


async def test_a_chain_is_named_as_given_else_after_its_first_step(
    broker: HoldingBroker, fake_redis: FakeRedis
) -> None:
    steps = (Signature.of("fetch"), Signature.of("store"))
    await chain(*steps, name="import", chain_id="c1").kiq(broker)
    await chain(*steps, chain_id="c2").kiq(broker)
    await chain(group([Signature.of("store")]), *steps, chain_id="c3").kiq(broker)
    assert [await chain_name_of(broker, f"c{n}") for n in (1, 2, 3)] == [
        "import",
        "fetch",
        "store",
    ]
    # A chain's group step carries the chain's name.
    assert await group_name_of(broker, "c3~0") == "store"
    await chain(group([Signature.of("fetch")]), name="nightly", chain_id="c4").kiq(
        broker
    )
    assert await group_name_of(broker, "c4~0") == "nightly"


@pytest.mark.parametrize("bad", ["", "x" * 65, 7])
async def test_a_bad_name_is_refused_before_anything_is_written(
    broker: HoldingBroker, fake_redis: FakeRedis, bad: Any
) -> None:
    with pytest.raises(InvalidOptionError, match="name"):
        group([Signature.of("fetch")], name=bad)
    with pytest.raises(InvalidOptionError, match="name"):
        chain(Signature.of("fetch"), name=bad)
    assert broker.held == []
    assert await fake_redis.keys("names:*") == []
