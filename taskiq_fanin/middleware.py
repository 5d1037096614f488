"""``FanInMiddleware``: the one thing a taskiq user adds to their broker."""

import logging
from collections.abc import Iterable
from typing import Any

from redis.asyncio import Redis
from taskiq import (
    AsyncBroker,
    NoResultError,
    TaskiqMessage,
    TaskiqMiddleware,
    TaskiqResult,
)

from taskiq_fanin import chains, completion, guard
from taskiq_fanin.chain_record import ChainRecord, ChainStatus
from taskiq_fanin.chain_spec import Chain, ChainCursor
from taskiq_fanin.config import (
    DEFAULT_DEADLINE_SECONDS,
    DEFAULT_DISPATCH_CONCURRENCY,
    DEFAULT_LEASE_SECONDS,
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_GROUP_SIZE,
    DEFAULT_MAX_REDRIVES,
    DEFAULT_MAX_RESULT_BYTES,
    DEFAULT_PREFIX,
    DEFAULT_TOMBSTONE_SECONDS,
    DEFAULT_TTL_SECONDS,
    FanInConfig,
    choice,
)
from taskiq_fanin.dispatch import kicking_broker
from taskiq_fanin.errors import MiddlewareNotFoundError
from taskiq_fanin.inspection import status_from_meta
from taskiq_fanin.keys import (
    LONGEST_DERIVED_ID,
    ChainKeys,
    GroupKeys,
    validate_group_id,
)
from taskiq_fanin.labels import (
    CANCELLABLE_LABEL,
    ContinuationRef,
    MemberRef,
    attempt_of,
)
from taskiq_fanin.models import FailurePolicy, GroupStatus, SweepPolicy
from taskiq_fanin.planning import GroupHandle, plan_group, validate_plan
from taskiq_fanin.running import RunningMembers
from taskiq_fanin.scripts import RedisClient, Scripts, text
from taskiq_fanin.signature import Signature, TaskRef

logger = logging.getLogger("taskiq_fanin")


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
        prefix: str = DEFAULT_PREFIX,
        ttl: float = DEFAULT_TTL_SECONDS,
        deadline: float = DEFAULT_DEADLINE_SECONDS,
        failure_policy: FailurePolicy | str = FailurePolicy.CONTINUE,
        sweep_policy: SweepPolicy | str = SweepPolicy.REPORT,
        max_redrives: int = DEFAULT_MAX_REDRIVES,
        max_depth: int = DEFAULT_MAX_DEPTH,
        finaliser_lease: float = DEFAULT_LEASE_SECONDS,
        tombstone_ttl: float = DEFAULT_TOMBSTONE_SECONDS,
        max_group_size: int = DEFAULT_MAX_GROUP_SIZE,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
        dispatch_concurrency: int = DEFAULT_DISPATCH_CONCURRENCY,
    ) -> None:
        """Configure; nothing connects until the broker starts.

        :param redis: a Redis URL, or a ``redis.asyncio`` client (``Redis`` or
            ``RedisCluster``) that the caller owns and closes.
        :param prefix: first part of every key the library writes.
        :param ttl: seconds every key of a group lives, finished or not.
        :param deadline: seconds after which a still-open group counts as stuck.
        :param failure_policy: default for groups: ``continue`` runs the
            continuation with the failures in its ``GroupResult``; ``fail`` runs
            the error continuation instead when any member failed.
        :param sweep_policy: default for groups: what the sweep does with one
            still open past its deadline (``report``, ``redrive``, ``give_up``).
        :param max_redrives: how many times the sweep may re-drive one group.
        :param max_depth: how deep groups and chains may nest in each other; a
            deeper one fails with ``NestingTooDeepError`` and spawns nothing.
        :param finaliser_lease: seconds the finalising member has to enqueue the
            continuation before a sweep may do it instead.
        :param tombstone_ttl: seconds a completed group's meta is kept so late
            duplicates change nothing.
        :param max_group_size: the widest group one call may plan.
        :param max_result_bytes: member results larger than this (as JSON) are not
            kept (the member still counts); error messages are cut to this size.
        :param dispatch_concurrency: member kicks a planner keeps in flight.
        """
        super().__init__()
        self.config = FanInConfig(
            prefix=prefix,
            ttl=ttl,
            deadline=deadline,
            lease=finaliser_lease,
            tombstone_ttl=tombstone_ttl,
            max_group_size=max_group_size,
            max_result_bytes=max_result_bytes,
            dispatch_concurrency=dispatch_concurrency,
            failure_policy=choice("failure_policy", FailurePolicy, failure_policy),
            sweep_policy=choice("sweep_policy", SweepPolicy, sweep_policy),
            max_redrives=max_redrives,
            max_depth=max_depth,
        )
        self._url = redis if isinstance(redis, str) else None
        self._redis: RedisClient | None = None if isinstance(redis, str) else redis
        self._scripts: Scripts | None = None
        self._chain_record: ChainRecord | None = None
        self._kicking_broker: AsyncBroker | None = None
        #: Members running in this worker, for the outcome batcher.
        self._running = RunningMembers()

    # -- lifecycle --------------------------------------------------------------

    def set_broker(self, broker: AsyncBroker) -> None:
        """Register the library's own tasks, which carry chains past group steps."""
        super().set_broker(broker)
        for name, func in (
            (chains.CONTINUE_TASK_NAME, chains.continue_chain),
            (chains.FAIL_TASK_NAME, chains.fail_chain),
        ):
            if broker.find_task(name) is None:
                broker.register_task(func, task_name=name)

    async def startup(self) -> None:
        """Connect (for a URL) and register the Lua scripts."""
        if self._url is not None and self._redis is None:
            self._redis = Redis.from_url(self._url)
        if self._redis is not None and self._scripts is None:
            self._scripts = Scripts(self._redis)
            self._chain_record = ChainRecord(self._redis)

    async def shutdown(self) -> None:
        """Close the connection this middleware opened (never a caller's client)."""
        if self._url is not None and self._redis is not None:
            await self._redis.aclose()
            self._redis = None
            self._scripts = None
            self._chain_record = None
        self._kicking_broker = None

    @property
    def redis(self) -> RedisClient:
        """The Redis client; the broker must have started."""
        if self._redis is None:
            raise MiddlewareNotFoundError(
                reason="FanInMiddleware is not started: await broker.startup() first"
            )
        return self._redis

    @property
    def kicking_broker(self) -> AsyncBroker:
        """What the library kicks members and continuations through (``dispatch``)."""
        if self._kicking_broker is None:
            self._kicking_broker = kicking_broker(self.broker)
        return self._kicking_broker

    @property
    def scripts(self) -> Scripts:
        """The group scripts; the broker must have started."""
        if self._scripts is None:
            self._scripts = Scripts(self.redis)
        return self._scripts

    @property
    def chain_record(self) -> ChainRecord:
        """The chain scripts; the broker must have started."""
        if self._chain_record is None:
            self._chain_record = ChainRecord(self.redis)
        return self._chain_record

    # -- public API ---------------------------------------------------------------

    async def group(
        self,
        members: Iterable["Signature | Chain"],
        *,
        then: TaskRef | Signature | None = None,
        on_error: TaskRef | Signature | None = None,
        group_id: str | None = None,
        failure_policy: FailurePolicy | str | None = None,
        sweep_policy: SweepPolicy | str | None = None,
        ttl: float | None = None,
        deadline: float | None = None,
        cancellable: bool = False,
        depth: int = 1,
    ) -> GroupHandle:
        """Plan a group and dispatch its members; returns at once.

        ``then`` receives a ``GroupResult`` as its first argument when every member
        has an outcome. With ``failure_policy="fail"``, ``on_error`` receives it
        instead when any member failed. ``sweep_policy`` says what the sweep does
        if the group is still open past its deadline. Planning twice with the same
        ``group_id`` dispatches once. Members may be chains. ``depth`` is the
        nesting level (the library sets it for groups inside chains). Bad input
        raises a ``FanInError`` before anything is written.
        """
        plan = validate_plan(
            self,
            members,
            then=then,
            on_error=on_error,
            group_id=group_id,
            failure_policy=failure_policy,
            sweep_policy=sweep_policy,
            ttl=ttl,
            deadline=deadline,
            depth=depth,
            cancellable=cancellable,
        )
        return await plan_group(self, plan)

    async def status(self, group_id: str) -> GroupStatus:
        """Counts, state and times of a group, read from its own keys."""
        keys = GroupKeys(
            self.config.prefix, validate_group_id(group_id, longest=LONGEST_DERIVED_ID)
        )
        raw = await self.redis.hgetall(keys.meta)
        return status_from_meta(group_id, {text(k): text(v) for k, v in raw.items()})

    async def chain_status(self, chain_id: str) -> ChainStatus:
        """Current step, state, times and error of a chain, from its record."""
        keys = ChainKeys(
            self.config.prefix, validate_group_id(chain_id, longest=LONGEST_DERIVED_ID)
        )
        return await self.chain_record.status(keys)

    async def cancel(self, workflow_id: str) -> bool:
        """Cancel a chain or a group by id; False if it is not running.

        A cancelled chain runs no further step (a step about to start sees the
        flag) and the compensations of its completed steps run. A cancelled group
        runs no continuation; members already enqueued still run, unless the group
        was planned with ``cancellable=True``, whose members check the flag first.
        """
        if await chains.cancel(self, workflow_id):
            return True
        return await completion.cancel_group(self, workflow_id)

    # -- worker hooks ---------------------------------------------------------------

    async def pre_execute(self, message: TaskiqMessage) -> TaskiqMessage:
        """Remember the message; skip what must not run (already ran, cancelled)."""
        guard.current.set((self, message))
        guard.reset_skip()  # never inherit a flag (brokers may run messages inline)
        self._running.start(message, self._scripts, self.config.prefix)
        try:
            if not await self._may_run(message):
                guard.skip_current_message(self.broker, message)
        except Exception:
            logger.exception("Task %s: the run guard failed", message.task_id)
        return message

    async def _may_run(self, message: TaskiqMessage) -> bool:
        continuation = ContinuationRef.from_labels(message.labels)
        if continuation is not None and not await completion.may_run_continuation(
            self, continuation, attempt=attempt_of(message.labels)
        ):
            logger.info(
                "Group %s: continuation ran or is running; skipped",
                continuation.group_id,
            )
            return False
        cursor = ChainCursor.from_labels(message.labels)
        if cursor is not None and not await chains.step_may_run(self, cursor):
            logger.info("Chain %s: step %d skipped", cursor.id, cursor.index)
            await chains.skipped(self, cursor, continuation=continuation is not None)
            return False
        if CANCELLABLE_LABEL not in message.labels:
            return True
        member = MemberRef.from_labels(message.labels)
        if member is not None and await completion.is_cancelled(self, member):
            logger.info("Group %s: cancelled; member skipped", member.group_id)
            return False
        return True

    async def post_execute(
        self, message: TaskiqMessage, result: TaskiqResult[Any]
    ) -> None:
        """Record a member's final outcome; complete a continuation.

        An attempt the retry middleware will repeat carries ``NoResultError`` and
        records nothing: only the last attempt counts.
        """
        guard.current.set(None)
        skipped = guard.reset_skip()
        member = self._running.finishing(message)
        try:
            await self._record(message, result, member, skipped=skipped)
        finally:
            self._running.end(message)

    async def _record(
        self,
        message: TaskiqMessage,
        result: TaskiqResult[Any],
        member: MemberRef | None,
        *,
        skipped: bool,
    ) -> None:
        """What ``post_execute`` records for a member, a chain step, a continuation."""
        continuation = ContinuationRef.from_labels(message.labels)
        if isinstance(result.error, NoResultError):
            if continuation is not None and not skipped:
                # Its retry is on the way (it takes the lease over if it starts
                # first); a redelivery of this attempt may run once it is released.
                await self._release(continuation, attempt_of(message.labels))
            return
        cursor = ChainCursor.from_labels(message.labels)
        try:
            if member is not None:
                await completion.record_member(self, member, result)
            # A chain is carried on before the group whose continuation this step
            # is completes: a crash in between leaves it to be redelivered.
            if cursor is not None:
                await chains.step_finished(self, cursor, result)
            if continuation is not None:
                await completion.complete_continuation(self, continuation)
        except Exception:
            # taskiq would swallow it anyway; the sweep recovers what was not recorded.
            logger.exception("Recording the outcome of task %s failed", message.task_id)

    async def _release(self, continuation: ContinuationRef, attempt: int) -> None:
        try:
            await completion.release_continuation(self, continuation, attempt=attempt)
        except Exception:
            logger.exception(
                "Group %s: releasing the run lease failed", continuation.group_id
            )


def find_fanin(broker: Any) -> FanInMiddleware:
    """The broker's ``FanInMiddleware``, with a clear error when there is none."""
    for middleware in getattr(broker, "middlewares", ()):
        if isinstance(middleware, FanInMiddleware):
            return middleware
    raise MiddlewareNotFoundError(
        reason="the broker has no FanInMiddleware: "
        "broker.with_middlewares(FanInMiddleware(...))"
    )
