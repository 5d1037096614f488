"""Outcomes of one group's members finishing together go as one script call.

redis-py spends 60-230 us of CPU on each script call, so one ``recordOutcome``
call for several members of a busy group costs far less than one each. A call
of a busy group waits a little for more, but only for members running in this
worker (the worker says which: :meth:`OutcomeBatcher.member_running`, and
``groups/running.py`` keeps the registry) and only while more can come: it goes
once every one of them has joined it and no other starts within a few loop
turns, at once when no slot is free (the worker runs as many members as it ever
did), at once when it holds as many members as its group's last call left
without an outcome, and at the next loop turn when its group is not busy. The
script takes a call's members in order, each as if recorded alone.

A call that completes its group is on the way to a continuation: it goes at
once, from its last caller (not turns later through the pipeline's sender),
when the group's last call said it holds every member still without an outcome.
The caller whose code is urgent (the claimant, who kicks the continuation)
hears first; the call's other members are held until the claimant says it is
done (:meth:`OutcomeBatcher.claim_handled`) or a short while has passed: their
acknowledgements, results and next reads would otherwise share the loop and the
connection with the continuation's kick. Every tuning constant is a field of
:class:`OutcomeBatching`. It only batches: what a member is, and what its
outcome, the layers above it know.
"""

import asyncio
import contextvars
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.commands.core import AsyncScript

from taskiq_fanin.transport.hand_over import Handed, hand, split, trickle
from taskiq_fanin.transport.pipeline import PipelineBatcher, fail_all, loaded

#: One group's calls: its keys, then its token (members of one token share calls).
GroupCallKey = tuple[Any, ...]


def group_call_key(keys: Sequence[Any], token: str) -> GroupCallKey:
    """What the calls of one group's members are batched by."""
    return (*keys, token)


@dataclass(frozen=True)
class OutcomeBatching:
    """Tuning of the outcome batching; the defaults are the measured ones."""

    #: The longest an outcome waits for more of its group (seconds): a busy
    #: worker finishes a member or two per millisecond.
    gather_seconds: float = 0.004
    #: An outcome waits only if its group had at least this many members without
    #: an outcome at its last call from this worker (a few are not worth a slot) ...
    company: int = 8
    #: ... and that call went less than this long ago (seconds): a group whose
    #: members finish seldom gains nothing from waiting.
    recent_seconds: float = 0.02
    #: Once every member of its group running here has joined a waiting call, the
    #: loop turns the call gives the worker to start another before it goes.
    settle_turns: int = 10
    #: Groups whose last call is remembered.
    remembered_groups: int = 1024
    #: The longest the other members of a call that completed its group wait
    #: for its claimant to kick the continuation (seconds); measured: a
    #: claimant's finalise takes 1-3 ms on a busy worker.
    hold_seconds: float = 0.01
    #: Completions between two looks (by the worker's registry of members
    #: running here) for members whose task ended unreported (taskiq skips
    #: ``post_execute`` when something before it fails).
    orphan_check_every: int = 256


@dataclass
class OutcomeStats:
    """What was sent: script calls, and the member outcomes they carried."""

    calls: int = 0
    members: int = 0


@dataclass
class _GroupCall:
    """The members of one group waiting to go as one script call."""

    keys: Sequence[Any]
    token: str
    head: Sequence[Any]
    members: list[tuple[Sequence[Any], "asyncio.Future[tuple[Any, Any, Any]]"]] = field(
        default_factory=list
    )
    #: The call waits for more members (its group is busy here) ...
    waiting: bool = False
    #: ... until this is done: nobody else can join, or nobody comes.
    complete: "asyncio.Future[None]" = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    #: Members of the group that started here while this call was open.
    arrivals: int = 0
    #: Loop turns are being counted to see whether another member starts.
    settling: bool = False


class OutcomeBatcher:
    """Records member outcomes, one ``recordOutcome`` call per group at a time."""

    def __init__(
        self,
        pipeline: PipelineBatcher,
        script: AsyncScript,
        *,
        tuning: OutcomeBatching | None = None,
        urgent: Collection[int] = (),
    ) -> None:
        """``urgent``: codes whose callers hear first (a claimant, who kicks)."""
        self._script = script
        self._urgent = frozenset(urgent)
        self._pipeline = pipeline
        self.tuning = tuning or OutcomeBatching()
        self.stats = OutcomeStats()
        self._open: dict[GroupCallKey, _GroupCall] = {}
        #: Per group: members running here that have not joined a call yet.
        self._unjoined: dict[GroupCallKey, set[int]] = {}
        #: Per group: members without an outcome after its last call, and when.
        self._last_call: dict[GroupCallKey, tuple[int, float]] = {}
        #: A member started while a call was open: more than one slot here.
        self._spare_slots = False
        #: Members running here, and the most there ever were at once.
        self._members_here = 0
        self._most_here = 0
        #: Settling callbacks need no context of their own (copying one costs).
        self._settle_context = contextvars.Context()
        #: Per group: the other members of the call its claimant is finalising.
        self._held: dict[GroupCallKey, tuple[list[Handed], Any]] = {}
        self._sending: set[asyncio.Task[None]] = set()  # the loop keeps weak refs

    # -- which members run here (the worker says) ---------------------------

    @property
    def running(self) -> int:
        """How many members run in this worker now, as the worker said."""
        return self._members_here

    def member_running(self, group: GroupCallKey, index: int) -> None:
        """Member ``index`` of ``group`` runs here: a call of its group waits for it.

        Each start is ended once by :meth:`member_gone`.
        """
        self._unjoined.setdefault(group, set()).add(index)
        self._members_here += 1
        self._most_here = max(self._most_here, self._members_here)
        if self._open:
            self._spare_slots = True
        call = self._open.get(group)
        if call is not None:
            call.arrivals += 1

    def member_gone(self, group: GroupCallKey, index: int) -> None:
        """Member ``index`` of ``group`` is done here, recorded or not."""
        self._members_here -= 1
        self._joined(group, index)
        call = self._open.get(group)
        if call is not None:
            self._note_joined(group, call)

    # -- recording ----------------------------------------------------------

    async def record(
        self,
        keys: Sequence[Any],
        token: str,
        head: Sequence[Any],
        member: Sequence[Any],
    ) -> tuple[Any, Any, Any]:
        """Record one member: its code, the call's shared reply and its own part.

        Its own part: its entry of the script's fourth field (``None`` without).

        ``head`` (the script's arguments after the token) is taken from the
        first member of a call: a worker passes the same for every member.
        """
        key = group_call_key(keys, token)
        call = self._open.get(key)
        reply: asyncio.Future[tuple[Any, Any, Any]] = (
            asyncio.get_running_loop().create_future()
        )
        if call is None:
            call = self._open[key] = _GroupCall(keys, token, head)
            task = asyncio.get_running_loop().create_task(self._send(key, call))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)
        call.members.append((member, reply))
        self._joined(key, int(member[0]))
        self._note_joined(key, call)
        return await reply

    def _joined(self, key: GroupCallKey, index: int) -> None:
        # Nobody waits for this member any more: it is in a call, or done.
        unjoined = self._unjoined.get(key)
        if unjoined is not None:
            unjoined.discard(index)
            if not unjoined:
                del self._unjoined[key]

    def _note_joined(self, key: GroupCallKey, call: _GroupCall) -> None:
        """Complete a waiting call that nobody else can join (or start settling)."""
        if not call.waiting or call.complete.done():
            return
        if self._holds_the_rest(key, call):
            _finish(call.complete)  # every member still without an outcome is in it
            return
        if call.settling:
            return
        if key in self._unjoined:
            return  # a member of the group runs here and will join
        if not self._spare_slots or self._members_here >= self._most_here:
            # The call holds the worker's only slot, or as many members are
            # here as ever ran at once: no slot is free for another to start.
            _finish(call.complete)
            return
        call.settling = True
        self._settle(key, call, call.arrivals, self.tuning.settle_turns)

    def _settle(
        self, key: GroupCallKey, call: _GroupCall, arrivals: int, turns: int
    ) -> None:
        """Count loop turns (cheap callbacks, not task steps) for a new member."""
        if call.complete.done() or self._open.get(key) is not call:
            return
        if key in self._unjoined:
            call.settling = False  # one started and runs: its join settles again
            return
        if call.arrivals != arrivals:  # one joined already: count afresh
            arrivals, turns = call.arrivals, self.tuning.settle_turns
        elif turns == 0:
            _finish(call.complete)  # the worker started no other member: none comes
            return
        asyncio.get_running_loop().call_soon(
            self._settle, key, call, arrivals, turns - 1, context=self._settle_context
        )

    async def _send(self, key: GroupCallKey, call: _GroupCall) -> None:
        try:
            if self._worth_waiting(key):
                call.waiting = True
                self._note_joined(key, call)
                if not call.complete.done():
                    # A timer and a bare future: a fraction of wait_for's cost.
                    timer = asyncio.get_running_loop().call_later(
                        self.tuning.gather_seconds, _finish, call.complete
                    )
                    try:
                        await call.complete
                    finally:
                        timer.cancel()
            codes, shared, outstanding, *own = await self._call_script(key, call)
            self._remember(key, int(outstanding))
            # A fourth field, when the script sends one, is per member.
            each = own[0] if own else [None] * len(codes)
            first, rest = split(call.members, codes, each, urgent=self._urgent)
            if first:
                hand(first, shared)
                self._hold(key, rest, shared)
            else:
                hand(rest, shared)
        except BaseException as exc:
            fail_all(call.members, exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            # Sent or not, nobody may join this call any more.
            if self._open.get(key) is call:
                del self._open[key]

    def _hold(self, key: GroupCallKey, rest: list[Handed], shared: Any) -> None:
        """Hold ``rest`` until the claimant is done, or ``hold_seconds`` passed."""
        if not rest:
            return
        self._release(key)  # a call of the group's before (a claim taken again)
        self._held[key] = (rest, shared)
        asyncio.get_running_loop().call_later(
            self.tuning.hold_seconds,
            self._release,
            key,
            rest,
            context=self._settle_context,
        )

    def _release(self, key: GroupCallKey, only: list[Handed] | None = None) -> None:
        """The held members of ``key``'s group hear (``only``: if those are held)."""
        held = self._held.get(key)
        if held is None or (only is not None and held[0] is not only):
            return
        del self._held[key]
        trickle(*held)

    def claim_handled(self, keys: Sequence[Any], token: str) -> None:
        """The claimant of the group is done: the other members of its call hear.

        Said whether its finalise succeeded or raised; a claimant that never says
        it (a task cancelled) holds them ``hold_seconds`` at most.
        """
        self._release(group_call_key(keys, token))

    async def _call_script(self, key: GroupCallKey, call: _GroupCall) -> Any:
        def add(pipe: Any) -> None:
            # From now on this call is closed: later members start the next one.
            if self._open.get(key) is call:
                del self._open[key]
            self.stats.calls += 1
            self.stats.members += len(call.members)
            pipe.execute_command("EVALSHA", self._script.sha, *self._arguments(call))

        tries = 0

        async def send() -> Any:
            nonlocal tries
            if tries:  # after a load, through the pipeline again (WAIT),
                self.stats.calls -= 1  # as the same call
                self.stats.members -= len(call.members)
            tries += 1
            if self._holds_the_rest(key, call):  # it completes the group
                return await self._pipeline.now(add, written=call.keys[0])
            return await self._pipeline(add, written=call.keys[0])

        return await loaded(self._script, send)

    def _worth_waiting(self, key: GroupCallKey) -> bool:
        last = self._last_call.get(key)
        if last is None:
            return False
        outstanding, at = last
        age = asyncio.get_running_loop().time() - at
        return outstanding >= self.tuning.company and age < self.tuning.recent_seconds

    def _holds_the_rest(self, key: GroupCallKey, call: _GroupCall) -> bool:
        """``call`` holds as many as the last call left: no one else can count."""
        last = self._last_call.get(key)
        return last is not None and len(call.members) >= last[0]

    def _remember(self, key: GroupCallKey, outstanding: int) -> None:
        self._last_call.pop(key, None)
        if outstanding > 0:
            self._last_call[key] = (outstanding, asyncio.get_running_loop().time())
            if len(self._last_call) > self.tuning.remembered_groups:
                del self._last_call[next(iter(self._last_call))]  # the oldest
        waiting = self._open.get(key)
        if waiting is not None:  # the group's next call: it may hold the rest now
            self._note_joined(key, waiting)

    @staticmethod
    def _arguments(call: _GroupCall) -> list[Any]:
        flat = [value for member, _ in call.members for value in member]
        return [len(call.keys), *call.keys, call.token, *call.head, *flat]


def _finish(complete: "asyncio.Future[None]") -> None:
    """A waiting call goes: nobody else joins it (or the wait is over)."""
    if not complete.done():
        complete.set_result(None)
