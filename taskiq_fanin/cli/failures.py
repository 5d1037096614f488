"""The latest failures of the groups ``watch`` shows, from their outcome streams.

A group's progress counts its failed members but names none; its outcomes
(``GroupHandle.outcomes()``) name each, with its error. One reader a group,
started the first time the group is shown, keeps the latest few failures; it
ends by itself once the group has no outcome to come.
"""

import asyncio
import collections
import contextlib
from dataclasses import dataclass

from redis.exceptions import RedisClusterException, RedisError

from taskiq_fanin.api.groups import group_handle
from taskiq_fanin.domain.exceptions import FanInError
from taskiq_fanin.domain.results import MemberError
from taskiq_fanin.worker.middleware import FanInMiddleware

#: Failures a group's view keeps, the latest.
KEPT = 5
#: Longest an error's text is shown (the rest is cut).
ERROR_CHARS = 160


@dataclass(frozen=True)
class Failure:
    """A failed member: its index in the group, and its error as text."""

    index: int
    error: str


def error_text(error: MemberError | None) -> str:
    """An error as ``Type: message``, cut short."""
    if error is None:
        return "-"
    text = f"{error.type}: {error.message}" if error.message else error.type
    return text if len(text) <= ERROR_CHARS else text[: ERROR_CHARS - 1] + "…"


class LatestFailures:
    """Follows the outcomes of each group asked about; keeps its latest failures."""

    def __init__(self, fanin: FanInMiddleware, kept: int = KEPT) -> None:
        self._fanin = fanin
        self._kept = kept
        self._latest: dict[str, collections.deque[Failure]] = {}
        self._readers: dict[str, asyncio.Task[None]] = {}

    def of(self, group_id: str) -> tuple[Failure, ...]:
        """The group's latest failures read so far (its reader starts now)."""
        if group_id not in self._readers:
            self._latest[group_id] = collections.deque(maxlen=self._kept)
            self._readers[group_id] = asyncio.create_task(self._follow(group_id))
        return tuple(self._latest[group_id])

    async def _follow(self, group_id: str) -> None:
        latest = self._latest[group_id]
        # The counts come from the progress read, which says if Redis is away;
        # the names of failures are a bonus: a reader that stops leaves them.
        with contextlib.suppress(FanInError, RedisError, RedisClusterException):
            async for outcome in group_handle(self._fanin, group_id).outcomes():
                if outcome.state == "failed":
                    latest.append(Failure(outcome.index, error_text(outcome.error)))

    async def settle(self, timeout: float) -> None:
        """Wait (at most ``timeout``) for the readers of ended groups to finish."""
        readers = [task for task in self._readers.values() if not task.done()]
        if readers:
            await asyncio.wait(readers, timeout=timeout)

    async def close(self) -> None:
        """Stop every reader."""
        for task in self._readers.values():
            task.cancel()
        await asyncio.gather(*self._readers.values(), return_exceptions=True)
