"""At-least-once delivery, simulated: chosen messages are sent a second time."""

from __future__ import annotations

from collections.abc import Callable

from taskiq import TaskiqMessage, TaskiqMiddleware


class DuplicatingMiddleware(TaskiqMiddleware):
    """Sends every message ``choose`` picks a second time, the very same one.

    After the message is sent, the same task id, labels and arguments are kicked
    again, as a broker that delivers at least once may do; ``duplicated`` holds
    what was sent twice.
    """

    def __init__(self, choose: Callable[[TaskiqMessage], bool]) -> None:
        super().__init__()
        self.choose = choose
        self.duplicated: list[TaskiqMessage] = []

    async def post_send(self, message: TaskiqMessage) -> None:
        """Send the message again if it is chosen."""
        if self.choose(message):
            self.duplicated.append(message)
            await self.broker.kick(self.broker.formatter.dumps(message))
