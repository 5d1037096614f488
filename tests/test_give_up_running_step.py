"""A chain the sweep gives up on while its step still runs: that step undoes itself.

The sweep gives up on a chain whose step is past its span even while a live
worker is running that step (renewing its run lease). When that step then ends
*successfully*, its work is done while the chain is already ``failed``: the
step's own compensation runs then, as it does for a step that ends after a
cancel (once, however often the step's end is recorded).

Real redis-server, real ``Receiver``.
"""

import asyncio

from taskiq_fanin import ChainFailure, Signature, cancel, chain, sweep
from taskiq_fanin.inspection import chain_status
from taskiq_fanin.sweeping import SweepAction
from tests.harness import drained, eventually, stream_broker, worker
from tests.stuck_chains import DEADLINE, chain_stuck


def _saga(redis_url: str, key_prefix: str):
    broker, fanin = stream_broker(redis_url, key_prefix, deadline=DEADLINE)
    release = asyncio.Event()
    ran: list[str] = []
    undone: list[str] = []
    failures: list[ChainFailure] = []

    @broker.task(task_name="saga:reserve")
    async def reserve() -> str:
        ran.append("reserve")
        return "seat"

    @broker.task(task_name="saga:charge")
    async def charge(seat: str) -> str:
        ran.append("charge")
        await release.wait()
        ran.append("charge ended")  # the card was charged
        return "paid"

    @broker.task(task_name="saga:ship")
    async def ship(paid: str) -> None:
        ran.append("ship")

    @broker.task(task_name="saga:undo")
    async def undo(what: str) -> None:
        undone.append(what)

    @broker.task(task_name="saga:on_failure")
    async def on_failure(failure: ChainFailure) -> None:
        failures.append(failure)

    workflow = chain(
        Signature.of(reserve).with_compensation(Signature.of(undo, "reserve")),
        Signature.of(charge).with_compensation(Signature.of(undo, "charge")),
        Signature.of(ship),
        chain_id="order",
        on_error=Signature.of(on_failure),
    )
    return broker, fanin, release, ran, undone, failures, workflow


async def test_a_step_that_ends_after_its_chain_was_given_up_is_compensated(
    redis_url: str, key_prefix: str
) -> None:
    broker, fanin, release, ran, undone, failures, workflow = _saga(
        redis_url, key_prefix
    )
    async with worker(broker, max_async_tasks=3) as receiver:
        await workflow.kiq(broker)
        await eventually(lambda: "charge" in ran, what="the slow step to start")
        await eventually(lambda: chain_stuck(fanin, "order"), what="the deadline")
        given_up = await sweep(fanin, sweep_policy="give_up")
        await eventually(lambda: len(failures) == 1, what="on_error")
        await eventually(lambda: undone == ["reserve"], what="the first undo")
        release.set()
        await eventually(lambda: "charge ended" in ran, what="the slow step to end")
        await drained(broker, receiver)
        status = await chain_status(fanin, "order")

    (finding,) = given_up.findings
    assert (finding.action, finding.applied) == (SweepAction.GIVE_UP, True)
    assert status.state.value == "failed"
    assert "ship" not in ran
    # "charge" did its work after the give-up: the saga undoes it too, as a
    # cancel does for its running step (before: undone == ["reserve"], silently).
    assert sorted(undone) == ["charge", "reserve"]


async def test_for_contrast_a_cancel_compensates_the_step_that_ends_after_it(
    redis_url: str, key_prefix: str
) -> None:
    broker, fanin, release, ran, undone, _, workflow = _saga(redis_url, key_prefix)
    async with worker(broker, max_async_tasks=3) as receiver:
        await workflow.kiq(broker)
        await eventually(lambda: "charge" in ran, what="the slow step to start")
        assert await cancel(fanin, "order")
        release.set()
        await eventually(lambda: "charge ended" in ran, what="the slow step to end")
        await eventually(lambda: len(undone) == 2, what="both undos")
        await drained(broker, receiver)

    assert "ship" not in ran
    assert sorted(undone) == ["charge", "reserve"]
