"""Redis keeps the time: a planner and a worker whose clocks are an hour off, in
either direction, change nothing.

Every expiry, lease and deadline is a duration applied in Redis (or read from
its TIME): a planner an hour behind Redis no longer plans a group that has
already expired, nor one an hour ahead a group that is stuck at once.
"""

import time

import pytest
from redis.asyncio import Redis

from taskiq_fanin import FanInMiddleware, GroupResult, Signature, chain, group, sweep
from taskiq_fanin.inspection import chain_status, group_status
from taskiq_fanin.models import ChainState
from taskiq_fanin.storage.keys import ChainKeys, GroupKeys
from tests.harness import SentMessages, eventually, stream_broker, worker

TTL, DEADLINE = 1800.0, 600.0


@pytest.mark.parametrize("skew", [3600.0, -3600.0], ids=["ahead", "behind"])
async def test_skewed_clocks_plan_and_finish_on_redis_time(
    redis_url: str,
    redis_client: Redis,
    key_prefix: str,
    skew: float,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + skew)  # planner and worker
    sent = SentMessages()
    broker, fanin = stream_broker(redis_url, key_prefix, sent)
    results: list[GroupResult] = []

    @broker.task
    async def member(index: int) -> int:
        return index

    @broker.task
    async def then(result: GroupResult) -> None:
        results.append(result)

    @broker.task
    async def step(value: int) -> int:
        return value + 1

    async with worker(broker, max_async_tasks=4):
        await group(
            [Signature.of(member, i) for i in range(3)],
            then=then,
            group_id="skewed",
            ttl=TTL,
            deadline=DEADLINE,
        ).kiq(broker)
        meta = GroupKeys(key_prefix, "skewed").meta
        # Planned on Redis's clock: the keys live the ttl, the deadline is ahead.
        seconds, _ = await redis_client.time()
        deadline = int(await redis_client.hget(meta, "deadline")) / 1000
        assert abs(deadline - (seconds + DEADLINE)) < 30
        assert TTL * 1000 - 60_000 < await redis_client.pttl(meta) <= TTL * 1000
        # Nothing is due for the sweep, though the planner's clock says otherwise.
        assert (await sweep(fanin, dry_run=True)).findings == []
        await eventually(lambda: len(results) == 1, what="the continuation")
        await eventually(
            lambda: sent.executions_of(then.task_name) == 1, what="its completion"
        )
        handle = await chain(Signature.of(step, 1), Signature.of(step)).kiq(broker)
        await eventually(
            lambda: _chain_done(fanin, handle.chain_id), what="the chain to end"
        )
        record = ChainKeys(key_prefix, handle.chain_id).record
        ttl = await redis_client.pttl(record)
        status = await group_status(fanin, "skewed")

    assert results[0].results == [0, 1, 2]
    assert status.state.value == "completed"
    # Its age is on Redis's clock too, read with the status, not the caller's.
    assert status.read_at is not None
    assert status.created is not None
    assert abs(status.read_at.timestamp() - seconds) < 60
    # Completed: its age runs from creation to its finish, both on Redis's clock.
    assert status.finished is not None
    assert status.created <= status.finished <= status.read_at
    assert status.age_seconds() == (status.finished - status.created).total_seconds()
    # The tombstone, and the chain's record, live their durations from now.
    assert 0 < await redis_client.pttl(meta) <= fanin.config.tombstone_ttl * 1000
    assert fanin.config.ttl * 1000 - 60_000 < ttl <= fanin.config.ttl * 1000


async def _chain_done(fanin: FanInMiddleware, chain_id: str) -> bool:
    return (await chain_status(fanin, chain_id)).state is ChainState.DONE
