"""``watch`` and ``list --watch``: Redis read again and again, the screen redrawn.

The terminal gets one live view (rich's ``Live``), redrawn after every read and
left on the screen as it last was; ``--json`` gets one JSON object a line, each
time something but the pace changed, and works through a pipe. ``watch`` ends
by itself once the group or the chain has ended; ``list --watch`` at Ctrl-C.
"""

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from rich.console import RenderableType
from rich.live import Live

from taskiq_fanin.cli.failures import LatestFailures
from taskiq_fanin.cli.live_views import screen
from taskiq_fanin.cli.output import (
    ReaderGoneError,
    StdoutConsole,
    print_text,
    to_stdout,
)
from taskiq_fanin.cli.parser import ExitCode, NotFoundError
from taskiq_fanin.cli.snapshots import View, changed, read_view, view_doc
from taskiq_fanin.domain.results import GroupState
from taskiq_fanin.worker.middleware import FanInMiddleware

#: Longest the end of a watch waits for the last failures to be read (seconds).
SETTLE_SECONDS = 5.0
#: One read of what a watch shows: its JSON document, and what a terminal draws.
Read = Callable[[], Awaitable[tuple[Any, RenderableType]]]


def print_line(document: object) -> None:
    """One JSON object on one line, flushed at once: a pipe sees it now."""
    print_text(json.dumps(document, separators=(",", ":")))


async def watch(
    fanin: FanInMiddleware, workflow_id: str, *, interval: float, as_json: bool
) -> int:
    """Follow one group or chain until it ends; the exit code of ``status``."""
    failures = LatestFailures(fanin)

    async def read() -> View:
        view = await read_view(fanin, workflow_id, failures)
        if view is None:
            prefix = fanin.config.prefix
            raise NotFoundError(
                f'no group or chain "{workflow_id}" under prefix "{prefix}"'
            )
        if view.ended:  # its last failures read before its last frame
            await failures.settle(SETTLE_SECONDS)
            view = await read_view(fanin, workflow_id, failures) or view
        return view

    try:
        view = await read()
        if as_json:
            await _lines(read, view, interval)
        else:
            await _live(read, view, interval)
    except ReaderGoneError:
        pass
    finally:
        await failures.close()
    return ExitCode.OK


async def _lines(
    read: Callable[[], Awaitable[View]], view: View, interval: float
) -> None:
    """A JSON line for the first read and each change, until the end."""
    last: dict[str, Any] | None = None
    while True:
        document = view_doc(view)
        if changed(last, document):
            print_line(document)
            last = document
        if view.ended:
            return
        await asyncio.sleep(interval)
        view = await _reread(read, view)


async def _live(
    read: Callable[[], Awaitable[View]], view: View, interval: float
) -> None:
    """The view redrawn in place after each read; the last stays on the screen."""
    with (
        to_stdout(),
        Live(screen(view), console=StdoutConsole(), auto_refresh=False) as live,
    ):
        while not view.ended:
            await asyncio.sleep(interval)
            view = await _reread(read, view)
            live.update(screen(view), refresh=True)


async def _reread(read: Callable[[], Awaitable[View]], last: View) -> View:
    """Read again; a workflow gone from Redis since (expired) ends as it was."""
    try:
        return await read()
    except NotFoundError:
        return replace(last, state=GroupState.MISSING.value)


def _ageless(document: Any) -> Any:
    """A listing without its ages, which move at every read: did it change?"""
    if isinstance(document, list):
        return [_ageless(each) for each in document]
    if isinstance(document, dict):
        return {k: v for k, v in document.items() if k != "age_seconds"}
    return document


async def watch_list(read: Read, *, interval: float, as_json: bool) -> int:
    """Read and show the listing again every ``interval`` until Ctrl-C."""
    document, drawn = await read()
    if as_json:
        last = None
        while True:
            if _ageless(document) != last:
                try:
                    print_line(document)
                except ReaderGoneError:
                    return ExitCode.OK
                last = _ageless(document)
            await asyncio.sleep(interval)
            document, drawn = await read()
    with to_stdout(), Live(drawn, console=StdoutConsole(), auto_refresh=False) as live:
        while True:
            await asyncio.sleep(interval)
            document, drawn = await read()
            live.update(drawn, refresh=True)
