"""Outcomes of one group's members recorded together go as one script call.

A busy worker finishes many members of the same group close together, and one
``recordOutcome`` call for several costs it far less CPU than one call each. A
call of a busy group may wait a few milliseconds for the others of its group
running in this worker, never for members that cannot come.
"""

import asyncio
import contextlib
import contextvars
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from taskiq_fanin.batching import PipelineBatcher, fail_all

#: The longest a member's outcome waits for more of its group (seconds): a busy
#: worker finishes a member or two per millisecond, and one script call for
#: several costs it far less CPU than one each.
OUTCOME_GATHER_SECONDS = 0.004
#: An outcome waits only when its group had at least this many members without
#: an outcome at its last call from this worker (a small group's few members
#: are not worth holding a slot for) ...
OUTCOME_COMPANY = 8
#: ... and that call went less than this long ago (seconds): a group whose
#: members finish seldom gains nothing from waiting.
OUTCOME_RECENT_SECONDS = 0.02
#: Once every member of the group running here has joined a waiting call, the
#: turns of the event loop it gives the worker to start another one before it
#: goes. A worker with a free slot and a message already fetched starts it
#: within a few; one whose slots are all held starts none, however long it waits.
OUTCOME_SETTLE_TURNS = 10
#: Groups whose last call a batcher remembers.
REMEMBERED_GROUPS = 1024


@dataclass
class _GroupCall:
    """The members of one group waiting to go as one script call."""

    keys: Sequence[Any]
    token: str
    head: Sequence[Any]
    members: list[tuple[Sequence[Any], "asyncio.Future[tuple[Any, Any]]"]] = field(
        default_factory=list
    )
    #: The call waits for more members (its group is busy here) ...
    waiting: bool = False
    #: ... until this is set: nobody else can join, or nobody comes.
    complete: asyncio.Event = field(default_factory=asyncio.Event)
    #: Members of the group that started here while this call was open.
    arrivals: int = 0
    #: Loop turns are being counted to see whether another member starts.
    settling: bool = False


class OutcomeBatcher:
    """Outcomes of one group recorded together go as one ``recordOutcome`` call.

    A busy worker finishes many members of the same group close together; their
    outcomes share one script call (and its keys and shared arguments) instead
    of one call each. A call of a big group whose members have been finishing
    here just now waits for more, up to ``gather_seconds``, but only while more
    can come: it goes once every member of the group running here has joined
    it and the worker starts no other within a few loop turns, or at once when
    the worker has only one slot or runs as many members as it ever ran at a
    time (the worker says which members run: :meth:`started`, :meth:`ended`).
    A worker whose slots the call holds thus never waits for nothing. Any other
    call goes at the next turn of the event loop, with whatever joined it by
    then. The script takes the members in order, each as if recorded alone.
    """

    def __init__(
        self,
        batcher: PipelineBatcher,
        script: AsyncScript,
        *,
        gather_seconds: float | None = None,
    ) -> None:
        self._script = script
        self._batcher = batcher
        self._gather_seconds = (
            OUTCOME_GATHER_SECONDS if gather_seconds is None else gather_seconds
        )
        self._open: dict[tuple[Any, ...], _GroupCall] = {}
        #: Per group: members running here that have not joined a call yet.
        self._unjoined: dict[tuple[Any, ...], set[int]] = {}
        #: Per group: members without an outcome after its last call, and when.
        self._last_call: dict[tuple[Any, ...], tuple[int, float]] = {}
        #: A member started here while a call was open (and held its slot):
        #: this worker has more than one slot, so others may start meanwhile.
        self._spare_slots = False
        #: Members of every group running here, and the most there ever were:
        #: with as many here as ever ran at once, the slots are taken.
        self._members_here = 0
        self._most_here = 0
        #: Settling callbacks need no context of their own (copying one costs).
        self._settle_context = contextvars.Context()
        self._sending: set[asyncio.Task[None]] = set()  # the loop keeps weak refs

    def started(self, keys: Sequence[Any], token: str, index: int) -> None:
        """Member ``index`` of the group (``keys``, ``token``) starts running here.

        Each start must be followed by exactly one :meth:`ended`.
        """
        key = (*keys, token)
        self._unjoined.setdefault(key, set()).add(index)
        self._members_here += 1
        self._most_here = max(self._most_here, self._members_here)
        if self._open:
            self._spare_slots = True
        call = self._open.get(key)
        if call is not None:
            call.arrivals += 1

    def ended(self, keys: Sequence[Any], token: str, index: int) -> None:
        """Member ``index`` is done here, recorded or not (skipped, to be retried)."""
        key = (*keys, token)
        self._members_here -= 1
        self._joined(key, index)
        call = self._open.get(key)
        if call is not None:
            self._note_joined(key, call)

    def _joined(self, key: tuple[Any, ...], index: int) -> None:
        # Nobody waits for this member any more: it is in a call, or done.
        unjoined = self._unjoined.get(key)
        if unjoined is not None:
            unjoined.discard(index)
            if not unjoined:
                del self._unjoined[key]

    def _note_joined(self, key: tuple[Any, ...], call: _GroupCall) -> None:
        """Complete a waiting call that nobody else can join (or start settling)."""
        if not call.waiting or call.settling or call.complete.is_set():
            return
        if key in self._unjoined:
            return  # a member of the group runs here and will join
        if not self._spare_slots or self._members_here >= self._most_here:
            # The call holds the worker's only slot, or as many members are
            # here as ever ran at once: no slot is free for another to start.
            call.complete.set()
            return
        call.settling = True
        self._settle(key, call, call.arrivals, OUTCOME_SETTLE_TURNS)

    def _settle(
        self, key: tuple[Any, ...], call: _GroupCall, arrivals: int, turns: int
    ) -> None:
        """Count loop turns (cheap callbacks, not task steps) for a new member."""
        if call.complete.is_set() or self._open.get(key) is not call:
            return
        if key in self._unjoined:
            call.settling = False  # one started and runs: its join settles again
            return
        if call.arrivals != arrivals:
            arrivals, turns = call.arrivals, OUTCOME_SETTLE_TURNS  # joined already
        elif turns == 0:
            call.complete.set()  # the worker started no other member: none comes
            return
        asyncio.get_running_loop().call_soon(
            self._settle, key, call, arrivals, turns - 1, context=self._settle_context
        )

    async def __call__(
        self,
        keys: Sequence[Any],
        token: str,
        head: Sequence[Any],
        member: Sequence[Any],
    ) -> tuple[Any, Any]:
        """Record one member; returns its code and the call's shared reply.

        ``head`` (the script's arguments after the token) is taken from the
        first member of a call: a worker passes the same, up to the clock.
        """
        key = (*keys, token)
        call = self._open.get(key)
        reply: asyncio.Future[tuple[Any, Any]] = (
            asyncio.get_running_loop().create_future()
        )
        if call is None:
            call = self._open[key] = _GroupCall(keys, token, head)
            self._start(key, call)
        call.members.append((member, reply))
        self._joined(key, int(member[0]))
        self._note_joined(key, call)
        return await reply

    def _start(self, key: tuple[Any, ...], call: _GroupCall) -> None:
        task = asyncio.get_running_loop().create_task(self._send(key, call))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, key: tuple[Any, ...], call: _GroupCall) -> None:
        try:
            if self._worth_waiting(key):
                call.waiting = True
                self._note_joined(key, call)
                if not call.complete.is_set():
                    # asyncio.TimeoutError: not the built-in one on Python 3.10.
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(
                            call.complete.wait(), self._gather_seconds
                        )
            codes, shared, outstanding = await self._call_script(key, call)
            self._remember(key, int(outstanding))
            for (_, reply), code in zip(call.members, codes, strict=True):
                if not reply.done():
                    reply.set_result((code, shared))
        except BaseException as exc:
            fail_all(call.members, exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            # Sent or not, nobody may join this call any more.
            if self._open.get(key) is call:
                del self._open[key]

    async def _call_script(self, key: tuple[Any, ...], call: _GroupCall) -> Any:
        def add(pipe: Any) -> None:
            # From now on this call is closed: later members start the next one.
            if self._open.get(key) is call:
                del self._open[key]
            pipe.execute_command("EVALSHA", self._script.sha, *self._arguments(call))

        try:
            return await self._batcher(add)
        except NoScriptError:
            args = self._arguments(call)[len(call.keys) + 1 :]
            return await self._script(keys=call.keys, args=args)

    def _worth_waiting(self, key: tuple[Any, ...]) -> bool:
        last = self._last_call.get(key)
        if last is None:
            return False
        outstanding, at = last
        recent = asyncio.get_running_loop().time() - at < OUTCOME_RECENT_SECONDS
        return outstanding >= OUTCOME_COMPANY and recent

    def _remember(self, key: tuple[Any, ...], outstanding: int) -> None:
        self._last_call.pop(key, None)
        if outstanding > 0:
            self._last_call[key] = (outstanding, asyncio.get_running_loop().time())
            if len(self._last_call) > REMEMBERED_GROUPS:
                del self._last_call[next(iter(self._last_call))]  # the oldest

    @staticmethod
    def _arguments(call: _GroupCall) -> list[Any]:
        flat = [value for member, _ in call.members for value in member]
        return [len(call.keys), *call.keys, call.token, *call.head, *flat]
