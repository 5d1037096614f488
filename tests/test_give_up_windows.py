"""Giving a group up in windows of its ledger (``giveUp-6.lua``), against the real
Lua on fakeredis and on a real server.

The first window moves the group to ``giving_up``: no outcome is recorded any
more (a member ending mid-scan is refused, and counted lost once), no cancel,
re-drive or ledger chunk is taken; each window notes its members without an
outcome in the lost set; a window asked for where the pass is not (a second
sweep racing the first) changes nothing; the window reaching the ledger's end
claims, once.
"""

import pytest
from fakeredis.aioredis import FakeRedis
from redis.asyncio import Redis

from taskiq_fanin import FanInMiddleware, GroupResult, Signature, group, sweep
from taskiq_fanin.api.broker import context_of
from taskiq_fanin.domain.config import DEFAULT_OUTCOME_STREAM_MAX as STREAM_MAX
from taskiq_fanin.domain.results import GroupState
from taskiq_fanin.inspection import group_status
from taskiq_fanin.storage.group_scripts import GroupScripts
from taskiq_fanin.storage.keys import GroupKeys
from taskiq_fanin.storage.records import GroupMeta
from taskiq_fanin.storage.replies import GivenUp, Outcome, Recorded
from taskiq_fanin.sweep import giving_up
from taskiq_fanin.sweeping import FindingKind, SweepAction
from taskiq_fanin.transport.pipeline import PipelineBatcher
from tests.fake_brokers import MEMBER, MembersGoNowhere
from tests.harness import eventually

OPTIONS: dict[str, str | int] = {
    "then": '{"t":"then"}', "on_error": "", "policy": "continue",
    "sweep": "give_up", "span": 60_000, "ttl": 3_600_000, "cancellable": 0,
    "depth": 1,
}  # fmt: skip


class Group:
    """One group of ``total`` members, driven through the scripts."""

    def __init__(self, client: Redis, key_prefix: str) -> None:
        self.client = client
        self.scripts = GroupScripts(client, PipelineBatcher(client))
        self.keys = GroupKeys(key_prefix, "g")

    async def plan(
        self, total: int, *, sealed: bool = True, inline_max: int = 0
    ) -> None:
        options = {**OPTIONS, "inline_max": inline_max} if inline_max else OPTIONS
        await self.scripts.create_group(
            self.keys, token="tok", options=options,
            members=[f'{{"t":"m","a":[{i}]}}' for i in range(total)],
            planner_lease_ms=60_000, claimant="planner", sealed=sealed,
        )  # fmt: skip

    async def record(self, index: int, outcome: Outcome = Outcome.DONE) -> Recorded:
        code, _, _ = await self.scripts.record_outcome(
            self.keys, token="tok", index=index, outcome=outcome, payload="",
            lease_ms=60_000, claimant="w", delivery=f"d{index}", stream_max=STREAM_MAX,
        )  # fmt: skip
        return code

    async def give_up(self, start: int, stop: int, who: str = "sweep") -> GivenUp:
        return await self.scripts.give_up(
            self.keys, token="tok", lease_ms=60_000, claimant=who,
            start=start, stop=stop,
        )  # fmt: skip

    async def field(self, name: str) -> str | None:
        value = await self.client.hget(self.keys.meta, name)
        return value.decode() if value is not None else None

    async def lost(self) -> set[int]:
        return {int(m) for m in await self.client.smembers(self.keys.lost)}


async def test_a_give_up_goes_over_the_ledger_a_window_a_call_and_claims_at_its_end(
    client: Redis, key_prefix: str
) -> None:
    group = Group(client, key_prefix)
    await group.plan(25)
    for index in range(5):
        await group.record(index)
    await group.record(20, Outcome.FAILED)

    first = await group.give_up(0, 10)
    state, sealed = await group.field("state"), await group.field("sealed")
    lost_after_first = await group.lost()
    claim_after_first = await client.exists(group.keys.claim)
    second = await group.give_up(10, 20)
    last = await group.give_up(20, 30)
    collected = await group.scripts.collect_outcomes(group.keys, token="tok")

    assert (first.applied, first.lost, first.next, first.claimed) == (
        True,
        5,
        10,
        False,
    )
    assert (state, sealed, claim_after_first) == ("giving_up", "1", 0)
    assert lost_after_first == set(range(5, 10))
    assert (second.lost, second.next, second.claimed) == (15, 20, False)
    assert (last.lost, last.next, last.claimed) == (19, -1, True)
    expected = set(range(5, 20)) | set(range(21, 25))
    assert await group.lost() == expected
    assert (await group.field("state"), await group.field("lost_count")) == (
        "claimed",
        "19",
    )
    assert await group.field("lost_next") is None
    assert await client.get(group.keys.claim) == b"sweep"
    # Every key has a ttl: the lost set lives as the group does.
    assert 0 < await client.pttl(group.keys.lost) <= 3_600_000
    assert collected is not None
    assert (collected.lost, collected.lost_count) == (sorted(expected), 19)
    assert (collected.done, collected.failed) == ([0, 1, 2, 3, 4], [20])


async def test_a_member_ending_mid_scan_is_refused_and_counted_lost_once(
    client: Redis, key_prefix: str
) -> None:
    group = Group(client, key_prefix)
    await group.plan(6)
    await group.record(0)

    await group.give_up(0, 3)
    # One already gone over (1), one not yet (4): neither is recorded now.
    refused = [await group.record(1), await group.record(4, Outcome.FAILED)]
    cancelled = await group.scripts.cancel_group(group.keys, tombstone_ms=1_000)
    redriven = await group.scripts.redrive_group(
        group.keys, token="tok", max_redrives=5
    )
    last = await group.give_up(3, 6)
    late = await group.record(5)

    assert refused == [Recorded.FINALISED, Recorded.FINALISED]
    assert (cancelled, redriven.redriven) == (False, False)
    assert (last.claimed, last.lost) == (True, 5)
    assert late is Recorded.FINALISED
    done = {int(m) for m in await client.smembers(group.keys.done)}
    failed = await client.smembers(group.keys.failed)
    assert (done, failed, await group.lost()) == ({0}, set(), {1, 2, 3, 4, 5})
    assert (await group.field("done_count"), await group.field("lost_count")) == (
        "1",
        "5",
    )


async def test_a_second_sweep_racing_the_first_changes_nothing(
    client: Redis, key_prefix: str
) -> None:
    group = Group(client, key_prefix)
    await group.plan(30)

    replies = [
        await group.give_up(0, 10, "a"),
        await group.give_up(0, 10, "b"),  # began already: the pass is at 10
        await group.give_up(20, 30, "b"),  # ahead of the pass
        await group.give_up(10, 20, "a"),
        await group.give_up(10, 20, "b"),  # behind it
        await group.give_up(20, 30, "a"),
        await group.give_up(20, 30, "b"),  # claimed: nothing left to do
    ]

    assert [(r.applied, r.next) for r in replies] == [
        (True, 10),
        (False, 10),
        (False, 10),
        (True, 20),
        (False, 20),
        (True, -1),
        (False, -1),
    ]
    assert [r.claimed for r in replies].count(True) == 1
    assert await client.get(group.keys.claim) == b"a"
    assert (await group.lost(), await group.field("lost_count")) == (
        set(range(30)),
        "30",
    )


async def test_a_give_up_seals_a_ledger_its_planner_is_still_writing(
    client: Redis, key_prefix: str
) -> None:
    group = Group(client, key_prefix)
    await group.plan(3, sealed=False)  # the planner's first chunk; more to come
    await group.record(1)

    first = await group.give_up(0, 2)
    written, total = await group.scripts.append_ledger(
        group.keys, token="tok", first=3, members=["m3", "m4"], seal=True
    )
    last = await group.give_up(2, 4)

    assert (first.applied, await group.field("sealed")) == (True, "1")
    assert (written, total) == (False, 3)  # the planner's next chunk is refused
    assert await client.hlen(group.keys.plan) == 3
    assert (last.claimed, last.lost, await group.lost()) == (True, 2, {0, 2})


async def test_an_empty_window_of_an_unsealed_empty_ledger_claims_at_once(
    client: Redis, key_prefix: str
) -> None:
    group = Group(client, key_prefix)
    await group.plan(0, sealed=False)

    given = await group.give_up(0, 1_000)

    assert (given.claimed, given.lost) == (True, 0)
    assert await client.exists(group.keys.lost) == 0


async def test_the_lost_set_goes_with_the_group_when_it_completes(
    client: Redis, key_prefix: str
) -> None:
    inline, wide = Group(client, key_prefix), Group(client, f"{key_prefix}-w")
    await inline.plan(3)
    await wide.plan(3, inline_max=2)  # its continuation reads by reference
    for one in (inline, wide):
        await one.give_up(0, 10)
        collected = await one.scripts.collect_outcomes(one.keys, token="tok")
        assert collected is not None
        assert collected.lost == ([] if one is wide else [0, 1, 2])
        await one.scripts.mark_dispatched(
            one.keys, token="tok", dispatched="then", tombstone_ms=5_000,
            claimant="sweep",
        )  # fmt: skip
        await one.scripts.mark_completed(one.keys, token="tok", tombstone_ms=5_000)

    assert await client.exists(inline.keys.lost) == 0
    # By reference: kept as long as the tombstone, for a chain's next step.
    assert 0 < await client.pttl(wide.keys.lost) <= 5_000
    assert await wide.lost() == {0, 1, 2}


@pytest.mark.parametrize("inline_max", [5_000, 500], ids=["inline", "by reference"])
async def test_the_sweep_gives_a_wide_group_up_over_visits_then_continues_once(
    fake_redis: FakeRedis, monkeypatch: pytest.MonkeyPatch, inline_max: int
) -> None:
    monkeypatch.setattr(giving_up, "GIVE_UP_WINDOW", 100)  # 1,000 indexes a visit
    fanin = FanInMiddleware(fake_redis, prefix="gu")
    broker = MembersGoNowhere().with_middlewares(fanin)
    results: list[tuple[GroupResult, list[int]]] = []

    @broker.task(task_name=MEMBER)
    async def member(index: int) -> int:
        return index

    @broker.task
    async def then(result: GroupResult) -> None:
        results.append((result, [index async for index in result.iter_lost()]))

    size, ran = 2_500, range(0, 2_500, 100)
    await broker.startup()
    try:
        handle = await group(
            [Signature.of(member, i) for i in range(size)],
            then=then,
            group_id="wide",
            deadline=0.05,
            sweep_policy="give_up",
            results_inline_max=inline_max,
        ).kiq(broker)
        ctx = context_of(broker)
        keys = GroupKeys("gu", "wide")
        token = (await fake_redis.hget(keys.meta, "token")).decode()

        async def record(index: int) -> Recorded:
            code, _, _ = await ctx.scripts.record_outcome(
                keys, token=token, index=index, outcome=Outcome.DONE,
                payload=str(index), lease_ms=60_000, claimant="w", delivery="d",
                stream_max=STREAM_MAX,
            )  # fmt: skip
            return code

        for index in ran:  # a few members did run
            assert await record(index) is Recorded.RECORDED

        async def overdue() -> bool:
            return (await group_status(fanin, "wide")).overdue()

        await eventually(overdue, what="the group's deadline")
        first = await sweep(fanin)
        mid = await handle.status()
        late = await record(1_550)  # a member ending mid-pass
        rest = [await sweep(fanin), await sweep(fanin)]
        await broker.wait_all()
        after = await sweep(fanin)
        status = await handle.status()
    finally:
        await broker.shutdown()

    findings = [report.findings[0] for report in (first, *rest)]
    assert [(f.action, f.applied) for f in findings] == [
        (SweepAction.GIVE_UP, True)
    ] * 3
    assert [f.note for f in findings] == [
        "giving up: 1000 of 2500 ledger indexes gone over, 990 lost so far; "
        "the next visit goes on",
        "giving up: 2000 of 2500 ledger indexes gone over, 1980 lost so far; "
        "the next visit goes on",
        "",
    ]
    assert (mid.state, mid.lost, mid.pending) == (GroupState.GIVING_UP, 990, 1_485)
    assert late is Recorded.FINALISED
    lost = sorted(set(range(size)) - set(ran))
    ((result, read),) = results  # the continuation ran once
    assert result.by_reference is (inline_max < size)
    assert (result.done_count, result.lost_count, read) == (25, 2_475, lost)
    assert result.lost == ([] if result.by_reference else lost)
    assert (status.state, status.lost, status.pending) == (
        GroupState.COMPLETED,
        2_475,
        0,
    )
    assert after.findings == [] or after.findings[0].kind is FindingKind.GONE


async def test_a_sweep_visit_that_read_the_group_before_another_went_on_changes_nothing(
    fake_redis: FakeRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two sweeps (the lock lost or run out) each read the group, then act."""
    monkeypatch.setattr(giving_up, "GIVE_UP_WINDOW", 100)  # 1,000 indexes a visit
    fanin = FanInMiddleware(fake_redis, prefix="race")
    broker = MembersGoNowhere().with_middlewares(fanin)
    kicked: list[GroupResult] = []

    @broker.task(task_name=MEMBER)
    async def member(index: int) -> int:
        return index

    @broker.task
    async def then(result: GroupResult) -> None:
        kicked.append(result)

    await broker.startup()
    try:
        await group(
            [Signature.of(member, i) for i in range(1_500)], then=then, group_id="g"
        ).kiq(broker)
        ctx = context_of(broker)
        keys = GroupKeys("race", "g")

        async def read() -> GroupMeta:
            inspected = await ctx.scripts.inspect_group(keys)
            assert inspected is not None
            return inspected.meta

        both_read = await read()
        a = await giving_up.give_up(ctx, "g", both_read, claimant="a")
        b = await giving_up.give_up(ctx, "g", both_read, claimant="b")
        b_again = await giving_up.give_up(ctx, "g", await read(), claimant="b")
        a_late = await giving_up.give_up(ctx, "g", both_read, claimant="a")
        await broker.wait_all()
        status = await group_status(fanin, "g")
    finally:
        await broker.shutdown()

    assert (a.applied, a.finalised, a.next, a.lost) == (True, False, 1_000, 1_000)
    assert (b.applied, b.raced, b.note(1_500)) == (
        False,
        True,
        "another sweep is giving it up",
    )
    assert (b_again.applied, b_again.finalised, b_again.lost) == (True, True, 1_500)
    assert (a_late.applied, a_late.note(1_500)) == (False, "no longer open")
    assert len(kicked) == 1  # one continuation, by the one claim
    assert (status.lost, status.pending) == (1_500, 0)
