"""A read many callers of one process share: one per key per ``fresh_for``.

At most one is in flight per key, whatever the number of callers.

``is_cancelled()`` asked in a tight loop by every running body of a workflow
costs one Redis read a second per workflow per worker process, not one per
call. The freshness is the process's own clock: it only spaces reads; every
time the library keeps in Redis is on Redis's clock.
"""

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")

#: Keys kept before the stale ones are dropped (workflows a process saw lately).
PRUNE_AT = 1024


@dataclass
class _Read(Generic[T]):
    at: float
    value: "asyncio.Future[T]"


@dataclass
class RecentReads(Generic[T]):
    """Values read lately, by key, each fresh for ``fresh_for`` seconds."""

    fresh_for: float = 1.0
    _reads: dict[Hashable, _Read[T]] = field(default_factory=dict)

    async def get(self, key: Hashable, read: Callable[[], Awaitable[T]]) -> T:
        """The value read for ``key`` in the last ``fresh_for``, else read now.

        Callers that ask while a read is in flight wait for it and share its
        value or its error; a read that failed is not kept (the next caller
        reads again), nor is one whose caller was cancelled (its waiters read
        again themselves).
        """
        while True:
            now = time.monotonic()
            found = self._reads.get(key)
            if found is None or now - found.at >= self.fresh_for:
                return await self._read(key, read, now)
            try:
                return await asyncio.shield(found.value)
            except asyncio.CancelledError:
                if not found.value.cancelled():
                    raise  # this caller's own cancel
            # The reader was cancelled: read again.

    async def _read(
        self, key: Hashable, read: Callable[[], Awaitable[T]], now: float
    ) -> T:
        if len(self._reads) >= PRUNE_AT:
            self._prune(now)
        value: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._reads[key] = _Read(now, value)
        try:
            result = await read()
        except asyncio.CancelledError:
            self._forget(key, value)
            value.cancel()
            raise
        except BaseException as error:
            self._forget(key, value)
            value.set_exception(error)
            value.exception()  # retrieved: no warning when no one waited
            raise
        value.set_result(result)
        return result

    def _forget(self, key: Hashable, value: "asyncio.Future[T]") -> None:
        found = self._reads.get(key)
        if found is not None and found.value is value:
            del self._reads[key]

    def _prune(self, now: float) -> None:
        stale = [k for k, r in self._reads.items() if now - r.at >= self.fresh_for]
        for key in stale:
            del self._reads[key]
