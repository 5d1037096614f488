"""Keeping the run leases of the bodies running here alive until they end.

A continuation or chain step runs under a lease of ``finaliser_lease`` that its
worker renews every third of it while the body runs; a worker that dies stops
renewing, so a copy redelivered after it finds the lease run out and runs. A
body whose lease cannot be renewed (Redis away longer than a lease) may meet a
second copy: the renewal goes on trying, and says so.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import NamedTuple

from redis.exceptions import RedisError
from taskiq import TaskiqMessage

from taskiq_fanin.storage.replies import Begin

logger = logging.getLogger("taskiq_fanin")

#: Asks for the lease again, as the delivery that holds it: ``RUN`` renews it.
Renew = Callable[[], Awaitable[Begin]]


class Held(NamedTuple):
    """What a body's leases were taken as: released as the same, once it ends.

    The attempt is read before the body runs: a retry middleware raises the
    message's retry count in its own hook, before the body's end is recorded.
    """

    delivery: str
    attempt: int


class RunLeases:
    """The renewals of the leases held by bodies running in this worker."""

    def __init__(self) -> None:
        #: Each body's renewal, and what its guard began it as.
        self._renewals: dict[int, tuple[asyncio.Task[None], Held]] = {}

    def keep(
        self,
        message: TaskiqMessage,
        renewals: list[Renew],
        *,
        every: float,
        held: Held,
    ) -> None:
        """Renew ``renewals`` every ``every`` seconds while ``message`` runs here.

        ``held``: the guard's delivery and attempt, kept for the release (an
        attempt to be retried releases only the leases it holds as them).
        """
        self.end(message)
        running = asyncio.current_task()  # the task that runs the body next
        task = asyncio.get_running_loop().create_task(
            self._renew(message, renewals, every, running)
        )
        self._renewals[id(message)] = (task, held)

    def end(self, message: TaskiqMessage) -> Held | None:
        """``message``'s body is over: its leases need no renewing.

        Returns what its guard began it as (``None``: it held no lease).
        """
        kept = self._renewals.pop(id(message), None)
        if kept is None:
            return None
        task, held = kept
        task.cancel()
        return held

    async def _renew(
        self,
        message: TaskiqMessage,
        renewals: list[Renew],
        every: float,
        running: "asyncio.Task[object] | None",
    ) -> None:
        # A body whose end was never reported (taskiq skips post_execute when
        # something before it fails) stops being renewed when its task is over.
        while running is None or not running.done():
            await asyncio.sleep(every)
            for renew in renewals:
                try:
                    begun = await renew()
                except (RedisError, OSError) as error:
                    logger.warning(
                        "Task %s: its run lease could not be renewed (%s)",
                        message.task_id,
                        error,
                    )
                    continue
                if begun is not Begin.RUN:
                    return  # completed, cancelled, or taken over by a retry
        self._renewals.pop(id(message), None)
