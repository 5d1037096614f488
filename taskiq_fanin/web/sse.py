"""Server-sent events: a group's progress and a chain's step, as they change.

Each stream reads the group's progress (``GroupHandle.progress()``) or the
chain's status, O(1) in its size, a few times a second, and sends an event
only when what the page shows changed; it ends when the group or chain is
over (or gone). A comment line now and then
keeps proxies from closing an idle stream.
"""

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict
from typing import Any

from taskiq_fanin.api.control import chain_status
from taskiq_fanin.api.groups import group_handle
from taskiq_fanin.domain.results import ChainState, GroupState
from taskiq_fanin.web.render import chain_doc, progress_doc
from taskiq_fanin.worker.middleware import FanInMiddleware

#: Seconds between two reads of a status.
POLL_SECONDS = 0.2
#: Seconds between two keep-alive comments on a quiet stream.
KEEPALIVE_SECONDS = 15.0
#: What tells the browser how long to wait before reconnecting (ms).
RETRY_MS = 1000


def event(name: str, data: dict[str, Any]) -> str:
    """One server-sent event."""
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"


async def _changes(
    read: Callable[[], Awaitable[tuple[dict[str, Any], bool]]], name: str
) -> AsyncIterator[str]:
    """Send ``read()``'s document whenever it changes, until it says it is over."""
    yield f"retry: {RETRY_MS}\n\n"
    last: dict[str, Any] | None = None
    quiet = 0.0
    while True:
        doc, over = await read()
        if doc != last:
            yield event(name, doc)
            last, quiet = doc, 0.0
        elif quiet >= KEEPALIVE_SECONDS:
            yield ": still here\n\n"
            quiet = 0.0
        if over:
            return
        await asyncio.sleep(POLL_SECONDS)
        quiet += POLL_SECONDS


def group_events(fanin: FanInMiddleware, group_id: str) -> AsyncIterator[str]:
    """``progress`` events of a group, until it is over or gone."""

    async def read() -> tuple[dict[str, Any], bool]:
        status = await group_handle(fanin, group_id).progress()
        doc = asdict(progress_doc(status))
        # Gone (expired, deleted): over too, so that the page stops asking.
        doc["over"] = doc["over"] or status.state is GroupState.MISSING
        return doc, doc["over"]

    return _changes(read, "progress")


def chain_events(fanin: FanInMiddleware, chain_id: str) -> AsyncIterator[str]:
    """``step`` events of a chain, until it is over or gone."""

    async def read() -> tuple[dict[str, Any], bool]:
        status = await chain_status(fanin, chain_id)
        doc = asdict(chain_doc(status))
        doc["over"] = doc["over"] or status.state is ChainState.MISSING
        return doc, doc["over"]

    return _changes(read, "step")
