"""A script call's replies to its callers: the urgent first, the rest a turn apart.

One ``recordOutcome`` call carries several members' outcomes, and each member
resumes when it hears its code: a member's acknowledgement is ~0.1-0.2 ms of
the worker's loop. The member whose outcome completed the group has its
continuation to kick (and, when it runs in this worker, to start): it hears
first, and the others one loop turn apart, so that the loop serves that I/O
between them rather than after them all. Every caller hears, in call order.
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


def hand_over(
    members: Sequence[tuple[Any, Reply]],
    codes: Sequence[Any],
    shared: Any,
    own: Sequence[Any],
    *,
    urgent: Collection[Any],
) -> None:
    """Give each caller its code, the call's ``shared`` reply and its own part."""
    handed: list[Handed] = list(zip(members, codes, own, strict=True))
    rest = [pair for pair in handed if pair[1] not in urgent]
    if len(rest) == len(handed):
        _hand(handed, shared)
        return
    _hand([pair for pair in handed if pair[1] in urgent], shared)
    rest.reverse()
    _trickle(rest, shared)


def _trickle(rest: list[Handed], shared: Any) -> None:
    if rest:
        _hand([rest.pop()], shared)
        asyncio.get_running_loop().call_soon(_trickle, rest, shared, context=_CONTEXT)


def _hand(handed: Sequence[Handed], shared: Any) -> None:
    for (_, reply), code, mine in handed:
        if not reply.done():
            reply.set_result((code, shared, mine))
