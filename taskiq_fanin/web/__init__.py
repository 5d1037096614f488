"""``taskiq-fanin web``: a live page of the groups and chains under a prefix.

Needs the ``web`` extra (Starlette and uvicorn): ``pip install
'taskiq-fanin[web]'``. Only this package imports them, so the rest of the
library works without it. Read-only unless started with ``allow_actions``
(and a token).
"""

from taskiq import AsyncBroker

from taskiq_fanin.web.app import Settings, build_app
from taskiq_fanin.worker.middleware import FanInMiddleware

__all__ = ["Settings", "build_app", "serve"]


async def serve(
    fanin: FanInMiddleware,
    *,
    host: str,
    port: int,
    allow_actions: bool = False,
    token: str | None = None,
    broker: AsyncBroker | None = None,
) -> None:
    """Serve the page with uvicorn until interrupted (``fanin`` started)."""
    import uvicorn  # noqa: PLC0415 - the extra's, imported when serving

    settings = Settings(fanin, allow_actions=allow_actions, token=token, broker=broker)
    config = uvicorn.Config(
        build_app(settings),
        host=host,
        port=port,
        log_level="warning",
        # Open event streams end at shutdown instead of holding it.
        timeout_graceful_shutdown=2,
    )
    await uvicorn.Server(config).serve()
