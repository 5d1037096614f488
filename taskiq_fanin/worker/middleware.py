"""``FanInMiddleware``: the one thing a taskiq user adds to their broker.

It holds the taskiq hooks and nothing else: it builds the ``FanInContext`` when
the broker starts and hands each event of a worker to the engine that owns it.
The public verbs (``group``, ``chain``, ``status``, ...) live in ``api``.
"""

from typing import Any

from taskiq import (
    AsyncBroker,
    TaskiqMessage,
    TaskiqMiddleware,
    TaskiqResult,
)

from taskiq_fanin.chains import chain_validation, launch, tasks
from taskiq_fanin.context import (
    FanInContext,
    enter_run,
    leave_run,
    new_delivery,
)
from taskiq_fanin.domain import config
from taskiq_fanin.domain.config import (
    Durability,
    Duration,
    FanInConfig,
    choice,
    seconds,
)
from taskiq_fanin.domain.exceptions import (
    InvalidOptionError,
    MiddlewareNotFoundError,
    RunningElsewhereError,
)
from taskiq_fanin.domain.labels import attempt_of
from taskiq_fanin.domain.results import FailurePolicy, SweepPolicy
from taskiq_fanin.storage.replies import Begin
from taskiq_fanin.storage.result_pages import ResultPageReader
from taskiq_fanin.transport.client import RedisClient, connect, set_up
from taskiq_fanin.transport.outcome_batching import OutcomeBatching
from taskiq_fanin.transport.retrying import retrying
from taskiq_fanin.worker import ending, guard, skipping
from taskiq_fanin.worker.leases import Held, RunLeases
from taskiq_fanin.worker.recording import Recording
from taskiq_fanin.worker.running import RunningMembers


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
        prefix: str = config.DEFAULT_PREFIX,
        ttl: Duration = config.DEFAULT_TTL_SECONDS,
        deadline: Duration = config.DEFAULT_DEADLINE_SECONDS,
        failure_policy: FailurePolicy | str = FailurePolicy.CONTINUE,
        sweep_policy: SweepPolicy | str = SweepPolicy.REPORT,
        max_redrives: int = config.DEFAULT_MAX_REDRIVES,
        max_depth: int = config.DEFAULT_MAX_DEPTH,
        finaliser_lease: Duration = config.DEFAULT_LEASE_SECONDS,
        tombstone_ttl: Duration = config.DEFAULT_TOMBSTONE_SECONDS,
        max_group_size: int = config.DEFAULT_MAX_GROUP_SIZE,
        max_result_bytes: int = config.DEFAULT_MAX_RESULT_BYTES,
        results_inline_max: int = config.DEFAULT_RESULTS_INLINE_MAX,
        max_member_bytes: int = config.DEFAULT_MAX_MEMBER_BYTES,
        dispatch_concurrency: int = config.DEFAULT_DISPATCH_CONCURRENCY,
        max_connections: int = config.DEFAULT_MAX_CONNECTIONS,
        socket_timeout: Duration = config.DEFAULT_SOCKET_TIMEOUT,
        retry_for: Duration = config.DEFAULT_RETRY_FOR,
        durability: Durability | str = Durability.ACKNOWLEDGED,
        replicas: int = config.DEFAULT_REPLICAS,
        replication_timeout: Duration = config.DEFAULT_REPLICATION_TIMEOUT,
        outcome_batching: OutcomeBatching | None = None,
    ) -> None:
        """Configure; nothing connects until the broker starts.

        Durations are seconds, or a ``timedelta``.

        :param redis: a Redis URL, or a ``redis.asyncio`` client (``Redis`` or
            ``RedisCluster``) that the caller owns and closes.
        :param cluster: the URL is one node of a Redis Cluster: the client built
            from it is a ``RedisCluster``, which finds the other nodes. For a URL
            only; a client passed in is used as it is.
        :param prefix: first part of every key the library writes.
        :param ttl: seconds every key of a group lives, finished or not.
        :param deadline: seconds after which a still-open group counts as stuck.
        :param failure_policy: default for groups: ``continue`` runs the
            continuation with the failures in its ``GroupResult``; ``fail`` runs
            the error continuation instead when any member failed.
        :param sweep_policy: default for groups: what the sweep does with one
            still open past its deadline (``report``, ``redrive``, ``give_up``).
        :param max_redrives: how many times the sweep may re-drive one group's
            members, dispatch its overdue continuation again, kick a chain's
            step or its lost ``on_error`` again (each counted on its own).
        :param max_depth: how deep groups and chains may nest in each other; a
            deeper one fails with ``NestingTooDeepError`` and spawns nothing.
        :param finaliser_lease: seconds the finalising member has to enqueue the
            continuation before a sweep may do it instead.
        :param tombstone_ttl: seconds a completed group's meta is kept so late
            duplicates change nothing.
        :param max_group_size: the widest group one call may plan.
        :param max_result_bytes: member results larger than this (as JSON) are not
            kept (the member still counts); error messages are cut to this size.
        :param results_inline_max: default for groups: a group of more members
            hands its continuation a ``GroupResult`` by reference (counts only;
            ``iter_results()`` and ``iter_failures()`` read it in pages).
        :param max_member_bytes: a member whose arguments (as JSON, in the
            ledger) are larger is refused before anything is written.
        :param dispatch_concurrency: member kicks a planner keeps in flight.
        :param max_connections: connections the client built from a URL opens
            at most; more callers wait for one (``transport/client.py``).
        :param socket_timeout: seconds a command may take before Redis counts
            as away (the client built from a URL).
        :param retry_for: seconds a worker's hook retries while Redis is away
            before it leaves its message unacknowledged, to come back.
        :param durability: ``acknowledged`` (a write is done once the primary
            took it) or ``replicated``: each write of an outcome, a claim, a
            chain's advance or a plan is followed in its round trip by ``WAIT``
            for ``replicas`` replicas, ``replication_timeout`` seconds at most;
            fewer, and it is not done (retried, then left unacknowledged).
        :param outcome_batching: tuning of how members' outcomes share script
            calls (``OutcomeBatching``); the defaults are the measured ones.
        """
        super().__init__()
        if cluster and not isinstance(redis, str):
            raise InvalidOptionError(
                name="cluster",
                value="True",
                reason="it applies to a URL; a client passed in is used as it is",
            )
        self.config = FanInConfig(
            prefix=prefix,
            ttl=seconds("ttl", ttl),
            deadline=seconds("deadline", deadline),
            lease=seconds("finaliser_lease", finaliser_lease),
            tombstone_ttl=seconds("tombstone_ttl", tombstone_ttl),
            max_group_size=max_group_size,
            max_result_bytes=max_result_bytes,
            results_inline_max=results_inline_max,
            dispatch_concurrency=dispatch_concurrency,
            failure_policy=choice("failure_policy", FailurePolicy, failure_policy),
            sweep_policy=choice("sweep_policy", SweepPolicy, sweep_policy),
            max_redrives=max_redrives,
            max_depth=max_depth,
            max_member_bytes=max_member_bytes,
            max_connections=max_connections,
            socket_timeout=seconds("socket_timeout", socket_timeout),
            retry_for=seconds("retry_for", retry_for),
            durability=choice("durability", Durability, durability),
            replicas=replicas,
            replication_timeout=seconds("replication_timeout", replication_timeout),
        )
        self._batching = outcome_batching
        self._url = redis if isinstance(redis, str) else None
        self._cluster = cluster
        self._client: RedisClient | None = None if isinstance(redis, str) else redis
        self._context: FanInContext | None = None
        #: The members running here, for the outcome batcher (with the context).
        self._running: RunningMembers | None = None
        #: The run leases of the bodies running here, renewed while they run.
        self._leases = RunLeases()

    # -- lifecycle --------------------------------------------------------------

    def set_broker(self, broker: AsyncBroker) -> None:
        """Register the library's own tasks, which carry chains past group steps."""
        super().set_broker(broker)
        tasks.register(broker)

    async def startup(self) -> None:
        """Connect (for a URL), register the scripts and build the context."""
        if self._url is not None and self._client is None:
            self._client = connect(
                self._url,
                max_connections=self.config.max_connections,
                socket_timeout=self.config.socket_timeout,
                cluster=self._cluster,
            )
        if self._client is not None and self._context is None:
            await set_up(self._client)
            self._context = FanInContext.create(
                self.config,
                self.broker,
                self._client,
                start_chain=launch.start_member,
                check_chain=chain_validation.validate_chain,
                batching=self._batching,
            )
            self._running = RunningMembers(
                self._context.outcomes, prefix=self.config.prefix
            )

    async def shutdown(self) -> None:
        """Close the connection this middleware opened (never a caller's client)."""
        if self._url is not None and self._client is not None:
            await self._client.aclose()
            self._client = None
        self._context = None
        self._running = None

    @property
    def context(self) -> FanInContext:
        """What the engines work with; the broker must have started."""
        if self._context is None:
            raise MiddlewareNotFoundError(
                reason="FanInMiddleware is not started: await broker.startup() first"
            )
        return self._context

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
        ctx, running = self._context, self._running
        if ctx is None or running is None:
            return message
        ending.began(message)
        enter_run(ctx, message)
        running.started(message)
        if not guard.applies(message.labels):
            return message
        delivery = new_delivery()
        try:
            verdict = await retrying(
                lambda: guard.may_run(ctx, message, delivery=delivery),
                retry_for=ctx.config.retry_for,
                what=("the run guard of task", message.task_id),
            )
            if verdict.begun is Begin.RUNNING_ELSEWHERE:
                raise RunningElsewhereError(task_id=message.task_id)
        except BaseException:  # not run: nothing of it is left running here
            leave_run()
            running.ended(message)
            raise
        if verdict.begun is Begin.SKIP:
            skipping.skip_current_message(self.broker, message)
        elif verdict.leases:
            held = Held(delivery, attempt_of(message.labels))
            every = ctx.config.lease / 3
            self._leases.keep(message, verdict.leases, every=every, held=held)
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
        leave_run()
        skipped = skipping.reset_skip()
        raised = ending.take_raised()
        began_as = self._leases.end(message)  # what the guard began it as
        ctx, running = self._context, self._running
        if ctx is None or running is None:
            return
        member = running.finishing(message)
        if member is None and not Recording.applies(message.labels):
            return  # a plain task: nothing to record
        ended, counted = ending.ended(message, result, skipped=skipped, raised=raised)
        recording = Recording(
            ctx, message, counted, member, ending=ended, began_as=began_as
        )
        try:
            await retrying(
                recording.run,
                retry_for=ctx.config.retry_for,
                what=("recording the outcome of task", message.task_id),
            )
        finally:
            running.ended(message)
