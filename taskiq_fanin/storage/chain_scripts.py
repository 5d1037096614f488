"""The scripts of a chain's workflow record, one typed method each, and its reads.

Every transition is one script on the record's own slot; calls go through the
shared :class:`PipelineBatcher`, so a burst of chains shares a few connections.
"""

from typing import Any

from taskiq_fanin.storage.keys import ChainKeys, GroupKeys
from taskiq_fanin.storage.rechecks import Recheck, recheck
from taskiq_fanin.storage.records import ChainRecord
from taskiq_fanin.storage.records.fields import text
from taskiq_fanin.storage.replies import (
    Advanced,
    Applied,
    Begin,
    Cancel,
    Cancelled,
    Failed,
    Finished,
    Started,
    StepWait,
    flat_hash,
)
from taskiq_fanin.storage.scripts import Scripts
from taskiq_fanin.transport.client import RedisClient
from taskiq_fanin.transport.pipeline import PipelineBatcher

Args = list[str | int]


class ChainScripts:
    """The chain scripts registered on one client."""

    def __init__(self, client: RedisClient, pipeline: PipelineBatcher) -> None:
        self._pipeline = pipeline
        self._scripts = Scripts(client, pipeline)

    async def _call(self, name: str, keys: ChainKeys, args: Args) -> Any:
        """A script of both the record and its compensations."""
        return await self._scripts[name](keys=keys.all, args=args)

    async def _call_record(self, name: str, keys: ChainKeys, args: Args) -> Any:
        """A script of the record alone."""
        return await self._scripts[name](keys=[keys.record], args=args)

    async def start(
        self,
        keys: ChainKeys,
        *,
        token: str,
        names: str,
        steps: int,
        ttl_ms: int,
        pending: str,
        deadline_ms: int,
        member: str = "",
        version: str = "",
        workflow: str = "",
    ) -> Started:
        """Create the record, unless the chain exists or a group holds the id.

        ``ID_IN_USE``: a group holds it, nothing was written.
        ``deadline_ms``: how long a step may take (kept as ``ChainRecord.deadline_ms``);
        ``member``: the label of the group member the chain is, if it is one;
        ``version``: the one it was started with, if any; ``workflow``: its
        name (``chain(..., name=...)``, resolved).
        """
        args: Args = [
            token,
            steps,
            names,
            ttl_ms,
            pending,
            deadline_ms,
            member,
            version,
            workflow,
        ]
        group_meta = GroupKeys(keys.prefix, keys.chain_id).meta
        reply = await self._scripts["startChain"](
            keys=[keys.record, group_meta], args=args
        )
        return Started(int(reply))

    async def advance(
        self,
        keys: ChainKeys,
        *,
        token: str,
        step: int,
        compensation: str,
        ttl_ms: int,
        pending: str,
        delivery: str,
        failure: str = "",
    ) -> Advanced:
        """Move past ``step`` once; ``ADVANCED`` means: kick the next step.

        The same ``delivery`` retrying after a lost reply is told so again.
        """
        args: Args = [token, step, compensation, ttl_ms, pending, failure, delivery]
        return Advanced(await self._call("advanceChain", keys, args))

    async def finish(
        self,
        keys: ChainKeys,
        *,
        token: str,
        step: int,
        delivery: str,
        failure: str = "",
        outcome: str = "",
        payload: str = "",
        compensation: str = "",
    ) -> Finished:
        """Mark the chain done after its last step, once.

        ``outcome`` and ``payload``: the group member's, kept in the record;
        ``compensation``: the step's, kept should the chain be cancelled. The
        same ``delivery`` retrying after a lost reply is told ``DONE`` again.
        """
        args: Args = [token, step, failure, delivery, outcome, payload, compensation]
        return Finished(await self._call("finishChain", keys, args))

    async def begin_failing(
        self,
        keys: ChainKeys,
        *,
        token: str,
        step: int,
        error: str,
        delivery: str,
        compensation: str = "",
        given_up: bool = False,
    ) -> tuple[Failed, list[str]]:
        """Record the chain failing at ``step``: ``FAILING`` with its compensations.

        It stays failing until :meth:`end_failing`, once the error continuation
        and the compensations are kicked.

        ``compensation``: the step's own, when its body did its work and only its
        result could not be used (it is undone with the others). ``given_up``:
        the sweep gives the chain up at ``step``; a copy of it still running
        undoes itself when it ends (``CANCELLED`` is its reply then).
        """
        args: Args = [
            token,
            step,
            error,
            delivery,
            compensation,
            "1" if given_up else "",
        ]
        reply = await self._call("beginFailingChain", keys, args)
        return Failed(reply[0]), [text(c) for c in reply[1:]]

    async def end_failing(self, keys: ChainKeys, *, token: str) -> bool:
        """A failing chain's error continuation and compensations are kicked."""
        reply = await self._call("endFailingChain", keys, [token])
        return Applied(reply) is Applied.APPLIED

    async def cancel(self, keys: ChainKeys) -> Cancelled | None:
        """Cancel a running chain (or hand back a cancelled one's), else None."""
        reply = await self._call("cancelChain", keys, [])
        code = Cancel(reply[0])
        if code is Cancel.GONE:
            return None
        return Cancelled(
            now=code is Cancel.NOW,
            step=int(reply[1]),
            member=text(reply[2]),
            step_undo=text(reply[3]),
            compensations=[text(c) for c in reply[4:]],
        )

    async def begin_step(
        self,
        keys: ChainKeys,
        *,
        token: str,
        step: int,
        attempt: int,
        delivery: str,
        lease_ms: int,
        takes_over: bool = True,
    ) -> Begin:
        """May this delivery of a step run (the chain at it, one copy at a time)?

        Asked again by the same delivery, it renews its lease; ``takes_over``:
        false for the sweep's copy.
        """
        begun, _ = await self.begin_step_waited(
            keys,
            token=token,
            step=step,
            attempt=attempt,
            delivery=delivery,
            lease_ms=lease_ms,
            takes_over=takes_over,
        )
        return begun

    async def begin_step_waited(
        self,
        keys: ChainKeys,
        *,
        token: str,
        step: int,
        attempt: int,
        delivery: str,
        lease_ms: int,
        takes_over: bool = True,
    ) -> tuple[Begin, StepWait | None]:
        """As :meth:`begin_step`; and, to the step's first copy, its wait.

        The wait: how long since the record last moved, and the chain's name.
        """
        args: Args = [token, step, attempt, delivery, lease_ms, int(takes_over)]
        reply = await self._call_record("beginStep", keys, args)
        if isinstance(reply, list):
            begun, waited_ms, workflow = reply
            return Begin(int(begun)), StepWait(int(waited_ms), text(workflow))
        return Begin(int(reply)), None

    async def release_step(
        self, keys: ChainKeys, *, token: str, step: int, attempt: int, delivery: str
    ) -> bool:
        """Give up a step attempt's run lease so that its retry may run.

        Only ``delivery``'s (the one that began it): a release applied again
        frees no copy begun since.
        """
        args: Args = [token, step, attempt, delivery]
        reply = await self._call_record("releaseStep", keys, args)
        return Applied(reply) is Applied.APPLIED

    async def begin_on_error(
        self,
        keys: ChainKeys,
        *,
        token: str,
        attempt: int,
        delivery: str,
        lease_ms: int,
        takes_over: bool = True,
    ) -> Begin:
        """May this delivery of the chain's error continuation run (one copy, once)?

        Asked again by the same delivery, it renews its lease. ``takes_over``:
        as the next attempt it may take a held lease over (a retry's, not the
        sweep's copy).
        """
        args: Args = [token, attempt, delivery, lease_ms, int(takes_over)]
        return Begin(await self._call_record("beginOnError", keys, args))

    async def release_on_error(
        self,
        keys: ChainKeys,
        *,
        token: str,
        attempt: int,
        delivery: str,
        deadline_ms: int,
    ) -> bool:
        """Give up an error continuation attempt's run lease: its retry may run.

        Only ``delivery``'s (the one that began it). Its retry is due to begin
        within the record's step span (else ``deadline_ms``).
        """
        args: Args = [token, attempt, deadline_ms, delivery]
        reply = await self._call_record("releaseOnError", keys, args)
        return Applied(reply) is Applied.APPLIED

    async def check_on_error(
        self, keys: ChainKeys, *, token: str, max_redrives: int, deadline_ms: int
    ) -> Recheck:
        """Is an error continuation lost, on Redis's clock? It writes nothing."""
        args: Args = [token, max_redrives, deadline_ms]
        return recheck(await self._call_record("checkOnError", keys, args))

    async def count_rekick(self, keys: ChainKeys, *, token: str) -> int | None:
        """Count a re-kick whose kick returned: the count; ``None``: over."""
        code, redrives = await self._call_record("countRekick", keys, [token])
        return int(redrives) if Applied(code) is Applied.APPLIED else None

    async def complete_on_error(self, keys: ChainKeys, *, token: str) -> bool:
        """The error continuation ran to its end: no copy of it runs any more."""
        reply = await self._call_record("completeOnError", keys, [token])
        return Applied(reply) is Applied.APPLIED

    async def mark_settled(self, keys: ChainKeys, *, token: str) -> bool:
        """The sweep settled the chain's end once: later visits settle nothing."""
        reply = await self._call_record("markSettled", keys, [token])
        return Applied(reply) is Applied.APPLIED

    async def inspect(self, keys: ChainKeys) -> tuple[ChainRecord, int] | None:
        """The record and Redis's now (epoch ms); ``None`` if the chain is gone."""
        reply = await self._call_record("inspectChain", keys, [])
        if not reply:
            return None
        return ChainRecord.from_hash(flat_hash(reply[0])), int(reply[1])

    async def redrive(
        self, keys: ChainKeys, *, token: str, max_redrives: int, ttl_ms: int
    ) -> tuple[int, str | None]:
        """Count a re-drive: (re-drives so far, the step's kick to repeat or None)."""
        reply = await self._call("redriveChain", keys, [token, max_redrives, ttl_ms])
        redriven = Applied(reply[0]) is Applied.APPLIED
        return int(reply[1]), (text(reply[2]) if redriven else None)

    async def keep(
        self, keys: ChainKeys, *, token: str, step: int, until_ms: int
    ) -> bool:
        """Keep a chain waiting on its group step alive to ``until_ms`` (epoch ms)."""
        reply = await self._call("keepChain", keys, [token, step, until_ms])
        return Applied(reply) is Applied.APPLIED

    async def read(self, keys: ChainKeys) -> ChainRecord:
        """The whole record (state ``missing`` when the chain is missing)."""
        raw = await self._pipeline(lambda pipe: pipe.hgetall(keys.record))
        return ChainRecord.from_hash(raw)

    async def compensations(self, keys: ChainKeys) -> list[str]:
        """The compensations of the completed steps, in step order."""
        raw = await self._pipeline(lambda pipe: pipe.lrange(keys.compensations, 0, -1))
        return [text(item) for item in raw]
