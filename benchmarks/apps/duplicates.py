"""Albums fanned in by a naive counter and by the library's set, with duplicates.

Each child stamps itself into its album's ``finished`` set after its work; a
continuation that starts before that set is full fired early.
"""

from __future__ import annotations

import asyncio
from typing import Any

from taskiq import AsyncBroker

from benchmarks.apps.common import App, AppSettings
from taskiq_fanin import GroupResult

#: Children per album, as in the seed.
IMAGES = 5


def build(settings: AppSettings, *middlewares: Any) -> App:
    """Register both sides' tasks on a broker for ``settings``."""
    app = App(settings, *middlewares)
    rec = settings.record

    async def work(album: int, image: int, seconds: float) -> None:
        await app.client.incr(rec("deliveries"))
        await asyncio.sleep(seconds)
        await app.client.sadd(rec(f"finished:{album}"), image)

    async def fired(album: int) -> None:
        # Checked first thing: were all distinct children finished when we started?
        finished = await app.client.scard(rec(f"finished:{album}"))
        if finished < IMAGES:
            await app.client.sadd(rec("early"), album)
        await app.client.hincrby(rec("fires"), str(album), 1)

    @app.task("bench.dup.counter_publish")
    async def counter_publish(album: int) -> None:
        await fired(album)

    @app.task("bench.dup.counter_child")
    async def counter_child(album: int, image: int, seconds: float) -> None:
        await work(album, image, seconds)
        # The naive fan-in: every delivery counts, duplicates too.
        if await app.client.incr(rec(f"count:{album}")) == IMAGES:
            await counter_publish.kiq(album)

    @app.task("bench.dup.set_child")
    async def set_child(album: int, image: int, seconds: float) -> None:
        await work(album, image, seconds)

    @app.task("bench.dup.set_publish")
    async def set_publish(result: GroupResult, album: int) -> None:
        await fired(album)

    return app


def worker_broker() -> AsyncBroker:
    """Broker factory for ``taskiq worker`` (settings from the environment)."""
    return build(AppSettings.from_env()).broker
