"""Kicking a group's members, with their group label and deterministic task ids.

The planner kicks them all (or a windowed group's first ones), an outcome that
releases a windowed group's next ones kicks those, and the sweep re-drives the
missing ones; at most ``dispatch_concurrency`` kicks of one call in flight.
"""

import asyncio

from taskiq_fanin.context import FanInContext
from taskiq_fanin.domain.ids import redriven_member_id
from taskiq_fanin.domain.labels import CANCELLABLE_LABEL, DEPTH_LABEL, MemberRef
from taskiq_fanin.domain.signature import Signature
from taskiq_fanin.domain.spec import ChainSpec


async def dispatch_members(
    ctx: FanInContext,
    group_id: str,
    token: str,
    members: dict[int, Signature | ChainSpec],
    *,
    depth: int,
    cancellable: bool = False,
    attempt: int = 0,
) -> None:
    """Kick members with their group label and deterministic task ids.

    Kicking a member twice is harmless: its outcome is recorded once. The
    first is kicked before the others are built, so it starts soonest. A member
    that is a chain starts under the id ``<group>~<index>`` (``~r<attempt>`` added
    when the sweep re-drives it: a re-driven chain starts over, unless one of its
    earlier chains has ended: that one is recorded instead).
    """
    limit = asyncio.Semaphore(ctx.config.dispatch_concurrency)
    labels = {DEPTH_LABEL: str(depth)}
    if cancellable:
        labels[CANCELLABLE_LABEL] = "1"

    async def kick(index: int, member: Signature | ChainSpec) -> None:
        ref = MemberRef(group_id=group_id, index=index, token=token)
        async with limit:
            if isinstance(member, ChainSpec):
                ids = [
                    ref.task_id,
                    *(
                        redriven_member_id(ref.task_id, n)
                        for n in range(1, attempt + 1)
                    ),
                ]
                await ctx.start_chain(
                    ctx,
                    member,
                    chain_id=ids[-1],
                    member=ref,
                    depth=depth + 1,
                    earlier=ids[:-1],
                )
                return
            await (
                member.with_labels(**ref.label(), **labels)
                .kicker(ctx.kicker_for(member.task_name))
                .with_task_id(ref.task_id)
                .kiq(*member.args, **member.kwargs)
            )

    # The first goes alone, at once: building each message costs the planner
    # ~0.1-0.2 ms, and in one pipeline with the rest it would wait for them all.
    kicks = iter(members.items())
    first = next(kicks, None)
    if first is not None:
        await kick(*first)
    await asyncio.gather(*(kick(index, member) for index, member in kicks))
