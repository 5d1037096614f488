"""Groups that grow, then seal, in the real scripts (fakeredis through lupa, and a
real redis-server): ``addMembers`` writes a batch after the members the ledger
holds, ``sealGroup`` fixes the total, and ``recordOutcome`` never completes an
unsealed group. Random interleavings of additions, seals, outcomes and
duplicate deliveries keep the rules: one claim, only after the seal and after
every member has an outcome; a windowed group never has more than its width
kicked, and none of its members is left unkicked.
"""

import asyncio
import secrets

import pytest
from fakeredis.aioredis import FakeRedis
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from taskiq_fanin.domain.config import DEFAULT_OUTCOME_STREAM_MAX as STREAM_MAX
from taskiq_fanin.storage.group_scripts import GroupScripts
from taskiq_fanin.storage.keys import GroupKeys
from taskiq_fanin.storage.records import GroupMeta
from taskiq_fanin.storage.replies import Added, Outcome, Recorded, Sealed
from tests.script_calls import OPTIONS, TOKEN, scripts_on

OPEN = {**OPTIONS, "open": 1}


def row(index: int) -> str:
    return f'{{"t":"m","a":[{index}]}}'


async def planned_open(
    scripts: GroupScripts, keys: GroupKeys, initial: int, window: int = 0
) -> None:
    await scripts.create_group(
        keys,
        token=TOKEN,
        options={**OPEN, "max_in_flight": window},
        members=[row(i) for i in range(initial)],
        planner_lease_ms=60_000,
        claimant="planner",
        sealed=False,
    )


async def record(
    scripts: GroupScripts,
    keys: GroupKeys,
    index: int,
    outcome: Outcome = Outcome.DONE,
    delivery: str = "",
) -> tuple[Recorded, int | None]:
    code, _, released = await scripts.record_outcome(
        keys,
        token=TOKEN,
        index=index,
        outcome=outcome,
        payload="",
        lease_ms=30_000,
        claimant="test",
        delivery=delivery or f"d-{index}",
        stream_max=STREAM_MAX,
    )
    return code, None if released is None else released.index


async def seal(scripts: GroupScripts, keys: GroupKeys, who: str = "sealer") -> Sealed:
    return (await scripts.seal_group(keys, lease_ms=30_000, claimant=who)).code


async def meta_of(client: Redis, keys: GroupKeys) -> GroupMeta:
    return GroupMeta.from_hash(await client.hgetall(keys.meta))


@pytest.fixture
def keys(key_prefix: str) -> GroupKeys:
    return GroupKeys(key_prefix, "grows")


async def test_members_ending_before_the_seal_never_complete_it(
    client: Redis, keys: GroupKeys
) -> None:
    scripts = scripts_on(client)
    await planned_open(scripts, keys, initial=2)
    added = await scripts.add_members(keys, batch="b1", most=100, members=[row(2)])
    assert (added.code, added.first, added.total, added.released) == (
        Added.ADDED,
        2,
        3,
        3,
    )
    assert [(await record(scripts, keys, i))[0] for i in range(3)] == [
        Recorded.RECORDED
    ] * 3
    meta = await meta_of(client, keys)
    assert (meta.state.value, meta.total, meta.sealed, meta.open) == (
        "open",
        3,
        False,
        True,
    )
    # The seal finds every member with an outcome: it claims, once.
    assert await seal(scripts, keys) is Sealed.CLAIMED
    assert await client.get(keys.claim) == b"sealer"
    assert await seal(scripts, keys) is Sealed.CLAIMED  # its reply lost: told again
    assert await seal(scripts, keys, "another") is Sealed.ALREADY
    assert (await meta_of(client, keys)).state.value == "claimed"


async def test_a_sealed_group_completes_with_its_last_outcome(
    client: Redis, keys: GroupKeys
) -> None:
    scripts = scripts_on(client)
    await planned_open(scripts, keys, initial=1)
    await scripts.add_members(keys, batch="b1", most=100, members=[row(1)])
    assert await seal(scripts, keys) is Sealed.SEALED
    assert (await record(scripts, keys, 0))[0] is Recorded.RECORDED
    assert (await record(scripts, keys, 1))[0] is Recorded.CLAIMED


async def test_an_addition_after_the_seal_writes_nothing(
    client: Redis, keys: GroupKeys
) -> None:
    scripts = scripts_on(client)
    await planned_open(scripts, keys, initial=1)
    await seal(scripts, keys)
    before = await client.hgetall(keys.plan)
    refused = await scripts.add_members(keys, batch="late", most=100, members=[row(9)])
    assert (refused.code, refused.state) == (Added.SEALED, "open")
    assert await client.hgetall(keys.plan) == before
    assert (await meta_of(client, keys)).total == 1


async def test_a_group_planned_closed_takes_no_members(
    client: Redis, keys: GroupKeys
) -> None:
    scripts = scripts_on(client)
    await scripts.create_group(
        keys,
        token=TOKEN,
        options=OPTIONS,
        members=[row(0)],
        planner_lease_ms=60_000,
        claimant="planner",
    )
    refused = await scripts.add_members(keys, batch="b", most=100, members=[row(1)])
    assert refused.code is Added.SEALED
    assert await seal(scripts, keys) is Sealed.ALREADY
    assert (await meta_of(client, keys)).total == 1


async def test_a_batch_sent_again_is_added_once(client: Redis, keys: GroupKeys) -> None:
    scripts = scripts_on(client)
    await planned_open(scripts, keys, initial=0)
    first = await scripts.add_members(keys, batch="b1", most=100, members=[row(0)])
    again = await scripts.add_members(keys, batch="b1", most=100, members=[row(0)])
    other = await scripts.add_members(keys, batch="b2", most=100, members=[row(1)])
    assert (first.first, again.first, other.first) == (0, 0, 1)
    assert (await meta_of(client, keys)).total == 2


async def test_the_total_may_not_pass_max_group_size(
    client: Redis, keys: GroupKeys
) -> None:
    scripts = scripts_on(client)
    await planned_open(scripts, keys, initial=2)
    refused = await scripts.add_members(
        keys, batch="b", most=3, members=[row(2), row(3)]
    )
    assert (refused.code, refused.total) == (Added.TOO_WIDE, 2)
    assert (await meta_of(client, keys)).total == 2
    assert await client.hget(keys.plan, "2") is None


async def test_an_empty_open_group_sealed_completes_at_once(
    client: Redis, keys: GroupKeys
) -> None:
    scripts = scripts_on(client)
    await planned_open(scripts, keys, initial=0)
    assert (await meta_of(client, keys)).state.value == "open"
    assert await seal(scripts, keys) is Sealed.CLAIMED


async def test_a_cancelled_open_group_takes_no_members_and_no_seal(
    client: Redis, keys: GroupKeys
) -> None:
    scripts = scripts_on(client)
    await planned_open(scripts, keys, initial=1)
    assert await scripts.cancel_group(keys, tombstone_ms=60_000)
    refused = await scripts.add_members(keys, batch="b", most=100, members=[row(1)])
    assert (refused.code, refused.state) == (Added.SEALED, "cancelled")
    assert await seal(scripts, keys) is Sealed.NOT_OPEN


async def test_a_missing_group_is_told_apart(client: Redis, keys: GroupKeys) -> None:
    scripts = scripts_on(client)
    missing = await scripts.add_members(keys, batch="b", most=100, members=[row(0)])
    assert missing.code is Added.NO_GROUP
    assert await seal(scripts, keys) is Sealed.NO_GROUP


# --- random interleavings -------------------------------------------------

OPERATION = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 3)),
    st.tuples(st.just("seal"), st.just(0)),
    st.tuples(st.just("end"), st.integers(0, 1_000)),
    st.tuples(st.just("fail"), st.integers(0, 1_000)),
    st.tuples(st.just("again"), st.integers(0, 1_000)),
)


class Play:
    """One interleaving, and what the rules say each step must answer."""

    def __init__(self, scripts: GroupScripts, keys: GroupKeys, window: int) -> None:
        self.scripts, self.keys, self.window = scripts, keys, window
        self.total = 0
        self.sealed = False
        self.kicked: set[int] = set()
        self.ended: set[int] = set()
        self.claims = 0

    def all_ended(self) -> bool:
        return self.ended == set(range(self.total))

    def kick(self, indexes: set[int]) -> None:
        assert not indexes & self.kicked, "a member released twice"
        assert all(0 <= i < self.total for i in indexes)
        self.kicked |= indexes
        if self.window:
            assert len(self.kicked - self.ended) <= self.window

    async def start(self, initial: int) -> None:
        await planned_open(self.scripts, self.keys, initial, self.window)
        self.total = initial
        first = min(self.window, initial) if self.window else initial
        self.kick(set(range(first)))

    async def add(self, count: int) -> None:
        batch = secrets.token_hex(4)
        rows = [row(self.total + i) for i in range(count)]
        added = await self.scripts.add_members(
            self.keys, batch=batch, most=1_000, members=rows
        )
        if self.sealed:
            assert added.code is Added.SEALED
            return
        assert (added.code, added.first) == (Added.ADDED, self.total)
        self.total += count
        assert added.total == self.total
        self.kick(set(range(added.first, min(added.released, self.total))))

    async def seal(self) -> None:
        code = await seal(self.scripts, self.keys)
        if self.sealed:
            assert code in (Sealed.ALREADY, Sealed.CLAIMED)
            return
        self.sealed = True
        assert code is (Sealed.CLAIMED if self.all_ended() else Sealed.SEALED)
        self.claims += code is Sealed.CLAIMED

    async def end(self, pick: int, outcome: Outcome) -> None:
        running = sorted(self.kicked - self.ended)
        if not running:
            return
        index = running[pick % len(running)]
        code, released = await record(self.scripts, self.keys, index, outcome)
        self.ended.add(index)
        completes = self.sealed and self.all_ended()
        assert code is (Recorded.CLAIMED if completes else Recorded.RECORDED)
        self.claims += code is Recorded.CLAIMED
        if released is not None:
            self.kick({released})

    async def again(self, pick: int) -> None:
        if not self.ended:
            return
        index = sorted(self.ended)[pick % len(self.ended)]
        copy = f"copy-{index}"  # another delivery of it
        code, released = await record(self.scripts, self.keys, index, delivery=copy)
        assert code in (Recorded.DUPLICATE, Recorded.CONFLICT, Recorded.FINALISED)
        assert released is None  # its release's lease holds: not told again


async def play(initial: int, window: int, operations: list[tuple[str, int]]) -> None:
    client = FakeRedis()
    try:
        game = Play(scripts_on(client), GroupKeys("hyp", "grows"), window)
        await game.start(initial)
        for name, value in operations:
            if name == "add":
                await game.add(value)
            elif name == "seal":
                await game.seal()
            elif name == "again":
                await game.again(value)
            else:
                failed = Outcome.FAILED if name == "fail" else Outcome.DONE
                await game.end(value, failed)
            assert game.claims <= 1
            if not game.sealed:
                assert game.claims == 0
        # Then sealed, and every member run to its end: each was kicked.
        await game.seal()
        while game.kicked - game.ended:
            await game.end(0, Outcome.DONE)
        assert game.kicked == set(range(game.total))
        assert game.claims == 1
        meta = GroupMeta.from_hash(await client.hgetall(game.keys.meta))
        assert (meta.state.value, meta.total) == ("claimed", game.total)
    finally:
        await client.aclose()


@settings(max_examples=300, deadline=None)
@given(
    initial=st.integers(0, 4),
    window=st.sampled_from([0, 1, 2, 3]),
    operations=st.lists(OPERATION, max_size=30),
)
def test_random_interleavings_claim_once_after_the_seal(
    initial: int, window: int, operations: list[tuple[str, int]]
) -> None:
    asyncio.run(play(initial, window, operations))
