"""The window's edges, in the real scripts: on fakeredis (through lupa) and on a
real redis-server. A windowed group (``max_in_flight`` K) releases the next
ledger index with each outcome newly recorded, inside ``recordOutcome``.
"""

import asyncio

import pytest
from redis.asyncio import Redis

from taskiq_fanin.domain.config import DEFAULT_OUTCOME_STREAM_MAX as STREAM_MAX
from taskiq_fanin.storage.group_scripts import GroupScripts
from taskiq_fanin.storage.keys import GroupKeys
from taskiq_fanin.storage.records import GroupMeta
from taskiq_fanin.storage.releases import Released
from taskiq_fanin.storage.replies import Outcome, Recorded
from taskiq_fanin.transport.pipeline import PipelineBatcher
from tests.script_calls import OPTIONS, TOKEN, scripts_on

#: A lease of the release that ran out already (the kick may have died).
RUN_OUT = -1


@pytest.fixture
def keys(key_prefix: str) -> GroupKeys:
    return GroupKeys(key_prefix, "w1")


def row(index: int) -> str:
    return f'{{"t":"m","a":[{index}]}}'


async def windowed(
    scripts: GroupScripts, keys: GroupKeys, total: int, most: int
) -> None:
    await scripts.create_group(
        keys,
        token=TOKEN,
        options={**OPTIONS, "max_in_flight": most},
        members=[row(i) for i in range(total)],
        planner_lease_ms=60_000,
        claimant="planner",
    )


async def record(
    scripts: GroupScripts,
    keys: GroupKeys,
    index: int,
    outcome: Outcome = Outcome.DONE,
    *,
    delivery: str | None = None,
    lease_ms: int = 30_000,
) -> tuple[Recorded, int | None]:
    """Record a member: its code and the index its outcome released, if any."""
    code, _, released = await scripts.record_outcome(
        keys,
        token=TOKEN,
        index=index,
        outcome=outcome,
        payload="",
        lease_ms=lease_ms,
        claimant="test",
        delivery=delivery or f"d-{index}",
        stream_max=STREAM_MAX,
    )
    if released is not None:
        assert released == Released(released.index, row(released.index), 1, False)
    return code, None if released is None else released.index


async def meta_of(client: Redis, keys: GroupKeys) -> GroupMeta:
    return GroupMeta.from_hash(await client.hgetall(keys.meta))


async def test_each_outcome_done_or_failed_releases_the_next_member(
    client: Redis, keys: GroupKeys
) -> None:
    scripts = scripts_on(client)
    await windowed(scripts, keys, total=5, most=2)
    first = await meta_of(client, keys)
    assert (first.released, first.in_flight, first.waiting) == (2, 2, 3)

    replies = [
        await record(scripts, keys, 1),
        await record(scripts, keys, 0, Outcome.FAILED),  # a failure releases too
        await record(scripts, keys, 3),
        await record(scripts, keys, 2),  # the ledger's last is out already
    ]
    assert replies == [
        (Recorded.RECORDED, 2),
        (Recorded.RECORDED, 3),
        (Recorded.RECORDED, 4),
        (Recorded.RECORDED, None),
    ]
    meta = await meta_of(client, keys)
    assert (meta.released, meta.in_flight, meta.waiting) == (5, 1, 0)
    assert await client.exists(keys.window) == 1
    assert await record(scripts, keys, 4) == (Recorded.CLAIMED, None)
    # Every member has an outcome: what they released is of no more use.
    assert await client.exists(keys.window) == 0
    assert (await meta_of(client, keys)).in_flight == 0


async def test_a_window_of_one_runs_the_members_one_after_the_other(
    client: Redis, keys: GroupKeys
) -> None:
    scripts = scripts_on(client)
    await windowed(scripts, keys, total=4, most=1)
    replies, kept = [], []
    for index in range(4):
        replies.append(await record(scripts, keys, index))
        kept.append(await client.hlen(keys.window))
    assert replies == [
        (Recorded.RECORDED, 1),
        (Recorded.RECORDED, 2),
        (Recorded.RECORDED, 3),
        (Recorded.CLAIMED, None),
    ]
    # What released a member goes once it has its outcome: the hash holds the
    # window's releases (an entry and its reverse), not one per member.
    assert kept == [2, 2, 2, 0]


async def test_a_window_as_wide_as_the_group_releases_nothing(
    client: Redis, keys: GroupKeys
) -> None:
    scripts = scripts_on(client)
    await windowed(scripts, keys, total=3, most=5)
    meta = await meta_of(client, keys)
    assert (meta.released, meta.in_flight, meta.waiting) == (3, 3, 0)
    assert [await record(scripts, keys, i) for i in range(3)] == [
        (Recorded.RECORDED, None),
        (Recorded.RECORDED, None),
        (Recorded.CLAIMED, None),
    ]
    assert await client.exists(keys.window) == 0  # nothing was ever kept


async def test_outcomes_recorded_in_one_call_release_one_member_each(
    client: Redis, keys: GroupKeys
) -> None:
    pipeline = PipelineBatcher(client)
    scripts = scripts_on(client, pipeline)
    await windowed(scripts, keys, total=8, most=4)
    calls = scripts.outcomes.stats.calls
    replies = await asyncio.gather(
        record(scripts, keys, 2),
        record(scripts, keys, 0, Outcome.FAILED),
        record(scripts, keys, 2, delivery="another"),  # a duplicate: nothing new
        record(scripts, keys, 3),
        record(scripts, keys, 1),
    )
    # One script call for them all (counted once when NOSCRIPT makes it load).
    assert scripts.outcomes.stats.calls - calls == 1
    assert replies == [
        (Recorded.RECORDED, 4),
        (Recorded.RECORDED, 5),
        (Recorded.DUPLICATE, None),
        (Recorded.RECORDED, 6),
        (Recorded.RECORDED, 7),
    ]
    meta = await meta_of(client, keys)
    assert (meta.released, meta.in_flight, meta.waiting) == (8, 4, 0)


async def test_a_duplicate_is_told_what_its_member_released_only_when_safe(
    client: Redis, keys: GroupKeys
) -> None:
    scripts = scripts_on(client)
    await windowed(scripts, keys, total=6, most=2)
    assert await record(scripts, keys, 0, delivery="first") == (Recorded.RECORDED, 2)
    # The same delivery asking again (its reply was lost): told again, to kick.
    assert await record(scripts, keys, 0, delivery="first") == (Recorded.DUPLICATE, 2)
    # Another delivery while the first one's kick may be under way: nothing.
    assert await record(scripts, keys, 0, delivery="second") == (
        Recorded.DUPLICATE,
        None,
    )
    # Once the release's lease ran out, the released member has no outcome: its
    # kick may have died with the first one's worker; this delivery kicks it.
    assert await record(scripts, keys, 0, delivery="third", lease_ms=RUN_OUT) == (
        Recorded.DUPLICATE,
        2,
    )
    # ... under a lease of its own: others wait again, it is told again.
    assert await record(scripts, keys, 0, delivery="fourth") == (
        Recorded.DUPLICATE,
        None,
    )
    assert await record(scripts, keys, 0, delivery="third") == (Recorded.DUPLICATE, 2)
    # The other outcome of the member, as late: the same.
    assert await record(
        scripts, keys, 0, Outcome.FAILED, delivery="fifth", lease_ms=RUN_OUT
    ) == (Recorded.CONFLICT, 2)
    # The released member ran: nobody kicks it again, however late.
    assert await record(scripts, keys, 2) == (Recorded.RECORDED, 3)
    assert await record(scripts, keys, 0, delivery="sixth", lease_ms=RUN_OUT) == (
        Recorded.DUPLICATE,
        None,
    )
    meta = await meta_of(client, keys)
    assert (meta.done, meta.released, meta.in_flight) == (2, 4, 2)


async def test_a_cancelled_group_releases_nothing(
    client: Redis, keys: GroupKeys
) -> None:
    scripts = scripts_on(client)
    await windowed(scripts, keys, total=5, most=2)
    assert await record(scripts, keys, 0) == (Recorded.RECORDED, 2)
    assert await scripts.cancel_group(keys, tombstone_ms=5_000)
    assert await client.exists(keys.window) == 0  # what it released goes
    assert await record(scripts, keys, 1) == (Recorded.COUNTED_CANCELLED, None)
    assert await record(scripts, keys, 2, Outcome.FAILED) == (
        Recorded.COUNTED_CANCELLED,
        None,
    )
    assert await record(scripts, keys, 0, delivery="d-0") == (Recorded.DUPLICATE, None)
    assert await client.exists(keys.window) == 0
    meta = await meta_of(client, keys)
    assert (meta.in_flight, meta.waiting) == (0, 0)  # over: nothing runs or waits


async def test_a_redrive_pass_of_a_windowed_group_ends_at_its_released_members(
    client: Redis, keys: GroupKeys
) -> None:
    scripts = scripts_on(client)
    await windowed(scripts, keys, total=10, most=3)
    await record(scripts, keys, 0)  # members 1-3 released, 4-9 wait
    first = await scripts.redrive_group(keys, token=TOKEN, max_redrives=3, stop=2)
    assert (first.redriven, first.over) == (True, False)  # 2-3 are still its
    rest = await scripts.redrive_group(
        keys, token=TOKEN, max_redrives=3, start=2, stop=4
    )
    assert (rest.redriven, rest.over) == (True, True)
    assert await scripts.missing_members(keys, 0, 4) == {i: row(i) for i in (1, 2, 3)}


async def test_a_windowed_groups_deadline_slides_with_each_outcome(
    client: Redis, keys: GroupKeys
) -> None:
    """It is stuck when its window has not moved for its span, whatever its
    width; near their expiry its keys live a ttl more."""
    scripts = scripts_on(client)
    await scripts.create_group(
        keys,
        token=TOKEN,
        options={**OPTIONS, "max_in_flight": 2, "span": 60_000, "ttl": 100_000},
        members=[row(i) for i in range(5)],
        planner_lease_ms=60_000,
        claimant="planner",
    )
    plain = GroupKeys(keys.prefix, "plain")
    await scripts.create_group(
        plain,
        token=TOKEN,
        options=OPTIONS,
        members=[row(i) for i in range(5)],
        planner_lease_ms=60_000,
        claimant="planner",
    )
    for group in (keys, plain):
        await client.hset(group.meta, "deadline", 0)  # long past
    await record(scripts, keys, 0)
    await record(scripts, plain, 0)

    now = int((await client.time())[0]) * 1000
    windowed, unwindowed = await meta_of(client, keys), await meta_of(client, plain)
    assert windowed.due_at is not None
    assert now - 5_000 < windowed.due_at - 60_000 <= now + 1_000
    assert unwindowed.due_at == 0  # an unwindowed group's deadline stays
    # Within two spans of its expiry: pushed to a ttl (or two spans) from now.
    assert windowed.expires_at is not None
    assert windowed.expires_at - 120_000 > now - 5_000
    for key in (keys.meta, keys.plan, keys.done, keys.window):
        assert await client.pttl(key) > 100_000


async def test_a_redrive_keeps_a_windowed_groups_window_as_long_as_its_other_keys(
    client: Redis, keys: GroupKeys
) -> None:
    """A stalled windowed group re-driven lives past its new deadline, and so
    must what its outcomes released: without it a redelivered member can no
    longer kick again what it released."""
    scripts = scripts_on(client)
    await scripts.create_group(
        keys,
        token=TOKEN,
        options={**OPTIONS, "max_in_flight": 2, "span": 60_000, "ttl": 100_000},
        members=[row(i) for i in range(5)],
        planner_lease_ms=60_000,
        claimant="planner",
    )
    assert await record(scripts, keys, 0) == (Recorded.RECORDED, 2)
    # Stalled since: its keys are 30 s from their expiry (as Redis's clock sees it).
    now = int((await client.time())[0]) * 1000
    await client.hset(keys.meta, "expires", now + 30_000)
    for key in (keys.meta, keys.plan, keys.done, keys.window):
        assert await client.pexpire(key, 30_000)
    redriven = await scripts.redrive_group(keys, token=TOKEN, max_redrives=3)
    assert redriven.redriven
    # The new deadline is a span from now, the keys' expiry a span past it.
    for key in (keys.meta, keys.plan, keys.done, keys.window):
        assert await client.pttl(key) > 110_000, key
