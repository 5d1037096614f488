"""A chain's status says what became of its error continuation (``on_error``):
``none`` without one to run (none, or the chain did not fail), ``pending``
once it failed until a copy began, ``running`` while a copy runs, ``completed``
once one ran to its end.
On a real redis-server and a real Receiver; the records written before are
read from hashes.
"""

import asyncio

from taskiq_fanin import ChainFailure, FanInMiddleware, Signature, chain
from taskiq_fanin.chains.cursor import ChainCursor, PendingStep
from taskiq_fanin.chains.record import status_from_record
from taskiq_fanin.domain.ids import chain_on_error_id
from taskiq_fanin.domain.states import ON_ERROR_MOVES
from taskiq_fanin.inspection import chain_status
from taskiq_fanin.models import ChainState, OnErrorState
from taskiq_fanin.storage.records import ChainRecord
from tests.harness import (
    chain_reached,
    drained,
    eventually,
    lossy_stream_broker,
    stream_broker,
    worker,
)


async def on_error_is(
    fanin: FanInMiddleware, chain_id: str, state: OnErrorState
) -> bool:
    return (await chain_status(fanin, chain_id)).on_error_state is state


async def test_a_failed_chain_says_its_on_error_is_pending_running_then_completed(
    redis_url: str, key_prefix: str
) -> None:
    broker, fanin = stream_broker(redis_url, key_prefix)
    step_go, on_error_go = asyncio.Event(), asyncio.Event()
    stepping: list[str] = []
    began: list[ChainFailure] = []
    ended: list[ChainFailure] = []

    @broker.task
    async def fails() -> None:
        stepping.append("fails")
        await step_go.wait()
        raise RuntimeError("on purpose")

    @broker.task
    async def chain_failed(failure: ChainFailure) -> None:
        began.append(failure)
        await on_error_go.wait()
        ended.append(failure)

    seen: list[tuple[ChainState, OnErrorState]] = []

    async def note() -> None:
        found = await chain_status(fanin, "v")
        seen.append((found.state, found.on_error_state))

    async with worker(broker, max_async_tasks=4) as receiver:
        await chain(Signature.of(fails), on_error=chain_failed, chain_id="v").kiq(
            broker
        )
        await eventually(lambda: stepping == ["fails"], what="the step to begin")
        await note()  # running: no on_error to run yet
        step_go.set()
        await eventually(lambda: len(began) == 1, what="on_error to begin")
        await eventually(
            lambda: chain_reached(fanin, "v", ChainState.FAILED),
            what="the chain to be failed",
        )
        await note()  # failed, its on_error blocked in its body
        on_error_go.set()
        await eventually(lambda: len(ended) == 1, what="on_error to end")
        await eventually(
            lambda: on_error_is(fanin, "v", OnErrorState.COMPLETED),
            what="on_error's completion",
        )
        await note()
        await drained(broker, receiver)

    assert seen == [
        (ChainState.RUNNING, OnErrorState.NONE),  # it has not failed
        (ChainState.FAILED, OnErrorState.RUNNING),
        (ChainState.FAILED, OnErrorState.COMPLETED),
    ]


async def test_a_failed_chain_whose_on_error_kick_was_lost_says_pending(
    redis_url: str, key_prefix: str
) -> None:
    """What the sweep would find as ``on_error_lost``, the status shows too."""
    broker, fanin = lossy_stream_broker(redis_url, key_prefix)
    broker.drop = {chain_on_error_id("lost")}

    @broker.task
    async def fails() -> None:
        raise RuntimeError("on purpose")

    @broker.task
    async def chain_failed(failure: ChainFailure) -> None:
        """Never runs: its kick is lost."""

    async with worker(broker, max_async_tasks=4) as receiver:
        await chain(Signature.of(fails), on_error=chain_failed, chain_id="lost").kiq(
            broker
        )
        await eventually(
            lambda: chain_reached(fanin, "lost", ChainState.FAILED),
            what="the chain to be failed",
        )
        await drained(broker, receiver)
        found = await chain_status(fanin, "lost")

    assert (found.state, found.on_error_state) == (
        ChainState.FAILED,
        OnErrorState.PENDING,
    )


async def test_a_chain_without_on_error_says_none_and_so_does_a_missing_one(
    redis_url: str, key_prefix: str
) -> None:
    broker, fanin = stream_broker(redis_url, key_prefix)

    @broker.task
    async def fails() -> None:
        raise RuntimeError("on purpose")

    async with worker(broker, max_async_tasks=4) as receiver:
        await chain(Signature.of(fails), chain_id="bare").kiq(broker)
        await eventually(
            lambda: chain_reached(fanin, "bare", ChainState.FAILED),
            what="the chain to be failed",
        )
        await drained(broker, receiver)
        found = await chain_status(fanin, "bare")
        missing = await chain_status(fanin, "no-such-chain")

    assert (found.state, found.on_error_state) == (ChainState.FAILED, OnErrorState.NONE)
    assert (missing.state, missing.on_error_state) == (
        ChainState.MISSING,
        OnErrorState.NONE,
    )


def _pending(on_error: Signature | None) -> str:
    """A step's kick as the record keeps it, its chain's ``on_error`` given."""
    cursor = ChainCursor(id="c", token="tok", index=0, on_error=on_error)
    return PendingStep(cursor=cursor, step=Signature(task_name="s")).model_dump_json()


def test_each_record_reads_as_the_on_error_state_it_holds() -> None:
    """From the record's ``on_error_state`` and its pending kick's cursor."""
    on_error = Signature(task_name="chain_failed")
    base = {"token": "tok", "state": "failed", "steps": "1"}
    records = {
        "no on_error": {**base, "pending": _pending(None)},
        "kicked, none began": {**base, "pending": _pending(on_error)},
        "a copy runs": {
            **base,
            "pending": _pending(on_error),
            "on_error_state": "running",
        },
        "one ran to its end": {
            **base,
            "pending": _pending(on_error),
            "on_error_state": "completed",
        },
        # Written before a pending kick was kept: a copy began, so it has one.
        "no pending, a copy ran": {**base, "on_error_state": "completed"},
        "no pending kick": base,
        "running": {**base, "state": "running", "pending": _pending(on_error)},
        "done": {**base, "state": "done", "pending": _pending(on_error)},
        "cancelled": {**base, "state": "cancelled", "pending": _pending(on_error)},
        "failing": {**base, "state": "failing", "pending": _pending(on_error)},
    }
    found = {
        what: status_from_record("c", ChainRecord.from_hash(raw)).on_error_state
        for what, raw in records.items()
    }
    assert found == {
        "no on_error": OnErrorState.NONE,
        "kicked, none began": OnErrorState.PENDING,
        "a copy runs": OnErrorState.RUNNING,
        "one ran to its end": OnErrorState.COMPLETED,
        "no pending, a copy ran": OnErrorState.COMPLETED,
        "no pending kick": OnErrorState.NONE,
        "running": OnErrorState.NONE,
        "done": OnErrorState.NONE,
        "cancelled": OnErrorState.NONE,
        "failing": OnErrorState.PENDING,
    }
    assert status_from_record("c", ChainRecord()).on_error_state is OnErrorState.NONE


def test_the_states_a_copy_moves_through_are_the_record_s_own() -> None:
    """``running`` and ``completed`` read from the record as they are stored."""
    stored = set(ON_ERROR_MOVES) - {"kicked"}  # 'kicked': no field written yet
    assert {state.value for state in OnErrorState} == {"none", "pending", *stored}
