"""When a member's outcome waits for others of its group, and when it goes at once.

A call waits only for members that run in this worker and can still join it. A
worker whose only slot the call holds (or whose slots all wait in the call) must
never sit out the gathering time: here that time is a minute, so a test that
finishes within its deadline shows the call did not wait for nothing.
"""

import asyncio
from typing import Any

import pytest
from redis.asyncio import Redis
from taskiq import NoResultError, TaskiqMessage, TaskiqResult

from taskiq_fanin import FanInMiddleware
from taskiq_fanin.domain.labels import MEMBER_LABEL
from taskiq_fanin.models import OutcomeBatching
from taskiq_fanin.storage.group_scripts import GroupScripts
from taskiq_fanin.storage.keys import GroupKeys
from taskiq_fanin.storage.replies import Recorded
from taskiq_fanin.transport.outcome_batching import (
    OutcomeBatcher,
    OutcomeStats,
    group_call_key,
)
from taskiq_fanin.transport.pipeline import Command, PipelineBatcher
from tests.script_calls import TOKEN, create

#: A gathering time long enough that a call which waits for nothing fails its
#: test's deadline; and however slow the machine, a last call counts as recent.
TUNING = OutcomeBatching(gather_seconds=60.0, recent_seconds=3600.0)
#: The deadline of a call that must not wait.
DEADLINE = 5.0


@pytest.fixture
def keys(key_prefix: str) -> GroupKeys:
    return GroupKeys(key_prefix, "g1")


@pytest.fixture
async def batcher(fake_redis: Redis, keys: GroupKeys) -> OutcomeBatcher:
    """A batcher on a group of 20 with one call behind it: the group is busy."""
    pipeline = PipelineBatcher(fake_redis)
    scripts = GroupScripts(fake_redis, pipeline, batching=TUNING)
    await create(scripts, keys, total=20)
    # 19 members left, a moment ago: the next calls are worth holding.
    assert await record(scripts.outcomes, keys, 0) is Recorded.RECORDED
    return scripts.outcomes


def member(keys: GroupKeys, index: int) -> TaskiqMessage:
    """The message of member ``index`` of the group."""
    return TaskiqMessage(
        task_id=f"{keys.group_id}~{index}",
        task_name="member",
        labels={MEMBER_LABEL: f"{keys.group_id}/{index}/{TOKEN}"},
        args=[],
        kwargs={},
    )


async def record(batcher: OutcomeBatcher, keys: GroupKeys, index: int) -> Recorded:
    code, _, _ = await batcher.record(
        keys.recording, TOKEN, (30_000, "test", 0), (index, "done", "", f"d{index}")
    )
    return Recorded(code)


def started(batcher: OutcomeBatcher, keys: GroupKeys, *indexes: int) -> list[int]:
    """Members start running here (as the worker says); their indexes, to end them."""
    for index in indexes:
        batcher.member_running(group_call_key(keys.recording, TOKEN), index)
    return list(indexes)


def gone(batcher: OutcomeBatcher, keys: GroupKeys, index: int) -> None:
    """Member ``index`` is done here (as the worker says), recorded or not."""
    batcher.member_gone(group_call_key(keys.recording, TOKEN), index)


def ran_at_once(batcher: OutcomeBatcher, keys: GroupKeys, count: int) -> None:
    """As if the worker had once run ``count`` members at a time: it has the slots."""
    for index in started(batcher, keys, *range(100, 100 + count)):
        gone(batcher, keys, index)


def sent_since(batcher: OutcomeBatcher, before: OutcomeStats) -> tuple[int, int]:
    """Script calls sent since ``before``, and the members they carried."""
    now = batcher.stats
    return now.calls - before.calls, now.members - before.members


def snapshot(batcher: OutcomeBatcher) -> OutcomeStats:
    return OutcomeStats(batcher.stats.calls, batcher.stats.members)


async def turns(count: int) -> None:
    """Let the event loop run ``count`` times (no time passes)."""
    for _ in range(count):
        await asyncio.sleep(0)


async def test_the_only_member_running_here_never_waits(
    batcher: OutcomeBatcher, keys: GroupKeys
) -> None:
    # One slot: while this member's call is open, nothing else can start.
    started(batcher, keys, 1)
    recorded = await asyncio.wait_for(record(batcher, keys, 1), DEADLINE)
    assert recorded is Recorded.RECORDED


async def one_waiting_for_two(
    batcher: OutcomeBatcher, keys: GroupKeys
) -> tuple["asyncio.Task[Recorded]", int]:
    """Member 1 recording while member 2 still runs here: its call waits.

    Returns the recording, and member 2's index.
    """
    _, second = started(batcher, keys, 1, 2)
    first = asyncio.create_task(record(batcher, keys, 1))
    await turns(50)
    assert not first.done()  # member 2 runs here and may join
    return first, second


async def test_a_call_waits_for_the_members_still_running_here(
    batcher: OutcomeBatcher, keys: GroupKeys
) -> None:
    before = snapshot(batcher)
    first, _ = await one_waiting_for_two(batcher, keys)
    second = asyncio.create_task(record(batcher, keys, 2))
    recorded = await asyncio.wait_for(asyncio.gather(first, second), DEADLINE)
    assert recorded == [Recorded.RECORDED, Recorded.RECORDED]
    assert sent_since(batcher, before) == (1, 2)  # both in one call


async def test_a_member_that_ends_unrecorded_is_not_waited_for(
    batcher: OutcomeBatcher, keys: GroupKeys
) -> None:
    before = snapshot(batcher)
    first, second = await one_waiting_for_two(batcher, keys)
    # Member 2 was skipped, or failed and will be retried: nothing to record.
    gone(batcher, keys, second)
    assert await asyncio.wait_for(first, DEADLINE) is Recorded.RECORDED
    assert sent_since(batcher, before) == (1, 1)


async def test_an_outcome_of_a_member_not_started_here_does_not_end_the_wait(
    batcher: OutcomeBatcher, keys: GroupKeys
) -> None:
    before = snapshot(batcher)
    started(batcher, keys, 1, 2)
    first = asyncio.create_task(record(batcher, keys, 1))
    # A chain that is member 11 recorded by its last step: no start was seen.
    chained = asyncio.create_task(record(batcher, keys, 11))
    await turns(50)
    assert not first.done()  # member 2 still runs here and will join
    second = asyncio.create_task(record(batcher, keys, 2))
    recorded = await asyncio.wait_for(asyncio.gather(first, chained, second), DEADLINE)
    assert recorded == [Recorded.RECORDED] * 3
    assert sent_since(batcher, before) == (1, 3)


async def three_with_slots_to_spare(
    batcher: OutcomeBatcher, keys: GroupKeys
) -> list["asyncio.Task[Recorded]"]:
    """Members 1 to 3 recording in a worker that once ran 10 members at a time.

    Member 3 starts while the call is open: the worker has slots to spare.
    """
    ran_at_once(batcher, keys, 10)
    started(batcher, keys, 1, 2)
    recording = [asyncio.create_task(record(batcher, keys, 1))]
    await turns(1)
    started(batcher, keys, 3)
    recording += [asyncio.create_task(record(batcher, keys, i)) for i in (2, 3)]
    return recording


async def test_a_call_goes_once_no_other_member_starts(
    batcher: OutcomeBatcher, keys: GroupKeys
) -> None:
    before = snapshot(batcher)
    recording = await three_with_slots_to_spare(batcher, keys)
    # Everyone here has joined and, though there are slots to spare, no member
    # starts: it goes, not in a minute.
    recorded = await asyncio.wait_for(asyncio.gather(*recording), DEADLINE)
    assert recorded == [Recorded.RECORDED] * 3
    assert sent_since(batcher, before) == (1, 3)


async def test_a_member_starting_while_the_call_settles_is_waited_for(
    batcher: OutcomeBatcher, keys: GroupKeys
) -> None:
    before = snapshot(batcher)
    recording = await three_with_slots_to_spare(batcher, keys)
    await turns(1)  # all three joined: the call counts turns for another start
    started(batcher, keys, 4)
    await turns(50)
    assert not recording[0].done()  # member 4 runs here and will join
    recording.append(asyncio.create_task(record(batcher, keys, 4)))
    recorded = await asyncio.wait_for(asyncio.gather(*recording), DEADLINE)
    assert recorded == [Recorded.RECORDED] * 4
    assert sent_since(batcher, before) == (1, 4)


async def test_the_middleware_says_which_members_run_here(
    fake_redis: Redis, key_prefix: str, keys: GroupKeys
) -> None:
    # Every completion looks for members whose task ended unreported.
    tuning = OutcomeBatching(
        gather_seconds=60.0, recent_seconds=3600.0, orphan_check_every=1
    )
    fanin = FanInMiddleware(fake_redis, prefix=key_prefix, outcome_batching=tuning)
    await fanin.startup()
    await create(fanin.context.scripts, keys, total=20)
    done = TaskiqResult(is_err=False, return_value=None, execution_time=0.0)
    retried = TaskiqResult(
        is_err=True, return_value=None, execution_time=0.0, error=NoResultError()
    )
    first = member(keys, 0)  # its call makes the group a busy one
    await fanin.pre_execute(first)
    await fanin.post_execute(first, done)
    one, two = member(keys, 1), member(keys, 2)
    await fanin.pre_execute(one)
    await fanin.pre_execute(two)
    recording = asyncio.create_task(fanin.post_execute(one, done))
    await turns(50)
    assert not recording.done()  # member 2 runs here and may join
    # Member 2's attempt ends with a retry to come: nothing more to wait for.
    await fanin.post_execute(two, retried)
    await asyncio.wait_for(recording, DEADLINE)
    assert await fake_redis.smembers(keys.done) == {b"0", b"1"}

    # taskiq skips post_execute when something before it fails: once the task
    # that ran the member is over, the next look ends it.
    three, four = member(keys, 3), member(keys, 4)
    await fanin.pre_execute(three)
    await asyncio.create_task(fanin.pre_execute(four))
    await asyncio.wait_for(fanin.post_execute(three, done), DEADLINE)
    assert await fake_redis.smembers(keys.done) == {b"0", b"1", b"3"}
    assert fanin.context.outcomes.running == 0  # nothing left behind


async def test_as_many_members_here_as_ever_ran_at_once_go_without_settling(
    batcher: OutcomeBatcher, keys: GroupKeys
) -> None:
    before = snapshot(batcher)
    running = started(batcher, keys, 1, 2)
    first = asyncio.create_task(record(batcher, keys, 1))
    await turns(1)
    running += started(batcher, keys, 3)  # slots to spare: three at once, the most
    later = [asyncio.create_task(record(batcher, keys, index)) for index in (2, 3)]
    await turns(1)  # all three joined: every slot seen so far is in the call
    # A member starting now (a slot the worker had not shown) is not waited for.
    started(batcher, keys, 4)
    recorded = await asyncio.wait_for(asyncio.gather(first, *later), DEADLINE)
    assert recorded == [Recorded.RECORDED] * 3
    assert sent_since(batcher, before) == (1, 3)
    for index in running:
        gone(batcher, keys, index)
    assert await asyncio.wait_for(record(batcher, keys, 4), DEADLINE) is (
        Recorded.RECORDED
    )
    assert sent_since(batcher, before) == (2, 4)


async def test_a_call_holding_every_member_without_an_outcome_goes_at_once(
    batcher: OutcomeBatcher, keys: GroupKeys
) -> None:
    before = snapshot(batcher)
    # Member 0 (recorded already) is delivered again and runs here: it can add
    # nothing, so the call holding the 19 others does not wait for it.
    started(batcher, keys, 0, *range(1, 20))
    recording = [asyncio.create_task(record(batcher, keys, i)) for i in range(1, 20)]
    recorded = await asyncio.wait_for(asyncio.gather(*recording), DEADLINE)
    assert recorded == [Recorded.RECORDED] * 18 + [Recorded.CLAIMED]
    assert sent_since(batcher, before) == (1, 19)


async def test_the_member_that_claims_hears_first(
    batcher: OutcomeBatcher, keys: GroupKeys
) -> None:
    # It has a continuation to kick: the others' resumptions go after it, one
    # a loop turn, so that the loop serves the kick's I/O between them.
    heard: list[tuple[int, Recorded]] = []
    heard_by_its_second_turn: list[int] = []

    async def recording(index: int) -> None:
        heard.append((index, code := await record(batcher, keys, index)))
        if code is Recorded.CLAIMED:
            await turns(2)
            heard_by_its_second_turn.append(len(heard))

    started(batcher, keys, *range(1, 20))
    await asyncio.wait_for(
        asyncio.gather(*(recording(i) for i in range(1, 20))), DEADLINE
    )
    assert heard[0] == (19, Recorded.CLAIMED)
    assert [index for index, _ in heard[1:]] == list(range(1, 19))
    assert heard_by_its_second_turn[0] <= 4  # not all 19


async def test_callers_cancelled_mid_trickle_leave_no_other_unheard(
    batcher: OutcomeBatcher, keys: GroupKeys
) -> None:
    """The claimant hears first, the others a loop turn apart: callers cancelled
    meanwhile (a worker stopping its tasks) are passed over, every other one
    still hears its code, and none is left waiting."""
    started(batcher, keys, *range(1, 20))
    recording = {i: asyncio.create_task(record(batcher, keys, i)) for i in range(1, 20)}
    await asyncio.wait_for(recording[19], DEADLINE)  # the claimant: first
    assert recording[19].result() is Recorded.CLAIMED
    unheard = [i for i, task in recording.items() if not task.done()]
    assert unheard  # the trickle is under way
    for index in unheard[::2]:
        recording[index].cancel()
    heard = await asyncio.wait_for(
        asyncio.gather(*recording.values(), return_exceptions=True), DEADLINE
    )
    for index, code in zip(recording, heard, strict=True):
        if index in unheard[::2]:
            assert isinstance(code, asyncio.CancelledError)
        elif index != 19:
            assert code is Recorded.RECORDED, index


class HeldReplies(PipelineBatcher):
    """A pipeline whose callers hear their replies only once ``passing`` is set."""

    def __init__(self, client: Redis) -> None:
        super().__init__(client)
        self.passing = asyncio.Event()
        self.passing.set()

    async def __call__(self, command: Command, *, written: Any = None) -> Any:
        sent = asyncio.ensure_future(super().__call__(command, written=written))
        await self.passing.wait()
        return await sent


async def test_a_waiting_call_goes_once_the_call_before_it_says_it_holds_the_rest(
    fake_redis: Redis, keys: GroupKeys
) -> None:
    pipeline = HeldReplies(fake_redis)
    scripts = GroupScripts(fake_redis, pipeline, batching=TUNING)
    await create(scripts, keys, total=20)
    batcher = scripts.outcomes
    assert await record(batcher, keys, 0) is Recorded.RECORDED  # 19 left: busy
    # Members 1 to 9 run here, alone: their call goes at once, and its reply
    # is held back.
    pipeline.passing.clear()
    started(batcher, keys, *range(1, 10))
    first = [asyncio.create_task(record(batcher, keys, i)) for i in range(1, 10)]
    await eventually_sent(batcher, 2)
    # The other 10 start (member 0 delivered again beside them) and record:
    # their call waits, for member 0 among others.
    started(batcher, keys, 0, *range(10, 20))
    rest = [asyncio.create_task(record(batcher, keys, i)) for i in range(10, 20)]
    await turns(50)
    assert not any(task.done() for task in rest)
    # The first call's reply says 10 are left: the waiting call holds them all.
    pipeline.passing.set()
    recorded = await asyncio.wait_for(asyncio.gather(*first, *rest), DEADLINE)
    assert recorded == [Recorded.RECORDED] * 18 + [Recorded.CLAIMED]
    assert batcher.stats == OutcomeStats(calls=3, members=20)


async def eventually_sent(batcher: OutcomeBatcher, calls: int) -> None:
    """Wait (a few loop turns) until ``calls`` script calls have gone."""
    for _ in range(1000):
        if batcher.stats.calls >= calls:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{calls} calls never went")
