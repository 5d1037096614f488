"""In-memory brokers that lose or refuse kicks, for tests on fakeredis (or a
server) without a stream: the broker away for a kick, a member's kick lost.
"""

from collections.abc import Callable

from taskiq import BrokerMessage, InMemoryBroker


class Kicks(InMemoryBroker):
    """Runs what it is sent; the kicks ``fail`` picks raise first (the broker away)."""

    def __init__(self) -> None:
        super().__init__()
        self.kicked: list[str] = []
        self.fail: Callable[[str], bool] = lambda _: False

    async def kick(self, message: BrokerMessage) -> None:
        if self.fail(message.task_id):
            raise ConnectionError("the broker's Redis went away")
        self.kicked.append(message.task_id)
        await super().kick(message)


async def settled(broker: InMemoryBroker) -> None:
    """Every task run, those the ones before kicked included."""
    while broker._running_tasks:
        await broker.wait_all()


class MembersGoNowhere(InMemoryBroker):
    """Every member's kick is lost for good; anything else runs here."""

    async def kick(self, message: BrokerMessage) -> None:
        if message.task_name != MEMBER:
            await super().kick(message)


MEMBER = "give_up_windows:member"
