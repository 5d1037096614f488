"""``FanInMiddleware``: the one thing a taskiq user adds to their broker.

It holds the taskiq hooks and nothing else: it starts the engine when the
broker starts, and turns each hook into the engine's own event (a run
starting, a run ended: ``engine/events.py``), handed to the engine's one entry
(``engine/runs.py``) once. The public verbs (``group``, ``chain``,
``status``, ...) live in ``api``.
"""

import logging
from typing import TYPE_CHECKING, Any

from taskiq import AsyncBroker, TaskiqMessage, TaskiqMiddleware, TaskiqResult

from taskiq_fanin.context import FanInContext, peers_of, share_prefix
from taskiq_fanin.domain.config import FanInConfig, FanInOptions
from taskiq_fanin.domain.exceptions import InvalidOptionError, MiddlewareNotFoundError
from taskiq_fanin.domain.labels import MEMBER_LABEL
from taskiq_fanin.engine import guard
from taskiq_fanin.engine.events import RunStarting
from taskiq_fanin.engine.runs import Runs, register_tasks
from taskiq_fanin.storage.result_pages import ResultPageReader
from taskiq_fanin.transport.client import RedisClient
from taskiq_fanin.transport.outcome_batching import OutcomeBatching
from taskiq_fanin.worker import ending, skipping, waiting_guard
from taskiq_fanin.worker.heartbeat import Heartbeat

if TYPE_CHECKING:
    from typing_extensions import Unpack

logger = logging.getLogger("taskiq_fanin")
#: The labels of a message the engine has something to do with: a member, or a
#: body it guards and records the end of (a continuation, a chain step, ...).
_HANDLED = guard.GUARDED | {MEMBER_LABEL}


class FanInMiddleware(TaskiqMiddleware):
    """Fan-in of task groups through Redis, without any task waiting on another.

    Add it to the broker used by both the processes that plan groups and the
    workers: ``broker = broker.with_middlewares(FanInMiddleware("redis://..."))``.
    In workers it records each member's final outcome (after the retry middleware's
    last attempt) and enqueues the continuation of a completed group exactly once.
    """

    def __init__(
        self,
        redis: str | RedisClient,
        *,
        cluster: bool = False,
        outcome_batching: OutcomeBatching | None = None,
        **options: "Unpack[FanInOptions]",
    ) -> None:
        """Configure; nothing connects until the broker starts.

        :param redis: a Redis URL (``redis://``, ``rediss://``, ``unix://``,
            ``redis+sentinel://``), or a ``redis.asyncio`` client (``Redis`` or
            ``RedisCluster``) that the caller owns and closes.
        :param cluster: the URL is one node of a Redis Cluster: the client built
            from it is a ``RedisCluster``, which finds the other nodes. For a URL
            only; a client passed in is used as it is.
        :param outcome_batching: tuning of how members' outcomes share script
            calls (``OutcomeBatching``); the defaults are the measured ones.
        :param options: every other option, by name, with its default: see
            :class:`~taskiq_fanin.models.FanInConfig` and docs/options.md
            (``prefix``, ``ttl``, ``deadline``, ``finaliser_lease``,
            ``failure_policy``, ``sweep_policy``, ``durability``, ...).
            A bad one raises ``InvalidOptionError`` here.
        """
        super().__init__()
        if cluster and not isinstance(redis, str):
            raise InvalidOptionError(
                name="cluster",
                value="True",
                reason="it applies to a URL; a client passed in is used as it is",
            )
        self.config = FanInConfig.parse(options)
        self._batching = outcome_batching
        self._redis = redis
        self._cluster = cluster
        #: Where the worker's events enter the engine, once the broker started.
        self._runs: Runs | None = None
        #: A worker process's announcements of the queue it serves.
        self._heartbeat = Heartbeat()

    # -- lifecycle --------------------------------------------------------------

    def set_broker(self, broker: AsyncBroker) -> None:
        """Register the library's own tasks, which carry chains past group steps."""
        super().set_broker(broker)
        register_tasks(broker)
        share_prefix(peers_of(self.config.prefix, self._redis), broker)

    async def startup(self) -> None:
        """Connect (for a URL), check that Redis answers, build the context.

        Raises ``RedisUnreachableError`` when Redis does not answer within
        ``socket_timeout``.
        """
        if self._runs is None:
            self._runs = await Runs.start(
                self.config,
                self.broker,
                self._redis,
                cluster=self._cluster,
                batching=self._batching,
            )
            waiting_guard.install(self.broker)
            if getattr(self.broker, "is_worker_process", False):
                self._heartbeat.start(self._runs.ctx, self.broker)

    async def shutdown(self) -> None:
        """Close the connection this middleware opened (never a caller's client).

        First the ends of bodies being recorded are waited for, up to
        ``retry_for`` (and taskiq's ``--shutdown-timeout``, which bounds the
        whole shutdown): those left are recorded by their redelivery instead.
        """
        await self._heartbeat.stop()
        runs = self._runs
        if runs is None:
            return
        try:
            left = await runs.settle(self.config.retry_for)
            if left:
                logger.warning(
                    "FanInMiddleware shut down with %d run end(s) not recorded: "
                    "their messages stay unacknowledged to come back",
                    left,
                )
        finally:
            self._runs = None
            await runs.ctx.close()

    @property
    def context(self) -> FanInContext:
        """What the engines work with; the broker must have started."""
        if self._runs is None:
            raise MiddlewareNotFoundError(
                reason="FanInMiddleware is not started: await broker.startup() first"
            )
        return self._runs.ctx

    @property
    def result_pages(self) -> ResultPageReader:
        """Reads by-reference ``GroupResult`` s: ``iter_results(broker=...)``."""
        return self.context.result_pages

    # -- worker hooks -----------------------------------------------------------

    async def pre_execute(self, message: TaskiqMessage) -> TaskiqMessage:
        """Let the body run only if it may: its run lease granted, not cancelled.

        Fails closed: while Redis is away the guard is retried; if it still
        cannot be asked, this raises and the message stays unacknowledged.
        """
        skipping.reset_skip()  # never inherit a flag (brokers may run messages inline)
        ending.began(message)
        runs = self._running(message)
        if runs is not None and not await runs.starting(RunStarting(message)):
            skipping.skip_current_message(self.broker, message)
        return message

    def on_error(
        self,
        message: TaskiqMessage,
        result: TaskiqResult[Any],
        exception: BaseException,
    ) -> None:
        """Remember what the body raised: its own ``NoResultError`` is no retry's.

        ``exception`` is the body's, whether the retry middleware's hook has
        replaced ``result.error`` yet or not (``worker/ending.py``).
        """
        ending.body_raised(exception)

    async def post_execute(
        self, message: TaskiqMessage, result: TaskiqResult[Any]
    ) -> None:
        """Record a member's final outcome; carry a chain on; complete a continuation.

        An attempt the retry middleware will repeat carries a fresh
        ``NoResultError`` and records nothing: only the last attempt counts. A
        body that raised ``NoResultError`` itself succeeded with ``None``. While
        Redis is away this retries; if it still cannot record, it raises and the
        message stays unacknowledged to come back (recording is idempotent).
        """
        skipped = skipping.reset_skip()
        raised = ending.take_raised()
        runs = self._running(message)
        if runs is not None:
            await runs.ended(
                ending.ended(message, result, skipped=skipped, raised=raised)
            )

    def _running(self, message: TaskiqMessage) -> Runs | None:
        """The engine; ``None`` while stopped, for a message none of the library's.

        A message of the library's raises ``MiddlewareNotFoundError`` then, and
        stays unacknowledged to come back: when its listener fails (a read of
        the queue meeting a primary that died) taskiq shuts the broker down
        without waiting for the tasks still running, and a hook that did
        nothing would let a member be acknowledged with its outcome never
        recorded, or a guarded body run without its guard.
        """
        runs = self._runs
        if runs is None and not _HANDLED.isdisjoint(message.labels):
            error = MiddlewareNotFoundError(
                reason=(
                    f"FanInMiddleware is not running (not started, or shut down): "
                    f"task {message.task_id} is left unacknowledged to come back"
                )
            )
            logger.warning("%s", error)  # taskiq may not log a hook's error
            raise error
        return runs
