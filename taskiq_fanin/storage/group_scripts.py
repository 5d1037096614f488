"""The scripts of a group, one typed method each.

Calls go through a shared :class:`PipelineBatcher`: calls made together
(continuations starting at once, planners, sweeps) share a round trip, and the
outcomes of one group's members finishing together share one script call
(:class:`OutcomeBatcher`).
"""

from collections.abc import Mapping, Sequence
from typing import Any

from taskiq_fanin.storage import ledger_reads, replies
from taskiq_fanin.storage.keys import ChainKeys, GroupKeys
from taskiq_fanin.storage.rechecks import Recheck, recheck
from taskiq_fanin.storage.records.fields import text
from taskiq_fanin.storage.releases import Released, released_member
from taskiq_fanin.storage.replies import (
    Applied,
    Begin,
    CollectedOutcomes,
    Creation,
    GivenUp,
    Inspected,
    Outcome,
    Recorded,
    Redriven,
)
from taskiq_fanin.storage.scripts import Scripts
from taskiq_fanin.transport.client import RedisClient
from taskiq_fanin.transport.outcome_batching import OutcomeBatcher, OutcomeBatching
from taskiq_fanin.transport.pipeline import Command, PipelineBatcher


class GroupScripts:
    """The group scripts on one client: planner's, workers', callers', sweep's."""

    def __init__(
        self,
        client: RedisClient,
        pipeline: PipelineBatcher,
        *,
        batching: OutcomeBatching | None = None,
    ) -> None:
        self._pipeline = pipeline
        self._scripts = Scripts(client, pipeline)
        #: Members of one group finishing together share one script call; the
        #: worker tells it which members run here.
        self.outcomes = OutcomeBatcher(
            pipeline,
            self._scripts.registered("recordOutcome"),
            tuning=batching,
            urgent=(Recorded.CLAIMED,),
        )

    async def _applied(self, name: str, keys: Sequence[str], args: list[Any]) -> bool:
        """Call a script that replies ``Applied``: whether it applied."""
        reply = await self._scripts[name](keys=list(keys), args=args)
        return Applied(reply) is Applied.APPLIED

    async def send(self, command: Command, *, written: Any = None) -> Any:
        """A plain command (``lambda pipe: pipe.zrem(...)``) in the shared pipeline.

        ``written``: the key it writes (under replicated durability a write
        counts once replicated); ``None`` for a read.
        """
        return await self._pipeline(command, written=written)

    async def create_group(
        self,
        keys: GroupKeys,
        *,
        token: str,
        options: Mapping[str, str | int],
        members: Sequence[str],
        planner_lease_ms: int,
        claimant: str,
        sealed: bool = True,
    ) -> Creation:
        """Write meta (with ``options``) and the ledger's first chunk, on Redis's clock.

        ``sealed``: ``members`` is the whole ledger (else ``append_ledger``
        writes the rest). Returns the code, the group's token, its state
        (``claimed`` for a new empty group, which ``claimant`` finalises at once)
        and whether its ledger is sealed. ``ID_IN_USE``: a chain holds the id,
        nothing was written.
        """
        # Whether more chunks follow rides with the options, into the meta.
        written = {**options, "sealed": int(sealed)}
        pairs = [value for item in written.items() for value in item]
        chain_record = ChainKeys(keys.prefix, keys.group_id).record
        head = [token, planner_lease_ms, claimant, len(written), *pairs]
        reply = await self._scripts["createGroup"](
            keys=[keys.meta, keys.plan, keys.claim, chain_record],
            args=[*head, len(members), *members],
        )
        return replies.creation(reply)

    async def append_ledger(
        self,
        keys: GroupKeys,
        *,
        token: str,
        first: int,
        members: Sequence[str],
        seal: bool,
    ) -> tuple[bool, int]:
        """Append a chunk to an unsealed ledger (``seal``: the last).

        Returns whether it was written, and the ledger's total. Refused when
        the group is sealed (another planner or the sweep took it over), gone,
        not this token's or not open.
        """
        args = [token, first, int(seal), *members]
        code, total = await self._scripts["appendLedger"](
            keys=[keys.meta, keys.plan], args=args
        )
        return Applied(code) is Applied.APPLIED, int(total)

    async def add_members(
        self, keys: GroupKeys, *, batch: str, most: int, members: Sequence[str]
    ) -> replies.Addition:
        """Append a batch to an open group's ledger, before any of it is kicked.

        ``batch``: the same when retried (its reply lost): told where it went,
        nothing written twice. ``most``: ``max_group_size``.
        """
        reply = await self._scripts["addMembers"](
            keys=[keys.meta, keys.plan], args=[batch, most, *members]
        )
        return replies.addition(reply)

    async def seal_group(
        self, keys: GroupKeys, *, lease_ms: int, claimant: str
    ) -> replies.Sealing:
        """Fix an open group's total; complete already, ``claimant`` claims it."""
        reply = await self._scripts["sealGroup"](
            keys=[keys.meta, keys.claim, keys.window], args=[lease_ms, claimant]
        )
        return replies.sealing(reply)

    async def abandon_group(self, keys: GroupKeys, *, token: str) -> bool:
        """Remove an unsealed group (a bad member found in a later chunk)."""
        return await self._applied("abandonGroup", [keys.meta, keys.plan], [token])

    async def missing_members(
        self, keys: GroupKeys, start: int, stop: int
    ) -> dict[int, str]:
        """Ledger entries of members ``start`` to ``stop - 1`` with no outcome."""
        return await ledger_reads.missing_members(self._pipeline, keys, start, stop)

    async def record_outcome(
        self,
        keys: GroupKeys,
        *,
        token: str,
        index: int,
        outcome: Outcome,
        payload: str,
        lease_ms: int,
        claimant: str,
        delivery: str,
        stream_max: int,
    ) -> tuple[Recorded, CollectedOutcomes | None, Released | None]:
        """Record one member's outcome; ``CLAIMED`` means: you finalise.

        A new outcome also goes on the group's outcome stream, kept to about
        ``stream_max`` entries (0: none).

        The claimant also gets what the finaliser needs (``collect_outcomes``);
        the lease it takes holds ``<claimant>#<delivery>``, and the same
        ``delivery`` retrying after a lost reply is told ``CLAIMED`` again.
        Of a windowed group, the member the outcome released (``storage/releases.py``).
        """
        code, shared, own = await self.outcomes.record(
            keys.recording,
            token,
            head=(lease_ms, claimant, stream_max),
            member=(index, outcome.value, payload, delivery),
        )
        recorded = Recorded(code)
        if recorded is Recorded.CLAIMED:
            return recorded, replies.collected(shared), None
        return recorded, None, released_member(own)

    def claim_handled(self, keys: GroupKeys, *, token: str) -> None:
        """The claimant is done finalising: the members its call held go on."""
        self.outcomes.claim_handled(keys.recording, token)

    async def collect_outcomes(
        self, keys: GroupKeys, *, token: str
    ) -> CollectedOutcomes | None:
        """Read what the finaliser needs; ``None`` if the group is gone."""
        collecting = [
            keys.meta, keys.done, keys.failed, keys.results, keys.errors, keys.lost
        ]  # fmt: skip
        reply = await self._scripts["collectOutcomes"](keys=collecting, args=[token])
        return replies.collected(reply) if reply else None

    async def mark_planned(self, keys: GroupKeys, *, token: str) -> bool:
        """Note that every member was dispatched."""
        return await self._applied("markPlanned", [keys.meta], [token])

    async def release_planner(self, keys: GroupKeys, *, token: str) -> bool:
        """Give up a failed planner's lease: planning again takes over at once."""
        return await self._applied("releasePlanner", [keys.meta], [token])

    async def mark_dispatched(
        self,
        keys: GroupKeys,
        *,
        token: str,
        dispatched: str,
        tombstone_ms: int,
        claimant: str,
    ) -> bool:
        """Note which continuation was enqueued and release the lease if ours."""
        args = [token, dispatched, tombstone_ms, claimant]
        return await self._applied("markDispatched", keys.ending, args)

    async def mark_completed(
        self, keys: GroupKeys, *, token: str, tombstone_ms: int
    ) -> bool:
        """Shrink a group whose continuation ran to a tombstone."""
        return await self._applied("markCompleted", keys.ending, [token, tombstone_ms])

    async def release_lock(self, lock_key: str, holder: str) -> bool:
        """Delete ``lock_key`` if ``holder`` still holds it."""
        return await self._applied("releaseLock", [lock_key], [holder])

    async def cancel_group(self, keys: GroupKeys, *, tombstone_ms: int) -> bool:
        """Cancel an open group; False if it is missing or not open."""
        return await self._applied("cancelGroup", keys.cancelling, [tombstone_ms])

    async def begin_continuation(
        self,
        keys: GroupKeys,
        *,
        token: str,
        attempt: int,
        delivery: str,
        lease_ms: int,
        takes_over: bool = True,
    ) -> Begin:
        """May this delivery of the continuation run (one copy at a time)?

        Asked again by the same delivery, it renews its lease; ``takes_over``:
        false for the sweep's copy. Sent at once: the continuation waits on it.
        """
        args = [token, attempt, delivery, lease_ms, int(takes_over)]
        begin = self._scripts["beginContinuation"]
        return Begin(await begin(keys=[keys.meta], args=args, now=True))

    async def release_continuation(
        self, keys: GroupKeys, *, token: str, attempt: int, delivery: str
    ) -> bool:
        """Give up ``delivery``'s lease (the attempt's) so that its retry may run."""
        args = [token, attempt, delivery]
        return await self._applied("releaseContinuation", [keys.meta], args)

    # -- the sweep's look at a group, and its recoveries ---------------------

    async def inspect_group(self, keys: GroupKeys) -> Inspected | None:
        """Meta, lease and Redis's clock of a group; ``None`` if it is gone."""
        inspecting = [keys.meta, keys.claim]
        return replies.inspected(await self._scripts["inspectGroup"](keys=inspecting))

    async def redrive_group(
        self,
        keys: GroupKeys,
        *,
        token: str,
        max_redrives: int,
        start: int = 0,
        stop: int = 2**53,
    ) -> Redriven:
        """May the sweep kick the missing members of ledger window [start, stop)?

        A pass's first window (``start`` 0) records the re-drive and seals the
        ledger; ``missing_members`` reads the window's members.
        """
        args = [token, max_redrives, start, stop]
        return replies.redriven(
            await self._scripts["redriveGroup"](keys=keys.redriving, args=args)
        )

    async def give_up(
        self,
        keys: GroupKeys,
        *,
        token: str,
        lease_ms: int,
        claimant: str,
        start: int = 0,
        stop: int = 2**53,
    ) -> GivenUp:
        """Note the members of ledger window [start, stop) with no outcome lost.

        The first window (``start`` 0) stops the group recording outcomes
        (``giving_up``); the one that reaches the ledger's end claims the
        finaliser for ``claimant`` (``GivenUp.claimed``).
        """
        args = [token, start, stop, lease_ms, claimant]
        reply = await self._scripts["giveUp"](keys=keys.giving_up, args=args)
        return replies.given_up(reply)

    async def reclaim_finaliser(
        self, keys: GroupKeys, *, token: str, lease_ms: int, claimant: str
    ) -> bool:
        """Take over a claimed group whose finaliser's lease ran out."""
        reclaim, args = self._scripts["reclaimFinaliser"], [token, lease_ms, claimant]
        reply = await reclaim(keys=[keys.meta, keys.claim], args=args)
        return Applied(reply) is Applied.APPLIED

    async def check_continuation(
        self, keys: GroupKeys, *, token: str, max_redrives: int
    ) -> Recheck:
        """Is an overdue continuation lost, on Redis's clock? It writes nothing.

        Lost: dispatched or running, no run lease held, a span past its
        dispatch (or its last re-dispatch); capped past ``max_redrives``.
        """
        check = self._scripts["checkContinuation"]
        return recheck(await check(keys=[keys.meta], args=[token, max_redrives]))

    async def count_redispatch(self, keys: GroupKeys, *, token: str) -> int | None:
        """Count a re-dispatch whose kick returned: the count; ``None``: over."""
        count = self._scripts["countRedispatch"]
        code, redrives = await count(keys=[keys.meta], args=[token])
        return int(redrives) if Applied(code) is Applied.APPLIED else None

    async def schedule(
        self, index: str, item: str, *, after_ms: int, mode: str, now: bool = False
    ) -> bool:
        """Put ``item`` in a sweep ``index``, due ``after_ms`` from Redis's now.

        ``mode``: ``nx`` only a new entry, ``xx`` only an existing one, ``set``,
        ``sooner`` only an existing one due later. ``now``: sent at once, alone.
        """
        args = [mode, item, after_ms]
        schedule = self._scripts["scheduleSweep"]
        reply = await schedule(keys=[index], args=args, now=now)
        return Applied(reply) is Applied.APPLIED

    async def due(self, index: str, *, batch: int) -> tuple[int, list[str]]:
        """Redis's now (epoch ms), and up to ``batch`` entries of ``index`` due."""
        now, *due = await self._scripts["listDue"](keys=[index], args=[batch])
        return int(now), [text(item) for item in due]
