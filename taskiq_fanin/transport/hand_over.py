"""A script call's replies to its callers: the urgent first, the rest after.

One ``recordOutcome`` call carries several members' outcomes, and each member
resumes when it hears its code: a member's acknowledgement is ~0.1-0.2 ms of
the worker's loop. The member whose outcome completed the group has its
continuation to kick (and, when it runs in this worker, to start): it hears
first, and the others later (``outcome_batching`` holds them until the
claimant is done), then one loop turn apart, so that the loop serves other
I/O between them rather than after them all. Every caller hears, in call order.
"""

import asyncio
import contextvars
from collections.abc import Collection, Sequence
from typing import Any

#: A caller's reply: its code, the call's shared reply, and its own part.
Reply = asyncio.Future[tuple[Any, Any, Any]]
#: One caller: (its call entry, whose second item is its reply), code, own part.
Handed = tuple[tuple[Any, Reply], Any, Any]

#: The trickle's callbacks need no context of their own (copying one costs).
_CONTEXT = contextvars.Context()


def split(
    members: Sequence[tuple[Any, Reply]],
    codes: Sequence[Any],
    own: Sequence[Any],
    *,
    urgent: Collection[Any],
) -> tuple[list[Handed], list[Handed]]:
    """The callers whose codes are ``urgent``, and the rest, each in call order."""
    handed: list[Handed] = list(zip(members, codes, own, strict=True))
    if urgent and any(code in urgent for code in codes):
        first = [pair for pair in handed if pair[1] in urgent]
        return first, [pair for pair in handed if pair[1] not in urgent]
    return [], handed


def hand(handed: Sequence[Handed], shared: Any) -> None:
    """Give each caller of ``handed`` its code, ``shared`` and its own part, now."""
    for (_, reply), code, mine in handed:
        if not reply.done():
            reply.set_result((code, shared, mine))


def trickle(rest: Sequence[Handed], shared: Any) -> None:
    """Give each caller of ``rest`` its reply, one loop turn apart, in order."""
    _trickle(list(reversed(rest)), shared)


def _trickle(rest: list[Handed], shared: Any) -> None:
    if rest:
        hand([rest.pop()], shared)
        asyncio.get_running_loop().call_soon(_trickle, rest, shared, context=_CONTEXT)
