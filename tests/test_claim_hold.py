"""The members of the call that completed a group wait while its claimant kicks.

The claimant hears first; the call's other members resume (acknowledge, read
the next message) only once the claimant says it is done, or ``hold_seconds``
later when it never says so. A call that completes its group goes from its
last caller, not through the pipeline's sender a few loop turns later.
"""

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from redis.asyncio import Redis

from taskiq_fanin.domain.config import FanInConfig
from taskiq_fanin.domain.labels import MemberRef
from taskiq_fanin.groups import recording
from taskiq_fanin.models import OutcomeBatching
from taskiq_fanin.storage.group_scripts import GroupScripts
from taskiq_fanin.storage.keys import GroupKeys
from taskiq_fanin.storage.replies import Outcome, Recorded
from taskiq_fanin.transport.outcome_batching import OutcomeBatcher, group_call_key
from taskiq_fanin.transport.pipeline import Command, PipelineBatcher
from tests.script_calls import TOKEN, create

#: Longer than any test's deadline: a held member that hears did not wait it out.
FOREVER = OutcomeBatching(hold_seconds=3600.0, recent_seconds=3600.0)
DEADLINE = 5.0


class CountedPipeline(PipelineBatcher):
    """A pipeline that counts the commands sent at once, from their callers."""

    def __init__(self, client: Redis) -> None:
        super().__init__(client)
        self.sent_now = 0

    async def now(self, command: Command, *, written: Any = None) -> Any:
        self.sent_now += 1
        return await super().now(command, written=written)


async def batcher_on(
    fake_redis: Redis, keys: GroupKeys, tuning: OutcomeBatching
) -> tuple[OutcomeBatcher, CountedPipeline]:
    """A batcher on a group of 20, with the pipeline it sends through."""
    pipeline = CountedPipeline(fake_redis)
    scripts = GroupScripts(fake_redis, pipeline, batching=tuning)
    await create(scripts, keys, total=20)
    return scripts.outcomes, pipeline


async def record(batcher: OutcomeBatcher, keys: GroupKeys, index: int) -> Recorded:
    code, _, _ = await batcher.record(
        keys.recording, TOKEN, (30_000, "test", 0), (index, "done", "", f"d{index}")
    )
    return Recorded(code)


def all_at_once(
    batcher: OutcomeBatcher, keys: GroupKeys, indexes: range
) -> dict[int, "asyncio.Task[Recorded]"]:
    """Members ``indexes`` run here and record together (one call)."""
    for index in indexes:
        batcher.member_running(group_call_key(keys.recording, TOKEN), index)
    return {i: asyncio.create_task(record(batcher, keys, i)) for i in indexes}


async def turns(count: int) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


@pytest.fixture
def keys(key_prefix: str) -> GroupKeys:
    return GroupKeys(key_prefix, "g1")


async def test_the_claimants_call_mates_wait_until_it_says_it_is_done(
    fake_redis: Redis, keys: GroupKeys
) -> None:
    batcher, _ = await batcher_on(fake_redis, keys, FOREVER)
    recording_ = all_at_once(batcher, keys, range(20))
    claimant = await asyncio.wait_for(recording_[19], DEADLINE)
    assert claimant is Recorded.CLAIMED
    await turns(50)
    assert [i for i, task in recording_.items() if task.done()] == [19]
    # ... though all of them are recorded in Redis already.
    assert await fake_redis.scard(keys.done) == 20

    batcher.claim_handled(keys.recording, TOKEN)
    heard = await asyncio.wait_for(asyncio.gather(*recording_.values()), DEADLINE)
    assert heard == [Recorded.RECORDED] * 19 + [Recorded.CLAIMED]


async def test_a_claimant_that_never_says_holds_its_call_mates_a_while_only(
    fake_redis: Redis, keys: GroupKeys
) -> None:
    batcher, _ = await batcher_on(
        fake_redis, keys, OutcomeBatching(hold_seconds=0.05, recent_seconds=3600.0)
    )
    recording_ = all_at_once(batcher, keys, range(20))
    assert await asyncio.wait_for(recording_[19], DEADLINE) is Recorded.CLAIMED
    await turns(50)
    assert not recording_[0].done()  # held ...
    heard = await asyncio.wait_for(asyncio.gather(*recording_.values()), DEADLINE)
    assert heard[:19] == [Recorded.RECORDED] * 19  # ... then heard, unasked


async def test_a_call_not_completing_its_group_holds_nobody(
    fake_redis: Redis, keys: GroupKeys
) -> None:
    batcher, _ = await batcher_on(fake_redis, keys, FOREVER)
    recording_ = all_at_once(batcher, keys, range(10))
    heard = await asyncio.wait_for(asyncio.gather(*recording_.values()), DEADLINE)
    assert heard == [Recorded.RECORDED] * 10


async def test_a_call_that_completes_its_group_goes_from_its_caller(
    fake_redis: Redis, keys: GroupKeys
) -> None:
    batcher, pipeline = await batcher_on(fake_redis, keys, FOREVER)
    # The first call cannot know it holds the rest: through the sender.
    first = all_at_once(batcher, keys, range(15))
    await asyncio.wait_for(asyncio.gather(*first.values()), DEADLINE)
    assert pipeline.sent_now == 0
    # Its reply said 5 are left: the call holding those 5 goes at once.
    rest = all_at_once(batcher, keys, range(15, 20))
    assert await asyncio.wait_for(rest[19], DEADLINE) is Recorded.CLAIMED
    assert pipeline.sent_now == 1
    batcher.claim_handled(keys.recording, TOKEN)
    await asyncio.wait_for(asyncio.gather(*rest.values()), DEADLINE)


class FinaliseFailedError(Exception):
    """The claimant's finalise raised (Redis away mid-kick, say)."""


async def test_a_claimant_whose_finalise_raises_still_lets_its_call_mates_go(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    handled: list[tuple[str, str]] = []

    class Scripts:
        async def record_outcome(self, keys: GroupKeys, **_: Any) -> Any:
            return Recorded.CLAIMED, None, None

        def claim_handled(self, keys: GroupKeys, *, token: str) -> None:
            handled.append((keys.group_id, token))

    async def finalise(*_: Any, **__: Any) -> None:
        raise FinaliseFailedError

    monkeypatch.setattr(recording, "finalise", finalise)
    ctx: Any = SimpleNamespace(config=FanInConfig(), scripts=Scripts())
    with pytest.raises(FinaliseFailedError):  # raised: the member is retried
        await recording.record(
            ctx, MemberRef("g1", 3, TOKEN), Outcome.DONE, "", delivery="d1"
        )
    assert handled == [("g1", TOKEN)]
