"""A caller's verbs ride through Redis being away for a moment, as the hooks do.

A caller who hears an error from ``kiq()`` plans again, often with a fresh id:
two groups, while the first plan may be on the primary (a reply lost on a reset
connection, a write its replicas had not taken in time under
``durability="replicated"``, a kick the broker's Redis refused). So ``kiq()``
and ``cancel()`` retry while Redis is away (``transport/retrying.py``), for the
middleware's ``retry_for``, with the same ids and token: planning a group again
with its token goes on where it stopped (``groups/planning.py``), starting a
chain again with its token kicks its first step if it has not moved
(``startChain``), and kicking a member or a step twice is harmless. Past
``retry_for`` the error is raised.
"""

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from taskiq_fanin.chains import record, saga
from taskiq_fanin.context import FanInContext
from taskiq_fanin.domain.results import ChainState, GroupState
from taskiq_fanin.groups import reading
from taskiq_fanin.groups.continuation import cancel_group
from taskiq_fanin.transport.retrying import retrying

T = TypeVar("T")

#: What the log says when a caller's verb gives up.
RAISED = "%s %s failed while Redis was away; raised to its caller"


def deadline(ctx: FanInContext) -> float:
    """When a verb's retries end (the loop's clock): ``retry_for`` from now.

    A verb of many phases rides them all within it, not ``retry_for`` each.
    """
    return asyncio.get_running_loop().time() + ctx.config.retry_for


async def riding(
    ctx: FanInContext,
    work: Callable[[], Awaitable[T]],
    *,
    what: tuple[str, str],
    final: Callable[[BaseException], bool] = lambda _: False,
    until: float | None = None,
) -> T:
    """Run ``work``, again while Redis is away, for ``retry_for`` at most.

    ``final``: an error never retried (the caller's own, whatever its type);
    ``until``: the verb's :func:`deadline`, when it has phases before this one.
    """
    retry_for = ctx.config.retry_for
    if until is not None:
        retry_for = max(0.0, until - asyncio.get_running_loop().time())
    return await retrying(
        work,
        retry_for=retry_for,
        what=what,
        giving_up=RAISED,
        log_refusals=False,
        final=final,
        traceback=False,
    )


async def cancel_group_riding(
    ctx: FanInContext, group_id: str, *, until: float | None = None
) -> bool:
    """Cancel a group; a try that failed may have cancelled it: then True."""

    async def cancelled() -> bool:
        status = await reading.status(ctx, group_id)
        return status.state is GroupState.CANCELLED

    return await _cancel_riding(
        ctx, group_id, lambda: cancel_group(ctx, group_id), cancelled, until
    )


async def cancel_chain_riding(
    ctx: FanInContext, chain_id: str, *, until: float | None = None
) -> bool:
    """Cancel a chain; a try that failed may have cancelled it: then True."""

    async def cancelled() -> bool:
        status = await record.status(ctx, chain_id)
        return status.state is ChainState.CANCELLED

    return await _cancel_riding(
        ctx, chain_id, lambda: saga.cancel(ctx, chain_id), cancelled, until
    )


async def _cancel_riding(
    ctx: FanInContext,
    workflow_id: str,
    cancel: Callable[[], Awaitable[bool]],
    cancelled: Callable[[], Awaitable[bool]],
    until: float | None,
) -> bool:
    """``cancel``, ridden; when a try failed and the last said no, ``cancelled()``.

    A failed try may have been done (its reply lost): the state tells.
    """
    until = deadline(ctx) if until is None else until
    tried = Tried()
    done = await riding(
        ctx, tried.of(cancel), what=("Cancelling", workflow_id), until=until
    )
    if done or not tried.failed:
        return done
    return await riding(ctx, cancelled, what=("Reading", workflow_id), until=until)


class Tried:
    """Whether a try of a retried verb failed (its write may have been done)."""

    def __init__(self) -> None:
        self.failed = False

    def of(self, work: Callable[[], Awaitable[T]]) -> Callable[[], Awaitable[T]]:
        """``work``, noting a failure."""

        async def noted() -> T:
            try:
                return await work()
            except Exception:
                self.failed = True
                raise

        return noted
