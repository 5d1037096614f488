"""A body that raises taskiq's own ``NoResultError`` ran and stores no result:
its member, chain step or continuation counts as succeeded with ``None``. Only an
attempt a retry middleware repeats (it puts a fresh ``NoResultError`` in the
result) waits for the next, on a real redis-server and real workers.
"""

from collections.abc import Callable
from typing import Annotated

import pytest
from taskiq import (
    Context,
    NoResultError,
    SimpleRetryMiddleware,
    SmartRetryMiddleware,
    TaskiqDepends,
    TaskiqMiddleware,
)
from taskiq_redis import RedisStreamBroker

from taskiq_fanin import FanInMiddleware, GroupResult, Signature, chain, group
from taskiq_fanin.models import ChainState
from tests.harness import SentMessages, drained, eventually, stream_broker, worker

#: How many attempts a retried task gets in these tests.
ATTEMPTS = 3


def _simple() -> TaskiqMiddleware:
    return SimpleRetryMiddleware(default_retry_count=ATTEMPTS)


def _smart() -> TaskiqMiddleware:
    return SmartRetryMiddleware(
        default_retry_count=ATTEMPTS,
        default_delay=0,
        use_jitter=False,
        use_delay_exponent=False,
    )


#: (retry middleware, whether it comes before FanInMiddleware): taskiq runs the
#: ``on_error`` hooks in reverse order, so ours runs before or after the retry's.
RETRIES: dict[str, tuple[Callable[[], TaskiqMiddleware] | None, bool]] = {
    "no-retry": (None, True),
    "simple-before": (_simple, True),
    "simple-after": (_simple, False),
    "smart-before": (_smart, True),
    "smart-after": (_smart, False),
}
WITH_RETRY = [name for name, (retry, _) in RETRIES.items() if retry is not None]


def _broker(
    redis_url: str, key_prefix: str, retries: str
) -> tuple[RedisStreamBroker, FanInMiddleware, SentMessages, bool]:
    """A broker with the retry middleware ``retries`` names, in its place."""
    make, before = RETRIES[retries]
    sent = SentMessages()
    retry = [make()] if make is not None else []
    broker, fanin = stream_broker(
        redis_url, key_prefix, sent, *(retry if before else [])
    )
    if not before:
        broker.with_middlewares(*retry)
    return broker, fanin, sent, make is not None


async def test_a_member_that_raises_no_result_error_counts_as_done_with_none(
    redis_url: str, key_prefix: str
) -> None:
    broker, _ = stream_broker(redis_url, key_prefix)
    results: list[GroupResult] = []

    @broker.task
    async def member(index: int) -> int:
        if index == 1:
            raise NoResultError
        return index

    @broker.task
    async def then(result: GroupResult) -> None:
        results.append(result)

    async with worker(broker, max_async_tasks=3) as receiver:
        handle = await group(
            [Signature.of(member, i) for i in range(3)], then=then
        ).kiq(broker)
        await eventually(lambda: len(results) == 1, what="the continuation")
        await eventually(
            lambda: _group_state_is(handle, "completed"), what="the group to complete"
        )
        status = await handle.status()
        await drained(broker, receiver)

    (result,) = results
    assert result.succeeded == [0, 1, 2]
    assert result.results == [0, None, 2]
    assert result.failed == {}
    assert (status.done, status.failed) == (3, 0)


async def test_a_chain_step_that_raises_no_result_error_passes_none_on(
    redis_url: str, key_prefix: str
) -> None:
    broker, _ = stream_broker(redis_url, key_prefix)
    received: list[object] = []

    @broker.task
    async def first() -> int:
        return 1

    @broker.task
    async def silent(previous: int) -> int:
        raise NoResultError

    @broker.task
    async def last(previous: object) -> str:
        received.append(previous)
        return "end"

    async with worker(broker, max_async_tasks=2) as receiver:
        handle = await chain(
            Signature.of(first), Signature.of(silent), Signature.of(last)
        ).kiq(broker)
        await eventually(
            lambda: _chain_state_is(handle, ChainState.DONE), what="the chain to end"
        )
        status = await handle.status()
        await drained(broker, receiver)

    assert received == [None]
    assert (status.step, status.steps) == (3, 3)


@pytest.mark.parametrize("retries", list(RETRIES))
async def test_no_result_error_on_the_first_attempt_counts_at_once_despite_retries(
    redis_url: str, key_prefix: str, retries: str
) -> None:
    broker, _, sent, _ = _broker(redis_url, key_prefix, retries)
    calls: list[int] = []
    seen: list[tuple[int, GroupResult]] = []

    @broker.task(retry_on_error=True, max_retries=ATTEMPTS)
    async def silent(index: int) -> int:
        calls.append(index)
        raise NoResultError

    @broker.task
    async def then(result: GroupResult) -> None:
        seen.append((len(calls), result))

    async with worker(broker, max_async_tasks=2) as receiver:
        handle = await group([Signature.of(silent, 0)], then=then).kiq(broker)
        await eventually(lambda: len(seen) == 1, what="the continuation")
        await eventually(
            lambda: _group_state_is(handle, "completed"), what="the group to complete"
        )
        status = await handle.status()
        await drained(broker, receiver)

    ((calls_then, result),) = seen
    assert calls == [0]  # nothing retried it: a retry is sent before ours records
    assert calls_then == 1
    assert len(sent.of_task(silent.task_name)) == 1
    assert (result.succeeded, result.results, result.failed) == ([0], [None], {})
    assert (status.done, status.failed) == (1, 0)


@pytest.mark.parametrize("retries", WITH_RETRY)
async def test_a_member_that_fails_then_succeeds_is_recorded_once_after_its_retry(
    redis_url: str, key_prefix: str, retries: str
) -> None:
    broker, _, sent, _ = _broker(redis_url, key_prefix, retries)
    calls: list[int] = []
    seen: list[tuple[int, GroupResult]] = []

    @broker.task(retry_on_error=True, max_retries=ATTEMPTS)
    async def flaky(index: int) -> int:
        calls.append(index)
        if len(calls) == 1:
            raise ValueError("attempt 1")
        return 7

    @broker.task
    async def then(result: GroupResult) -> None:
        seen.append((len(calls), result))

    async with worker(broker, max_async_tasks=2) as receiver:
        handle = await group([Signature.of(flaky, 0)], then=then).kiq(broker)
        await eventually(lambda: len(seen) == 1, what="the continuation")
        await eventually(
            lambda: _group_state_is(handle, "completed"), what="the group to complete"
        )
        await eventually(
            lambda: sent.executions_of(then.task_name) == 1, what="then to be done"
        )
        status = await handle.status()
        await drained(broker, receiver)

    ((calls_then, result),) = seen
    assert calls_then == 2  # the group waited for the second attempt
    assert calls == [0, 0]
    assert len(sent.of_task(flaky.task_name)) == 2
    assert (result.succeeded, result.results, result.failed) == ([0], [7], {})
    assert (status.done, status.failed) == (1, 0)


@pytest.mark.parametrize("retries", list(RETRIES))
async def test_a_member_that_fails_every_attempt_is_failed_after_the_last(
    redis_url: str, key_prefix: str, retries: str
) -> None:
    broker, _, _, retried = _broker(redis_url, key_prefix, retries)
    calls: list[int] = []
    seen: list[tuple[int, GroupResult]] = []

    @broker.task(retry_on_error=True, max_retries=ATTEMPTS)
    async def doomed(index: int) -> None:
        calls.append(index)
        raise ValueError(f"attempt {len(calls)}")

    @broker.task
    async def then(result: GroupResult) -> None:
        seen.append((len(calls), result))

    attempts = ATTEMPTS if retried else 1
    async with worker(broker, max_async_tasks=2) as receiver:
        handle = await group([Signature.of(doomed, 0)], then=then).kiq(broker)
        await eventually(lambda: len(seen) == 1, what="the continuation")
        status = await handle.status()
        await drained(broker, receiver)

    ((calls_then, result),) = seen
    assert calls_then == attempts
    assert len(calls) == attempts
    assert (result.succeeded, list(result.failed)) == ([], [0])
    assert result.failed[0].message == f"attempt {attempts}"
    assert (status.done, status.failed) == (0, 1)


@pytest.mark.parametrize("retries", list(RETRIES))
async def test_a_continuation_that_raises_no_result_error_completes_its_group(
    redis_url: str, key_prefix: str, retries: str
) -> None:
    broker, _, sent, _ = _broker(redis_url, key_prefix, retries)
    ran: list[int] = []

    @broker.task
    async def member(index: int) -> int:
        return index

    @broker.task(retry_on_error=True, max_retries=ATTEMPTS)
    async def then(result: GroupResult) -> None:
        ran.append(result.total)
        raise NoResultError

    async with worker(broker, max_async_tasks=2) as receiver:
        handle = await group([Signature.of(member, 0)], then=then).kiq(broker)
        await eventually(
            lambda: _group_state_is(handle, "completed"), what="the group to complete"
        )
        await eventually(
            lambda: sent.executions_of(then.task_name) == 1, what="then to be done"
        )
        await drained(broker, receiver)

    assert ran == [1]
    assert len(sent.of_task(then.task_name)) == 1


@pytest.mark.parametrize("retries", list(RETRIES))
async def test_a_chain_step_that_raises_no_result_error_moves_its_chain_on(
    redis_url: str, key_prefix: str, retries: str
) -> None:
    broker, _, sent, _ = _broker(redis_url, key_prefix, retries)
    received: list[object] = []

    @broker.task
    async def first() -> int:
        return 1

    @broker.task(retry_on_error=True, max_retries=ATTEMPTS)
    async def silent(previous: int) -> int:
        raise NoResultError

    @broker.task
    async def last(previous: object) -> str:
        received.append(previous)
        return "end"

    async with worker(broker, max_async_tasks=2) as receiver:
        handle = await chain(
            Signature.of(first), Signature.of(silent), Signature.of(last)
        ).kiq(broker)
        await eventually(
            lambda: _chain_state_is(handle, ChainState.DONE), what="the chain to end"
        )
        status = await handle.status()
        await drained(broker, receiver)

    assert received == [None]
    assert len(sent.of_task(silent.task_name)) == 1
    assert (status.step, status.steps) == (3, 3)


async def test_a_member_that_requeues_itself_counts_with_its_next_run(
    redis_url: str, key_prefix: str
) -> None:
    # Context.requeue sends the message again, then raises NoResultError: that
    # run comes again, so the member waits for it.
    broker, _, _, _ = _broker(redis_url, key_prefix, "no-retry")
    calls: list[int] = []
    seen: list[tuple[int, GroupResult]] = []

    @broker.task
    async def patient(index: int, context: Annotated[Context, TaskiqDepends()]) -> str:
        calls.append(index)
        if len(calls) == 1:
            await context.requeue()
        return "ready"

    @broker.task
    async def then(result: GroupResult) -> None:
        seen.append((len(calls), result))

    async with worker(broker, max_async_tasks=2) as receiver:
        await group([Signature.of(patient, 0)], then=then).kiq(broker)
        await eventually(lambda: len(seen) == 1, what="the continuation")
        await drained(broker, receiver)

    ((calls_then, result),) = seen
    assert calls_then == 2
    assert (result.succeeded, result.results) == ([0], ["ready"])


async def _group_state_is(handle: object, state: str) -> bool:
    status = await handle.status()  # type: ignore[attr-defined]
    return status.state.value == state


async def _chain_state_is(handle: object, state: ChainState) -> bool:
    return (await handle.status()).state is state  # type: ignore[attr-defined]
