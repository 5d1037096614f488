"""The scripts only the sweep calls on a group: its look, and its recoveries.

:class:`GroupScripts` has them (it is one), beside the scripts the planner,
the workers and the callers call: each of its methods one script call.
"""

from taskiq_fanin.store import replies
from taskiq_fanin.store.keys import GroupKeys
from taskiq_fanin.store.rechecks import Recheck, recheck
from taskiq_fanin.store.replies import Applied, GivenUp, Inspected, Redriven
from taskiq_fanin.store.scripts import Scripts


class GroupSweepScripts:
    """The sweep's group scripts; ``_scripts``: the client's registered scripts."""

    _scripts: Scripts

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
