"""The waiting-parent guard on a real redis-server and a real Receiver: a body that
awaits another task's result in a worker gets ``WaitingInsideTaskError`` at once
(``waiting_guard="raise"``, the default), a warning (``warn``) or nothing
(``off``), its wait observed in ``taskiq_fanin_waiting_seconds`` whenever it is
let through; a client outside a body is untouched.
"""

import logging
from typing import Any

import pytest
from taskiq import AsyncBroker
from taskiq_redis import RedisAsyncResultBackend

from taskiq_fanin.errors import FanInError, WaitingInsideTaskError
from tests.harness import drained, eventually, stream_broker, worker

prometheus_client = pytest.importorskip("prometheus_client")


def with_results(broker: AsyncBroker, redis_url: str, prefix: str) -> AsyncBroker:
    return broker.with_result_backend(
        RedisAsyncResultBackend(redis_url, result_ex_time=60, prefix_str=prefix)
    )


def waited_count(task_name: str) -> float:
    found = prometheus_client.REGISTRY.get_sample_value(
        "taskiq_fanin_waiting_seconds_count", {"task_name": task_name}
    )
    return found or 0.0


class Album:
    """A parent that awaits its child, by ``wait_result()`` or by polling."""

    def __init__(self, broker: AsyncBroker, *, poll: bool = False) -> None:
        self.outcomes: list[Any] = []

        @broker.task
        async def resize(image: int) -> str:
            return f"{image}.jpg"

        @broker.task
        async def album() -> None:
            child = await resize.kiq(1)
            try:
                if poll:
                    await broker.result_backend.is_result_ready(child.task_id)
                    self.outcomes.append("polled")
                else:
                    self.outcomes.append(
                        (await child.wait_result(timeout=10)).return_value
                    )
            except Exception as refused:
                self.outcomes.append(refused)
                raise

        self.album = album
        self.resize = resize


@pytest.mark.parametrize("poll", [False, True], ids=["wait_result", "backend"])
async def test_by_default_a_body_awaiting_another_task_is_refused_at_once(
    redis_url: str, key_prefix: str, poll: bool
) -> None:
    broker, _ = stream_broker(redis_url, key_prefix)
    broker = with_results(broker, redis_url, key_prefix)
    app = Album(broker, poll=poll)
    async with worker(broker, max_async_tasks=2) as receiver:
        await app.album.kiq()
        await eventually(lambda: len(app.outcomes) == 1, what="the parent's end")
        await drained(broker, receiver)
        # A client, outside any body, waits as taskiq lets it.
        handle = await app.resize.kiq(2)
        client_got = (await handle.wait_result(timeout=10)).return_value

    (refused,) = app.outcomes
    assert isinstance(refused, WaitingInsideTaskError)
    assert isinstance(refused, FanInError)
    assert app.album.task_name in str(refused)
    assert "group(..., then=...) or chain(...)" in str(refused)
    assert client_got == "2.jpg"


@pytest.mark.parametrize("guard", ["warn", "off"])
async def test_warn_and_off_let_the_wait_through_and_observe_it(
    redis_url: str,
    key_prefix: str,
    guard: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    broker, _ = stream_broker(redis_url, key_prefix, waiting_guard=guard)
    broker = with_results(broker, redis_url, key_prefix)
    app = Album(broker)
    before = waited_count(app.album.task_name)
    with caplog.at_level(logging.WARNING, logger="taskiq_fanin"):
        async with worker(broker, max_async_tasks=2) as receiver:
            await app.album.kiq()
            await eventually(lambda: len(app.outcomes) == 1, what="the parent's end")
            await drained(broker, receiver)

    warned = [r for r in caplog.records if "awaits the result of task" in r.message]
    assert app.outcomes == ["1.jpg"]
    assert len(warned) == (1 if guard == "warn" else 0)  # once, not once a poll
    assert waited_count(app.album.task_name) == before + 1


async def test_a_bad_guard_is_refused_with_a_typed_error() -> None:
    from taskiq_fanin import FanInMiddleware
    from taskiq_fanin.errors import InvalidOptionError

    with pytest.raises(InvalidOptionError, match="waiting_guard"):
        FanInMiddleware("redis://localhost:1", waiting_guard="sometimes")
