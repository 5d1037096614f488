"""The engine's one entry: a run starts, a run ends (``events.py``).

One :class:`Runs` per started middleware. A start tells the group engine that
a member runs here (its outcome's call waits for it, ``groups/running.py``),
asks the run guard whether the body may run (retried while Redis is away;
failing closed) and keeps the leases of a body that does. An end records what
the run leaves to record (``ended_runs.py``), each part once, retried while
Redis is away, then raised so that the message stays unacknowledged and comes
back.
"""

import asyncio

from taskiq import AsyncBroker

from taskiq_fanin.chains import chain_validation, launch, saga, tasks
from taskiq_fanin.context import FanInContext, enter_run, leave_run, new_delivery
from taskiq_fanin.domain.config import FanInConfig
from taskiq_fanin.domain.exceptions import RunningElsewhereError
from taskiq_fanin.domain.labels import attempt_of
from taskiq_fanin.engine import guard
from taskiq_fanin.engine.ended_runs import EndedRun
from taskiq_fanin.engine.events import RunEnded, RunStarting
from taskiq_fanin.engine.leases import Held, RunLeases
from taskiq_fanin.groups.running import RunningMembers
from taskiq_fanin.storage.replies import Begin
from taskiq_fanin.transport.client import RedisClient
from taskiq_fanin.transport.outcome_batching import OutcomeBatching
from taskiq_fanin.transport.retrying import retrying


def register_tasks(broker: AsyncBroker) -> None:
    """The library's own tasks (which carry chains past group steps), on ``broker``."""
    tasks.register(broker)


class Runs:
    """The runs of one started middleware's worker: where its events enter."""

    @classmethod
    async def start(
        cls,
        config: FanInConfig,
        broker: AsyncBroker | None,
        redis: str | RedisClient,
        *,
        cluster: bool = False,
        batching: OutcomeBatching | None = None,
    ) -> "Runs":
        """The engine of a broker that starts: its context opened on ``redis``.

        Raises ``RedisUnreachableError`` when Redis does not answer.
        """
        ctx = await FanInContext.open(
            config,
            broker,
            redis,
            cluster=cluster,
            start_chain=launch.start_member,
            check_chain=chain_validation.validate_chain,
            cancel_chain=saga.cancel,
            batching=batching,
        )
        return cls(ctx)

    def __init__(self, ctx: FanInContext) -> None:
        self.ctx = ctx
        #: The members running here, for the outcome batcher.
        self._running = RunningMembers(ctx.outcomes, prefix=ctx.config.prefix)
        #: The run leases of the bodies running here, renewed while they run.
        self._leases = RunLeases()
        #: Runs whose body ended and whose end is being recorded (``settle``).
        self._recording = 0
        self._settled = asyncio.Event()
        self._settled.set()

    async def starting(self, event: RunStarting) -> bool:
        """Whether the body may run (``False``: skip it: done, or cancelled).

        Raises ``RunningElsewhereError`` when another copy holds its run lease:
        this one stays unacknowledged, to come back should that copy's worker
        die. While Redis is away the guard is retried; if it still cannot be
        asked, this raises and the message stays unacknowledged.
        """
        ctx, message = self.ctx, event.message
        enter_run(ctx, message)
        self._running.started(message)
        if not guard.applies(message.labels):
            return True
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
            self._running.ended(message)
            raise
        if verdict.begun is Begin.SKIP:
            return False
        if verdict.leases:
            held = Held(delivery, attempt_of(message.labels))
            every = ctx.config.finaliser_lease / 3
            self._leases.keep(message, verdict.leases, every=every, held=held)
        return True

    async def ended(self, event: RunEnded) -> None:
        """Record what the run leaves to record: each part once, however retried.

        An attempt the retry middleware will repeat records nothing but the
        release of its leases: only the last attempt counts. While Redis is
        away this retries; if it still cannot record, it raises and the message
        stays unacknowledged to come back (recording is idempotent).
        """
        message = event.message
        leave_run()
        began_as = self._leases.end(message)  # what the guard began it as
        member = self._running.finishing(message)
        if member is None and not EndedRun.applies(message.labels):
            return  # a plain task: nothing to record
        ended = EndedRun(self.ctx, event, member, began_as=began_as)
        self._recording += 1
        self._settled.clear()
        try:
            await retrying(
                ended.record,
                retry_for=self.ctx.config.retry_for,
                what=("recording the outcome of task", message.task_id),
            )
        finally:
            self._running.ended(message)
            self._recording -= 1
            if not self._recording:
                self._settled.set()

    @property
    def recording(self) -> int:
        """How many runs here are recording their end right now."""
        return self._recording

    async def settle(self, timeout: float) -> int:
        """Wait, at most ``timeout`` seconds, for the ends being recorded.

        taskiq shuts the broker down without waiting for the tasks still
        running when its listener fails (a read of the queue meeting a primary
        that died): a body that has ended is left its recording (retried while
        Redis is away), rather than cut off to run again. Bodies still running
        are not waited for. Returns how many were still recording.
        """
        if self._recording:
            waiting = asyncio.ensure_future(self._settled.wait())
            try:
                # Not wait_for: on Python < 3.12 it can swallow a cancel.
                await asyncio.wait({waiting}, timeout=timeout)
            finally:
                waiting.cancel()
        return self._recording
