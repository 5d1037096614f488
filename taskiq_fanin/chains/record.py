"""Reading a chain's workflow record: where the chain is, and how it ended.

The answer to "where is my video?": current step, state, times, and the error of
a failed step. Its transitions are scripts (``ChainScripts``).
"""

import json

from taskiq_fanin.context import FanInContext
from taskiq_fanin.model.results import ChainState, ChainStatus, from_millis
from taskiq_fanin.store.keys import LONGEST_DERIVED_ID, ChainKeys, validate_group_id


def keys_of(ctx: FanInContext, chain_id: str) -> ChainKeys:
    """The keys of a chain's record."""
    return ChainKeys(ctx.config.prefix, chain_id)


async def status(ctx: FanInContext, chain_id: str) -> ChainStatus:
    """Current step, state, times and error of a chain, from its record."""
    validate_group_id(chain_id, longest=LONGEST_DERIVED_ID)
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
        error=record.get("error"),
    )


async def state(ctx: FanInContext, chain_id: str) -> ChainState:
    """The chain's state alone."""
    (found,) = await ctx.chain_scripts.read_fields(keys_of(ctx, chain_id), "state")
    return ChainState(found) if found is not None else ChainState.MISSING


async def step_may_run(ctx: FanInContext, chain_id: str, step: int) -> bool:
    """True when step ``step`` may run: the chain is running and at that step."""
    found, current = await ctx.chain_scripts.read_fields(
        keys_of(ctx, chain_id), "state", "step"
    )
    if found is None:
        return True  # no record (expired): run rather than lose the work
    return found == ChainState.RUNNING.value and int(current or 0) <= step


async def pending(ctx: FanInContext, chain_id: str) -> str | None:
    """The kick of the step the chain is at, as recorded when it was made."""
    (raw,) = await ctx.chain_scripts.read_fields(keys_of(ctx, chain_id), "pending")
    return raw
