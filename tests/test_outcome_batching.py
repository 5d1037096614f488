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

from taskiq_fanin import FanInMiddleware, outcome_batching, running
from taskiq_fanin.batching import PipelineBatcher
from taskiq_fanin.keys import GroupKeys
from taskiq_fanin.labels import MEMBER_LABEL
from taskiq_fanin.outcome_batching import OutcomeBatcher
from taskiq_fanin.scripts import Recorded, Scripts, read_script
from tests.test_scripts import NOW, TOKEN, create

#: Long enough that a call which waits for nothing fails its test's deadline.
GATHER_SECONDS = 60.0
#: The deadline of a call that must not wait.
DEADLINE = 5.0


@pytest.fixture
async def batcher(
    fake_redis: Redis, keys: GroupKeys, monkeypatch: pytest.MonkeyPatch
) -> OutcomeBatcher:
    """A batcher on a group of 20 with one call behind it: the group is busy."""
    # However slow the machine, that call counts as recent.
    monkeypatch.setattr(outcome_batching, "OUTCOME_RECENT_SECONDS", 3600.0)
    await create(Scripts(fake_redis), keys, total=20)
    script = fake_redis.register_script(read_script("recordOutcome-7.lua"))
    batcher = OutcomeBatcher(
        PipelineBatcher(fake_redis), script, gather_seconds=GATHER_SECONDS
    )
    # 19 members left, a moment ago: the next calls are worth holding.
    assert await record(batcher, keys, 0) is Recorded.RECORDED
    return batcher


@pytest.fixture
def keys(key_prefix: str) -> GroupKeys:
    return GroupKeys(key_prefix, "g1")


@pytest.fixture
def script_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Members per recordOutcome call, as the calls go."""
    calls: list[int] = []
    arguments = OutcomeBatcher._arguments

    def counting(call: Any) -> list[Any]:
        calls.append(len(call.members))
        return arguments(call)

    monkeypatch.setattr(OutcomeBatcher, "_arguments", staticmethod(counting))
    return calls


async def record(batcher: OutcomeBatcher, keys: GroupKeys, index: int) -> Recorded:
    code, _ = await batcher(keys.all, TOKEN, (NOW, 30_000, "test"), (index, "done", ""))
    return Recorded(code)


def started(batcher: OutcomeBatcher, keys: GroupKeys, *indexes: int) -> None:
    for index in indexes:
        batcher.started(keys.all, TOKEN, index)


def ran_at_once(batcher: OutcomeBatcher, keys: GroupKeys, count: int) -> None:
    """As if the worker had once run ``count`` members at a time: it has the slots."""
    started(batcher, keys, *range(100, 100 + count))
    for index in range(100, 100 + count):
        batcher.ended(keys.all, TOKEN, index)


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
) -> "asyncio.Task[Recorded]":
    """Member 1 recording while member 2 still runs here: its call waits."""
    started(batcher, keys, 1, 2)
    first = asyncio.create_task(record(batcher, keys, 1))
    await turns(50)
    assert not first.done()  # member 2 runs here and may join
    return first


async def test_a_call_waits_for_the_members_still_running_here(
    batcher: OutcomeBatcher, keys: GroupKeys, script_calls: list[int]
) -> None:
    first = await one_waiting_for_two(batcher, keys)
    second = asyncio.create_task(record(batcher, keys, 2))
    recorded = await asyncio.wait_for(asyncio.gather(first, second), DEADLINE)
    assert recorded == [Recorded.RECORDED, Recorded.RECORDED]
    assert script_calls == [2]  # both in one call


async def test_a_member_that_ends_unrecorded_is_not_waited_for(
    batcher: OutcomeBatcher, keys: GroupKeys, script_calls: list[int]
) -> None:
    first = await one_waiting_for_two(batcher, keys)
    # Member 2 was skipped, or failed and will be retried: nothing to record.
    batcher.ended(keys.all, TOKEN, 2)
    assert await asyncio.wait_for(first, DEADLINE) is Recorded.RECORDED
    assert script_calls == [1]


async def test_an_outcome_of_a_member_not_started_here_does_not_end_the_wait(
    batcher: OutcomeBatcher, keys: GroupKeys, script_calls: list[int]
) -> None:
    started(batcher, keys, 1, 2)
    first = asyncio.create_task(record(batcher, keys, 1))
    # A chain that is member 11 recorded by its last step: no start was seen.
    chained = asyncio.create_task(record(batcher, keys, 11))
    await turns(50)
    assert not first.done()  # member 2 still runs here and will join
    second = asyncio.create_task(record(batcher, keys, 2))
    recorded = await asyncio.wait_for(asyncio.gather(first, chained, second), DEADLINE)
    assert recorded == [Recorded.RECORDED] * 3
    assert script_calls == [3]


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
    batcher: OutcomeBatcher, keys: GroupKeys, script_calls: list[int]
) -> None:
    recording = await three_with_slots_to_spare(batcher, keys)
    # Everyone here has joined and, though there are slots to spare, no member
    # starts: it goes, not in a minute.
    recorded = await asyncio.wait_for(asyncio.gather(*recording), DEADLINE)
    assert recorded == [Recorded.RECORDED] * 3
    assert script_calls == [3]


async def test_a_member_starting_while_the_call_settles_is_waited_for(
    batcher: OutcomeBatcher, keys: GroupKeys, script_calls: list[int]
) -> None:
    recording = await three_with_slots_to_spare(batcher, keys)
    await turns(1)  # all three joined: the call counts turns for another start
    started(batcher, keys, 4)
    await turns(50)
    assert not recording[0].done()  # member 4 runs here and will join
    recording.append(asyncio.create_task(record(batcher, keys, 4)))
    recorded = await asyncio.wait_for(asyncio.gather(*recording), DEADLINE)
    assert recorded == [Recorded.RECORDED] * 4
    assert script_calls == [4]


async def test_the_middleware_says_which_members_run_here(
    fake_redis: Redis,
    key_prefix: str,
    keys: GroupKeys,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(outcome_batching, "OUTCOME_GATHER_SECONDS", GATHER_SECONDS)
    monkeypatch.setattr(outcome_batching, "OUTCOME_RECENT_SECONDS", 3600.0)
    fanin = FanInMiddleware(fake_redis, prefix=key_prefix)
    await fanin.startup()
    await create(fanin.scripts, keys, total=20)

    def member(index: int) -> TaskiqMessage:
        return TaskiqMessage(
            task_id=f"{keys.group_id}.{index}",
            task_name="member",
            labels={MEMBER_LABEL: f"{keys.group_id}/{index}/{TOKEN}"},
            args=[],
            kwargs={},
        )

    done = TaskiqResult(is_err=False, return_value=None, execution_time=0.0)
    retried = TaskiqResult(
        is_err=True, return_value=None, execution_time=0.0, error=NoResultError()
    )
    first = member(0)  # its call makes the group a busy one
    await fanin.pre_execute(first)
    await fanin.post_execute(first, done)
    one, two = member(1), member(2)
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
    monkeypatch.setattr(running, "CHECK_EVERY", 1)
    three, four = member(3), member(4)
    await fanin.pre_execute(three)
    await asyncio.create_task(fanin.pre_execute(four))
    await asyncio.wait_for(fanin.post_execute(three, done), DEADLINE)
    assert await fake_redis.smembers(keys.done) == {b"0", b"1", b"3"}
    assert not fanin._running._runs  # nothing left behind


async def test_as_many_members_here_as_ever_ran_at_once_go_without_settling(
    batcher: OutcomeBatcher, keys: GroupKeys, script_calls: list[int]
) -> None:
    started(batcher, keys, 1, 2)
    first = asyncio.create_task(record(batcher, keys, 1))
    await turns(1)
    started(batcher, keys, 3)  # slots to spare, and three at once: the most yet
    later = [asyncio.create_task(record(batcher, keys, index)) for index in (2, 3)]
    await turns(1)  # all three joined: every slot seen so far is in the call
    # A member starting now (a slot the worker had not shown) is not waited for.
    started(batcher, keys, 4)
    recorded = await asyncio.wait_for(asyncio.gather(first, *later), DEADLINE)
    assert recorded == [Recorded.RECORDED] * 3
    for index in (1, 2, 3):
        batcher.ended(keys.all, TOKEN, index)
    assert await asyncio.wait_for(record(batcher, keys, 4), DEADLINE) is (
        Recorded.RECORDED
    )
    assert script_calls == [3, 1]
