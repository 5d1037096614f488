"""Groups that grow, then seal: members added to an open group, and its seal.

A group planned with ``open=True`` takes batches of members until it is
sealed. Each batch is checked before anything is written, written to the
ledger after the members it holds (indexes follow the order of addition),
and only then kicked: the ledger rule holds per batch (invariant 1). The
continuation waits for the seal: an outcome never completes an unsealed group
(``recordOutcome``), and a seal that finds every member with an outcome
completes it at once (``sealGroup``), its caller enqueuing the continuation.
"""

from collections.abc import Sequence

from taskiq_fanin.context import CLAIMANT, FanInContext
from taskiq_fanin.domain.config import ms
from taskiq_fanin.domain.exceptions import (
    GroupNotFoundError,
    GroupSealedError,
    GroupTooWideError,
    shown,
)
from taskiq_fanin.domain.ids import validate_group_id
from taskiq_fanin.domain.results import GroupState
from taskiq_fanin.domain.signature import Signature
from taskiq_fanin.domain.spec import ChainSpec
from taskiq_fanin.groups.dispatching import dispatch_members
from taskiq_fanin.groups.finalising import finalise
from taskiq_fanin.groups.group_validation import check_member, serialized
from taskiq_fanin.storage.keys import GroupKeys
from taskiq_fanin.storage.records import GroupMeta, read_fields
from taskiq_fanin.storage.replies import Added, Sealed

Member = Signature | ChainSpec


async def add_members(
    ctx: FanInContext, group_id: str, members: Sequence[Member], *, batch: str
) -> range:
    """Check, write, then kick a batch of members of an open group: their indexes.

    ``batch``: random per call, the same when the call is retried (its reply
    lost), which then adds nothing twice. Raises before anything is written:
    ``GroupNotFoundError``, ``GroupSealedError``, ``GroupTooWideError`` or a
    bad member's error; the script checks the group again as it writes.
    """
    validate_group_id(group_id, derived=True)
    keys = GroupKeys(ctx.config.prefix, group_id)
    meta = await read_fields(
        ctx.redis, keys.meta, GroupMeta, "state", "open", "sealed", "total", "depth"
    )
    _check_takes_members(group_id, meta)
    if not members:
        return range(meta.total, meta.total)
    most = ctx.config.max_group_size
    if meta.total + len(members) > most:
        raise GroupTooWideError(size=meta.total + len(members), maximum=most)
    entries = []
    for number, member in enumerate(members):
        what = f"added member {number}"
        check_member(ctx, member, what, depth=meta.depth)
        entries.append(serialized(what, member, ctx.config.max_member_bytes))
    added = await ctx.scripts.add_members(keys, batch=batch, most=most, members=entries)
    if added.code is Added.NO_GROUP:
        raise GroupNotFoundError(group_id=shown(group_id))
    if added.code is Added.SEALED:
        state = GroupState(added.state or GroupState.MISSING.value)
        _check_takes_members(group_id, GroupMeta(state=state, open=True, sealed=True))
    if added.code is Added.TOO_WIDE:
        raise GroupTooWideError(size=added.total + len(members), maximum=most)
    indexes = range(added.first, added.first + len(members))
    # Past the window's reach, a windowed group's outcomes release them.
    kicked = {i: members[i - added.first] for i in indexes if i < added.released}
    await dispatch_members(
        ctx,
        group_id,
        added.token,
        kicked,
        depth=added.depth,
        cancellable=added.cancellable,
    )
    return indexes


def _check_takes_members(group_id: str, meta: GroupMeta) -> None:
    """Raise unless the group is open (not over) and not sealed."""
    if meta.state is GroupState.MISSING:
        raise GroupNotFoundError(group_id=shown(group_id))
    why = ""
    if not meta.open:
        why = "it was planned without open=True, its members fixed at planning"
    elif meta.state is not GroupState.OPEN:
        why = f"it is {meta.state.value}"
    elif meta.sealed:
        why = "it is sealed (handle.seal() fixed its total)"
    if why:
        raise GroupSealedError(group_id=shown(group_id), why=why)


async def seal_group(ctx: FanInContext, group_id: str, *, claimant: str) -> int:
    """Fix an open group's total (returned); every member having an outcome, finish it.

    ``claimant``: this seal's, the same when it is retried (its reply lost):
    the retry is told it holds the finaliser's lease, and enqueues the
    continuation (the deterministic task id keeps it to one run). Sealing a
    group sealed already, or over, changes nothing.
    """
    validate_group_id(group_id, derived=True)
    keys = GroupKeys(ctx.config.prefix, group_id)
    lease = ms(ctx.config.finaliser_lease)
    sealing = await ctx.scripts.seal_group(keys, lease_ms=lease, claimant=claimant)
    if sealing.code is Sealed.NO_GROUP:
        raise GroupNotFoundError(group_id=shown(group_id))
    if sealing.code is Sealed.CLAIMED:
        await finalise(ctx, group_id, sealing.token, claimant=claimant)
    return sealing.total


def seal_claimant(seal_token: str) -> str:
    """Who a seal claims a complete group as (one per ``seal()`` call)."""
    return f"{CLAIMANT}#seal-{seal_token}"
