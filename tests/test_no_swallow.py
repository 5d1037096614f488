"""Nothing is swallowed: while Redis is away a worker's hooks retry, then raise,
so the message stays unacknowledged; a run guard that cannot be asked runs no
body. Redis here is a server of the test's own that went away after the broker
started (a port nobody listens on any more)."""

import asyncio
import time

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from taskiq import InMemoryBroker, TaskiqMessage, TaskiqResult

from local_redis import RedisServer
from taskiq_fanin import FanInMiddleware
from taskiq_fanin.chains.cursor import CHAIN_LABEL, ChainCursor
from taskiq_fanin.domain.labels import CONTINUATION_LABEL, MEMBER_LABEL, OnErrorRef
from taskiq_fanin.errors import MiddlewareNotFoundError

RETRY_FOR = 0.5
#: What a connect to a port nobody listens on raises: refused at once, or, on a
#: loop too busy to see the refusal within the connect timeout, timed out. The
#: hooks count both as Redis away.
AWAY_ERRORS = (RedisConnectionError, RedisTimeoutError)


@pytest.fixture
async def away() -> "asyncio.AsyncGenerator[FanInMiddleware, None]":
    """A middleware started on a server of its own, which then went away.

    Started: ``broker.startup()`` refuses a Redis that does not answer. Gone:
    the server is stopped and the client's connections dropped, so that every
    command connects anew to a port nobody listens on.
    """
    with RedisServer() as server:
        client = Redis(
            host=server.host, port=server.port, socket_connect_timeout=1.0, retry=None
        )
        fanin = FanInMiddleware(client, prefix="away", retry_for=RETRY_FOR)
        broker = InMemoryBroker().with_middlewares(fanin)
        await broker.startup()
        server.stop()
        await client.connection_pool.disconnect()
        yield fanin
        await broker.shutdown()
        await client.aclose()


def message(**labels: str) -> TaskiqMessage:
    return TaskiqMessage(
        task_id="t1", task_name="job", labels=labels, args=[], kwargs={}
    )


async def test_an_outcome_that_cannot_be_recorded_raises_after_retrying(
    away: FanInMiddleware, caplog: pytest.LogCaptureFixture
) -> None:
    member = message(**{MEMBER_LABEL: "g/0/tok"})
    done = TaskiqResult(is_err=False, return_value=1, execution_time=0.0)
    await away.pre_execute(member)  # a plain member: nothing to guard
    started = time.monotonic()
    with pytest.raises(AWAY_ERRORS):
        await away.post_execute(member, done)
    # It retried (for retry_for) before it gave up, and said what happens now.
    assert time.monotonic() - started >= RETRY_FOR * 0.8
    assert "Redis is away" in caplog.text
    assert "left unacknowledged" in caplog.text
    assert away.context.outcomes.running == 0  # nothing left behind


@pytest.mark.parametrize(
    "labels",
    [
        {CONTINUATION_LABEL: "g/tok/then"},
        {CHAIN_LABEL: ChainCursor(id="c", token="tok", index=0).label()[CHAIN_LABEL]},
        {MEMBER_LABEL: "g/0/tok", "fanin_cancellable": "1"},
        OnErrorRef(chain_id="c", token="tok").label(),
    ],
    ids=["continuation", "chain step", "cancellable member", "chain on_error"],
)
async def test_a_guard_that_cannot_be_asked_runs_no_body(
    away: FanInMiddleware, labels: dict[str, str]
) -> None:
    """Fails closed: raising from pre_execute, taskiq runs no body and acks nothing."""
    with pytest.raises(AWAY_ERRORS):
        await away.pre_execute(message(**labels))
    assert away.context.outcomes.running == 0


async def test_a_hook_after_shutdown_raises_rather_than_do_nothing() -> None:
    """When its listener fails (a read of the queue meeting a primary that died),
    taskiq shuts the broker down without waiting for the tasks still running: a
    member that ends afterwards must not be acknowledged with its outcome never
    recorded (tests/test_sentinel_failover.py, now and then, counted such a
    member as recorded and found it lost), nor a guarded body run unguarded."""
    with RedisServer() as server:
        client = Redis(host=server.host, port=server.port)
        fanin = FanInMiddleware(client, prefix="shut", retry_for=RETRY_FOR)
        broker = InMemoryBroker().with_middlewares(fanin)
        await broker.startup()
        member = message(**{MEMBER_LABEL: "g/0/tok"})
        await fanin.pre_execute(member)  # it started while the middleware ran
        await broker.shutdown()
        done = TaskiqResult(is_err=False, return_value=1, execution_time=0.0)
        try:
            with pytest.raises(MiddlewareNotFoundError, match="unacknowledged"):
                await fanin.post_execute(member, done)
            guarded = message(**{CONTINUATION_LABEL: "g/tok/then"})
            with pytest.raises(MiddlewareNotFoundError, match="unacknowledged"):
                await fanin.pre_execute(guarded)
            plain = message()  # nothing of the library's: runs as it is
            assert await fanin.pre_execute(plain) is plain
            await fanin.post_execute(plain, done)
        finally:
            await client.aclose()


async def test_a_shutdown_waits_for_the_ends_being_recorded() -> None:
    """taskiq shuts the broker down with tasks still running when its listener
    fails: a body that has ended is left its recording (here held up by a
    paused Redis) before the connection closes, rather than cut off, its
    message then coming back to run again."""
    with RedisServer() as server:
        client = Redis(host=server.host, port=server.port)
        admin = Redis(host=server.host, port=server.port)
        fanin = FanInMiddleware(client, prefix="shut", retry_for=10.0)
        broker = InMemoryBroker().with_middlewares(fanin)
        await broker.startup()
        member = message(**{MEMBER_LABEL: "g/0/tok"})
        await fanin.pre_execute(member)
        done = TaskiqResult(is_err=False, return_value=1, execution_time=0.0)
        order: list[str] = []
        try:
            await admin.execute_command("CLIENT", "PAUSE", 1000, "WRITE")
            recording = asyncio.create_task(fanin.post_execute(member, done))
            recording.add_done_callback(lambda _: order.append("recorded"))
            runs = fanin._runs
            assert runs is not None
            deadline = time.monotonic() + 10
            while runs.recording == 0:  # its script call is on its way
                assert time.monotonic() < deadline, "the recording never began"
                await asyncio.sleep(0.01)
            await broker.shutdown()
            order.append("shut down")
            await recording  # it raised nothing
        finally:
            await admin.aclose()
            await client.aclose()

    assert order == ["recorded", "shut down"]
