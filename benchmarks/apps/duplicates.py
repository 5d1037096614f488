"""Albums fanned in by a naive counter and by the library's set, with duplicates.

Each child stamps itself into its album's ``finished`` set after its work; a
continuation that starts before that set is full fired early.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from taskiq import AsyncBroker, AsyncTaskiqDecoratedTask

from benchmarks.apps.common import AppSettings, Recorder, attach_recorder, make_broker
from taskiq_fanin import GroupResult

#: Children per album, as in the seed.
IMAGES = 5

Task = AsyncTaskiqDecoratedTask[Any, Any]


@dataclass(frozen=True)
class DuplicatesApp:
    """The broker and the tasks of one run."""

    broker: AsyncBroker
    counter_child: Task
    counter_publish: Task
    set_child: Task
    set_publish: Task


def build(settings: AppSettings, *middlewares: Any) -> DuplicatesApp:
    """Register both sides' tasks on a broker for ``settings``."""
    broker = make_broker(settings, *middlewares)
    recorder = Recorder(settings)
    attach_recorder(broker, recorder)
    rec = settings.record

    async def work(album: int, image: int, seconds: float) -> None:
        await recorder.client.incr(rec("deliveries"))
        await asyncio.sleep(seconds)
        await recorder.client.sadd(rec(f"finished:{album}"), image)

    async def fired(album: int) -> None:
        # Checked first thing: were all distinct children finished when we started?
        finished = await recorder.client.scard(rec(f"finished:{album}"))
        if finished < IMAGES:
            await recorder.client.sadd(rec("early"), album)
        await recorder.client.hincrby(rec("fires"), str(album), 1)

    @broker.task(task_name="bench.dup.counter_publish")
    async def counter_publish(album: int) -> None:
        await fired(album)

    @broker.task(task_name="bench.dup.counter_child")
    async def counter_child(album: int, image: int, seconds: float) -> None:
        await work(album, image, seconds)
        # The naive fan-in: every delivery counts, duplicates too.
        if await recorder.client.incr(rec(f"count:{album}")) == IMAGES:
            await counter_publish.kiq(album)

    @broker.task(task_name="bench.dup.set_child")
    async def set_child(album: int, image: int, seconds: float) -> None:
        await work(album, image, seconds)

    @broker.task(task_name="bench.dup.set_publish")
    async def set_publish(result: GroupResult, album: int) -> None:
        await fired(album)

    return DuplicatesApp(broker, counter_child, counter_publish, set_child, set_publish)


def worker_broker() -> AsyncBroker:
    """Broker factory for ``taskiq worker`` (settings from the environment)."""
    return build(AppSettings.from_env()).broker
