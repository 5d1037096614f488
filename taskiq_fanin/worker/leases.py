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

from redis.exceptions import RedisError
from taskiq import TaskiqMessage

from taskiq_fanin.store.replies import Begin

logger = logging.getLogger("taskiq_fanin")

#: Asks for the lease again, as the delivery that holds it: ``RUN`` renews it.
Renew = Callable[[], Awaitable[Begin]]


class RunLeases:
    """The renewals of the leases held by bodies running in this worker."""

    def __init__(self) -> None:
        self._renewals: dict[int, asyncio.Task[None]] = {}

    def keep(
        self, message: TaskiqMessage, renewals: list[Renew], *, every: float
    ) -> None:
        """Renew ``renewals`` every ``every`` seconds while ``message`` runs here."""
        self.end(message)
        running = asyncio.current_task()  # the task that runs the body next
        task = asyncio.get_running_loop().create_task(
            self._renew(message, renewals, every, running)
        )
        self._renewals[id(message)] = task

    def end(self, message: TaskiqMessage) -> None:
        """``message``'s body is over: its leases need no renewing."""
        task = self._renewals.pop(id(message), None)
        if task is not None:
            task.cancel()

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
