"""A body that raises taskiq's own ``NoResultError`` ran and stores no result:
its member, chain step or continuation counts as succeeded with ``None``. Only an
attempt a retry middleware repeats (it puts a fresh ``NoResultError`` in the
result) waits for the next, on a real redis-server and real workers.
"""

from taskiq import NoResultError

from taskiq_fanin import ChainState, GroupResult, Signature, chain, group
from tests.harness import eventually, stream_broker, worker


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

    async with worker(broker, max_async_tasks=3):
        handle = await group(
            [Signature.of(member, i) for i in range(3)], then=then
        ).kiq(broker)
        await eventually(lambda: len(results) == 1, what="the continuation")
        await eventually(
            lambda: _group_state_is(handle, "completed"), what="the group to complete"
        )
        status = await handle.status()

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

    async with worker(broker, max_async_tasks=2):
        handle = await chain(
            Signature.of(first), Signature.of(silent), Signature.of(last)
        ).kiq(broker)
        await eventually(
            lambda: _chain_state_is(handle, ChainState.DONE), what="the chain to end"
        )
        status = await handle.status()

    assert received == [None]
    assert (status.step, status.steps) == (3, 3)


async def _group_state_is(handle: object, state: str) -> bool:
    status = await handle.status()  # type: ignore[attr-defined]
    return status.state.value == state


async def _chain_state_is(handle: object, state: ChainState) -> bool:
    return (await handle.status()).state is state  # type: ignore[attr-defined]
