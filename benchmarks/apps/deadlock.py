"""Albums of five 200 ms resizes: waiting parents, the library's fan-in, a baseline,
and for reference parents that only kick their children.

Every resize stamps its finish in all three patterns, so the patterns differ only
in how an album is put together.
"""

from __future__ import annotations

import asyncio
from typing import Any

from taskiq import AsyncBroker
from taskiq.exceptions import TaskiqResultTimeoutError

from benchmarks.apps.common import App, AppSettings
from taskiq_fanin import GroupResult, Signature, group, group_task
from taskiq_fanin.errors import WaitingInsideTaskError

#: Resize jobs per album, as in the seed.
IMAGES = 5
#: How long one resize takes, as in the seed.
RESIZE_SECONDS = 0.2


def build(settings: AppSettings, *, burst: bool = False) -> App:
    """Register the album tasks on a broker for ``settings``."""
    app = App(settings, burst=burst)

    @app.task("bench.deadlock.resize")
    async def resize(album: int, image: int) -> str:
        await asyncio.sleep(RESIZE_SECONDS)
        await app.stamp("children", f"{album}:{image}")
        return f"{album}/{image}.jpg"

    @app.task("bench.deadlock.album_waiting")
    async def album_waiting(album: int) -> None:
        # The pattern under test: this slot is held while the children run.
        children = [await resize.kiq(album, image) for image in range(IMAGES)]
        try:
            for child in children:
                await child.wait_result(timeout=settings.wait_timeout)
        except TaskiqResultTimeoutError:
            await app.stamp("gave_up", album)
            return
        except WaitingInsideTaskError as refused:  # the middleware's guard on
            await app.stamp("refused", f"{album}:{type(refused).__name__}")
            return
        await app.stamp("albums", album)

    @app.task("bench.deadlock.album_parent")
    async def album_parent(album: int) -> None:
        # The reference: a parent that kicks its children with taskiq alone and
        # ends (nothing runs when they are done): what a parent hop costs.
        await asyncio.gather(*(resize.kiq(album, image) for image in range(IMAGES)))

    @app.task("bench.deadlock.publish")
    async def publish(result: GroupResult, album: int) -> None:
        await app.stamp("albums", album)

    @app.task("bench.deadlock.make_album")
    @group_task()
    async def make_album(album: int) -> Any:
        members = [Signature.of(resize, album, image) for image in range(IMAGES)]
        return group(members, then=Signature.of(publish, album))

    return app


def worker_broker() -> AsyncBroker:
    """Broker factory for ``taskiq worker`` (settings from the environment)."""
    return build(AppSettings.from_env()).broker
