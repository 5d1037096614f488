"""Waiting for a condition with a deadline, never a sleep hoping it holds.

:func:`wait_until` says whether the condition came to hold (a benchmark reports
a run that never drained); :func:`eventually` fails a test with what it waited
for; :func:`poll_until` is the same for synchronous code.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

logger = logging.getLogger(__name__)

#: Default poll interval; short next to any timed run.
POLL_SECONDS = 0.01

#: Longest one poll may take: a call stuck on a wedged connection is cancelled
#: (redis-py then drops that connection) and the condition is polled again, so
#: the deadline holds whatever one call does.
CALL_SECONDS = 10.0

Condition = Callable[[], bool | Awaitable[bool]]


async def wait_until(
    condition: Condition,
    *,
    timeout: float,
    interval: float = POLL_SECONDS,
    check: Callable[[], None] | None = None,
) -> bool:
    """Poll ``condition`` until it holds (True) or ``timeout`` passes (False).

    ``condition`` may be a plain function or a coroutine function. ``check``
    runs before every poll and may raise (a worker that died). A coroutine that
    takes longer than :data:`CALL_SECONDS` (or than the time left) counts as
    not holding, and is polled again.
    """
    deadline = time.monotonic() + timeout
    while True:
        if check is not None:
            check()
        held = condition()
        if not isinstance(held, bool):
            left = max(deadline - time.monotonic(), 0.0) + POLL_SECONDS
            try:
                held = await asyncio.wait_for(held, min(CALL_SECONDS, left))
            except asyncio.TimeoutError:
                # Said, so that a run that needed it shows which call hung.
                name = getattr(condition, "__qualname__", repr(condition))
                logger.warning("wait_until: a poll of %s hung; cancelled", name)
                held = False
        if held:
            return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(interval)


async def eventually(
    condition: Condition,
    *,
    timeout: float = 20.0,
    what: str = "condition",
    interval: float = 0.02,
) -> None:
    """Wait until ``condition`` holds; fail with ``what`` after ``timeout`` seconds.

    Raises:
        AssertionError: the condition did not hold in time.
    """
    if not await wait_until(condition, timeout=timeout, interval=interval):
        msg = f"timed out after {timeout}s waiting for {what}"
        raise AssertionError(msg)


def poll_until(
    condition: Callable[[], bool], *, timeout: float, interval: float = 0.05
) -> bool:
    """:func:`wait_until` for synchronous code: True once it holds, else False."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
