"""A worker app for the fault-injection and load tests, on RedisStreamBroker (or
ListQueueBroker, with ``BROKER=list``).

taskiq-redis's stream broker leaves a message unacknowledged until its worker is
done with it, and another worker's read takes it back once it has been idle for
``IDLE_TIMEOUT_MS`` (XAUTOCLAIM, run after a read that returned something).

Configured from the environment:

- ``REDIS_URL``: the Redis of the broker and the library; the faults hit it.
- ``OBS_URL``: a second Redis that no fault touches, where the workers say what
  they did (``obs_key``), so that a count is never lost with the fault.
- ``APP_PREFIX``: the library's keys, the stream, and the observation keys.
- ``IDLE_TIMEOUT_MS``, ``FINALISER_LEASE``, ``DEADLINE``, ``SOCKET_TIMEOUT``,
  ``RETRY_FOR``: the broker's and the middleware's options of the same name
  (seconds but the first).
- ``BROKER_SOCKET_TIMEOUT``: the broker's socket timeout (seconds), when set;
  else redis-py's default (5 s, no retries), with which a worker whose read of
  the stream outlasts it dies (and ``taskiq worker`` starts a new one).
- ``MEMBER_SECONDS``, ``STEP_SECONDS``: how long a member, a chain step takes.
- ``HANG``: the task id of a member, continuation, chain step or ``on_error``
  whose first delivery hangs (its worker is to be killed); later deliveries run
  normally. Every start of its body is counted (``started``).
- ``HOLD``: the task id of a member that, once started, waits for the test to
  set the observation key ``go`` before it returns.
- ``SLOW``: the task id of a continuation or chain step whose body runs until
  another delivery of it has been through a worker (the broker delivers it
  again once it has been idle for the idle timeout), or ``SLOW_SECONDS`` (20)
  at most; its starts are counted (``started``).
- ``KILL_ON``: ``continuation``, ``on_error`` or ``released`` (a member a
  windowed group's recorded outcome released): a worker SIGKILLs itself in
  ``pre_send`` of such a message, once (the first worker to get there).
- ``KILL_AFTER``: ``continuation`` or ``on_error``: the same, in ``post_send``,
  once the message is on the stream (what comes after the kick never runs).
- ``BROKER``: ``list`` for taskiq-redis's ListQueueBroker on the list ``QUEUE``
  (which never redelivers) instead of the stream broker.
- ``DUPLICATE``: the task id of a message a worker kicks twice (the same
  message, as an at-least-once broker may deliver it): two copies reach workers.
"""

import asyncio
import functools
import json
import os
import signal
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from taskiq import AsyncBroker, TaskiqMessage, TaskiqMiddleware
from taskiq_redis import ListQueueBroker, RedisStreamBroker

from local_redis import DuplicatingMiddleware
from taskiq_fanin import ChainFailure, FanInMiddleware, GroupResult
from taskiq_fanin.domain.labels import CONTINUATION_LABEL
from tests.failover_tasks import CountDeliveries, Observer

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
OBS_URL = os.environ.get("OBS_URL", REDIS_URL)
PREFIX = os.environ.get("APP_PREFIX", "fault-app")
STREAM = f"{PREFIX}:stream"
QUEUE = f"{PREFIX}:queue"
IDLE_TIMEOUT_MS = int(os.environ.get("IDLE_TIMEOUT_MS", "2000"))
MEMBER_SECONDS = float(os.environ.get("MEMBER_SECONDS", "0"))
STEP_SECONDS = float(os.environ.get("STEP_SECONDS", "0"))
HANG = os.environ.get("HANG", "")
HOLD = os.environ.get("HOLD", "")
SLOW = os.environ.get("SLOW", "")
SLOW_SECONDS = float(os.environ.get("SLOW_SECONDS", "20"))
KILL_ON = os.environ.get("KILL_ON", "")
KILL_AFTER = os.environ.get("KILL_AFTER", "")
DUPLICATE = os.environ.get("DUPLICATE", "")

ON_ERROR_TASK = "fault_app.on_error"
GROUP_ON_ERROR_TASK = "fault_app.group_failed"
MEMBER_TASK = "fault_app.member"


observer = Observer(OBS_URL, PREFIX)
#: A key on the observation server; this process's client of it.
obs_key, obs = observer.key, observer.client


class Observe(CountDeliveries):
    """Counts every delivery that reaches a worker, by task name and by task id,
    and (for ``SLOW``) every delivery a worker is done with, run or skipped."""

    async def post_execute(self, message: TaskiqMessage, result: Any) -> None:
        if message.task_id == SLOW:
            await obs().hincrby(obs_key("ended_ids"), message.task_id, 1)


R = TypeVar("R")


def running(func: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R]]:
    """Counts the body as running in this process while it runs (``running``:
    pid -> bodies), so a test can wait until no copy runs in a live worker.

    The library's guard skips a body without entering it.
    """

    @functools.wraps(func)
    async def body(*args: Any, **kwargs: Any) -> R:
        await obs().hincrby(obs_key("running"), str(os.getpid()), 1)
        try:
            return await func(*args, **kwargs)
        finally:
            await obs().hincrby(obs_key("running"), str(os.getpid()), -1)

    return body


class KillSwitch(TaskiqMiddleware):
    """The worker dies (SIGKILL, no cleanup) as it is about to send the chosen
    message (``KILL_ON``), or just after it sent it (``KILL_AFTER``).

    Only in a worker process, and once: the first worker that gets there takes
    the flag on the observation server, so a redelivery runs normally. For
    ``KILL_AFTER`` the flag is taken before the send and the kill follows the
    send at once: a round trip between the two would let this worker's own
    listener read the message and begin its body first (it then ran in the
    worker that died, and ran again once its run lease ran out).
    """

    def __init__(self) -> None:
        super().__init__()
        #: The task id this worker dies right after sending, once sent.
        self._dies_after: str | None = None

    @staticmethod
    def _chosen(choice: str, message: TaskiqMessage) -> bool:
        if choice == "continuation":
            return CONTINUATION_LABEL in message.labels
        if choice == "on_error":
            return message.task_name == ON_ERROR_TASK
        if choice == "released":
            # A worker kicks a member only when an outcome released it (a
            # windowed group's): the outcome is recorded, the kick not sent.
            return message.task_name == MEMBER_TASK
        return False

    async def _takes_the_flag(self, choice: str, message: TaskiqMessage) -> bool:
        if not self.broker.is_worker_process or not self._chosen(choice, message):
            return False
        who = f"{os.getpid()} {message.task_id}"
        return bool(await obs().set(obs_key("killed"), who, nx=True))

    async def pre_send(self, message: TaskiqMessage) -> TaskiqMessage:
        if await self._takes_the_flag(KILL_ON, message):
            os.kill(os.getpid(), signal.SIGKILL)
        if await self._takes_the_flag(KILL_AFTER, message):
            self._dies_after = message.task_id
        return message

    def post_send(self, message: TaskiqMessage) -> None:
        if message.task_id == self._dies_after:
            os.kill(os.getpid(), signal.SIGKILL)  # nothing awaited before it


_broker_options: dict[str, Any] = {}
if "BROKER_SOCKET_TIMEOUT" in os.environ:
    _broker_options["socket_timeout"] = float(os.environ["BROKER_SOCKET_TIMEOUT"])

broker: AsyncBroker = (
    ListQueueBroker(REDIS_URL, queue_name=QUEUE, **_broker_options)
    if os.environ.get("BROKER") == "list"
    else RedisStreamBroker(
        REDIS_URL,
        queue_name=STREAM,
        xread_block=100,
        idle_timeout=IDLE_TIMEOUT_MS,
        **_broker_options,
    )
)


def _duplicated(message: TaskiqMessage) -> bool:
    """``DUPLICATE``, as a worker kicks it (the sweep's kicks are sent once)."""
    return bool(DUPLICATE) and message.task_id == DUPLICATE and broker.is_worker_process


broker.with_middlewares(
    Observe(observer),
    KillSwitch(),
    DuplicatingMiddleware(_duplicated),
    FanInMiddleware(
        REDIS_URL,
        prefix=PREFIX,
        finaliser_lease=float(os.environ.get("FINALISER_LEASE", "60")),
        deadline=float(os.environ.get("DEADLINE", "3600")),
        socket_timeout=float(os.environ.get("SOCKET_TIMEOUT", "5")),
        retry_for=float(os.environ.get("RETRY_FOR", "30")),
    ),
)


async def hang_if_chosen(task_id: str) -> None:
    """The first delivery of ``HANG`` says where it runs, and hangs; every one
    says it started."""
    if task_id != HANG:
        return
    await obs().hincrby(obs_key("started"), task_id, 1)
    if await obs().set(obs_key("hung"), os.getpid(), nx=True):
        await asyncio.sleep(3600)


async def slow_if_chosen(task_id: str) -> None:
    """``SLOW`` says it started, and runs until another copy of it was delivered."""
    if task_id != SLOW:
        return
    await obs().hincrby(obs_key("started"), task_id, 1)
    loop = asyncio.get_running_loop()
    until = loop.time() + SLOW_SECONDS
    while loop.time() < until:
        if int(await obs().hget(obs_key("delivered_ids"), task_id) or 0) > 1:
            return
        await asyncio.sleep(0.01)


async def hold_if_chosen(task_id: str) -> None:
    """``HOLD`` says it started, and returns once the test says ``go``."""
    if task_id != HOLD:
        return
    await obs().set(obs_key("held"), os.getpid())
    while not await obs().exists(obs_key("go")):
        await asyncio.sleep(0.01)


@broker.task(task_name=MEMBER_TASK)
async def member(group_id: str, index: int) -> int:
    """Take ``MEMBER_SECONDS``; hang or hold if chosen."""
    await hang_if_chosen(f"{group_id}~{index}")
    await hold_if_chosen(f"{group_id}~{index}")
    if MEMBER_SECONDS:
        await asyncio.sleep(MEMBER_SECONDS)
    return index


@broker.task(task_name="fault_app.publish")
@running
async def publish(result: GroupResult) -> None:
    """The continuation: says it ran to its end, and with what; hangs if chosen."""
    await hang_if_chosen(f"{result.group_id}~then")
    await slow_if_chosen(f"{result.group_id}~then")
    summary = {
        "group_id": result.group_id,
        "succeeded": len(result.succeeded),
        "failed": len(result.failed),
        "lost": len(result.lost),
        "results_in_order": result.results == result.succeeded,
    }
    await obs().rpush(obs_key("continuations"), json.dumps(summary))


@broker.task(task_name="fault_app.step")
@running
async def step(previous: int, chain_id: str, index: int) -> int:
    """A chain step: says it ran, and hands on one more than it got."""
    await hang_if_chosen(f"{chain_id}~{index}")
    await slow_if_chosen(f"{chain_id}~{index}")
    if STEP_SECONDS:
        await asyncio.sleep(STEP_SECONDS)
    await obs().hincrby(obs_key("steps"), f"{chain_id}~{index}", 1)
    return previous + 1


@broker.task(task_name="fault_app.fail_step")
@running
async def fail_step(previous: int, chain_id: str) -> None:
    """A chain step that fails for good."""
    await obs().hincrby(obs_key("steps"), f"{chain_id}~fail", 1)
    msg = f"step after {previous} failed on purpose"
    raise RuntimeError(msg)


@broker.task(task_name="fault_app.compensate")
@running
async def compensate(chain_id: str, index: int) -> None:
    """A completed step's compensation: says it ran."""
    await obs().rpush(obs_key("compensations"), f"{chain_id}~{index}")


@broker.task(task_name=ON_ERROR_TASK)
@running
async def on_error(failure: ChainFailure) -> None:
    """A chain's error continuation: says it ran, for which step; hangs if chosen."""
    await hang_if_chosen(f"{failure.chain_id}~on_error")
    await obs().rpush(obs_key("on_error"), json.dumps([failure.chain_id, failure.step]))


@broker.task(task_name="fault_app.failing_member")
async def failing_member(group_id: str, index: int) -> None:
    """A member that fails for good."""
    msg = f"member {group_id}~{index} failed on purpose"
    raise RuntimeError(msg)


@broker.task(task_name=GROUP_ON_ERROR_TASK)
@running
async def group_failed(result: GroupResult) -> None:
    """A group's error continuation: says it ran, and with how many failures;
    hangs if chosen."""
    await hang_if_chosen(f"{result.group_id}~on_error")
    await obs().rpush(
        obs_key("group_on_error"), json.dumps([result.group_id, result.failed_count])
    )


@broker.task(task_name="fault_app.nudge")
async def nudge(*_: Any) -> None:
    """Nothing: traffic, so that a read returns something and reclaims idle messages."""
