"""The sweep's look at chains: report those whose step has not moved in time.

A chain stops if a worker dies between its record moving on and the next
step's kick; reported, it does not stay silent.
"""

from typing import TYPE_CHECKING

from taskiq_fanin.chain_record import ChainState
from taskiq_fanin.inspection import text
from taskiq_fanin.keys import ChainKeys, chain_index_key
from taskiq_fanin.sweep_report import Finding, FindingKind, SweepAction

if TYPE_CHECKING:
    from taskiq_fanin.middleware import FanInMiddleware


async def sweep_chains(
    fanin: "FanInMiddleware", *, now: int, dry_run: bool, batch: int
) -> tuple[int, list[Finding]]:
    """Examine up to ``batch`` due chains: how many, and the stuck ones found."""
    index = chain_index_key(fanin.config.prefix)
    due = await fanin.redis.zrangebyscore(index, "-inf", now, start=0, num=batch)
    deadline_ms = int(fanin.config.deadline * 1000)
    findings: list[Finding] = []
    for raw in due:
        chain_id = text(raw)
        status = await fanin.chain_record.status(
            ChainKeys(fanin.config.prefix, chain_id)
        )
        if status.state is not ChainState.RUNNING:
            if not dry_run:  # over, or expired: nothing left to watch
                await fanin.redis.zrem(index, chain_id)
            continue
        moved_ms = int(status.updated.timestamp() * 1000) if status.updated else now
        if moved_ms + deadline_ms > now:
            if not dry_run:
                await fanin.redis.zadd(index, {chain_id: moved_ms + deadline_ms})
            continue
        findings.append(
            Finding(
                group_id=chain_id,
                kind=FindingKind.CHAIN_STUCK,
                action=SweepAction.REPORT,
                applied=not dry_run,
                state=status.state.value,
                total=status.steps,
                done=status.step,
                overdue_seconds=(now - moved_ms - deadline_ms) / 1000,
                age_seconds=(now - int(status.started.timestamp() * 1000)) / 1000
                if status.started
                else 0.0,
                note=f"at step {status.step} ({status.current})",
            )
        )
        if not dry_run:  # seen in turn with the others at the next sweep
            await fanin.redis.zadd(index, {chain_id: now})
    return len(due), findings
