"""Reading a chain's workflow record: where the chain is, and how it ended.

The answer to "where is my video?": current step, state, times, and the error of
a failed step. Its transitions are scripts (``ChainScripts``).
"""

import json

from taskiq_fanin.chains.cursor import ChainCursor
from taskiq_fanin.context import FanInContext
from taskiq_fanin.model.config import ms
from taskiq_fanin.model.results import (
    ChainState,
    ChainStatus,
    MemberError,
    from_millis,
)
from taskiq_fanin.store.keys import ChainKeys, validate_chain_id
from taskiq_fanin.store.replies import Begin


def keys_of(ctx: FanInContext, chain_id: str) -> ChainKeys:
    """The keys of a chain's record."""
    return ChainKeys(ctx.config.prefix, chain_id)


async def status(ctx: FanInContext, chain_id: str) -> ChainStatus:
    """Current step, state, times and error of a chain, from its record."""
    validate_chain_id(chain_id, derived=True)
    record = await ctx.chain_scripts.read(keys_of(ctx, chain_id))
    if not record:
        return ChainStatus(chain_id=chain_id, state=ChainState.MISSING)
    return ChainStatus(
        chain_id=chain_id,
        state=ChainState(record["state"]),
        step=int(record["step"]),
        steps=int(record["steps"]),
        step_names=[str(name) for name in json.loads(record["names"])],
        started=from_millis(int(record["started"])),
        updated=from_millis(int(record["updated"])),
        failed_step=int(record["failed_step"]) if "failed_step" in record else None,
        error=MemberError.model_validate_json(record["error"])
        if "error" in record
        else None,
        failures={
            int(field.removeprefix("failure:")): MemberError.model_validate_json(value)
            for field, value in record.items()
            if field.startswith("failure:")
        },
    )


async def state(ctx: FanInContext, chain_id: str) -> ChainState:
    """The chain's state alone."""
    found = (await ctx.chain_scripts.read(keys_of(ctx, chain_id))).get("state")
    return ChainState(found) if found is not None else ChainState.MISSING


async def begin_step(
    ctx: FanInContext, cursor: ChainCursor, *, attempt: int, delivery: str
) -> Begin:
    """May this delivery of the cursor's step run (at that step, one copy)?"""
    return await ctx.chain_scripts.begin_step(
        keys_of(ctx, cursor.id),
        token=cursor.token,
        step=cursor.index,
        attempt=attempt,
        delivery=delivery,
        lease_ms=ms(ctx.config.lease),
    )


async def release_step(ctx: FanInContext, cursor: ChainCursor, *, attempt: int) -> None:
    """A step's attempt ended with a retry to come: let the retry run."""
    await ctx.chain_scripts.release_step(
        keys_of(ctx, cursor.id), token=cursor.token, step=cursor.index, attempt=attempt
    )
