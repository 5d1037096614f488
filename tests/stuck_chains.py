"""Chains the sweep finds stuck within a test: a step's deadline short enough for
it, and the dry-run sweep that says so (a condition for ``eventually``).
"""

from taskiq_fanin import FanInMiddleware, sweep
from taskiq_fanin.sweeping import FindingKind

DEADLINE = 0.5  # seconds a chain step may take before the sweep looks at it


async def chain_stuck(fanin: FanInMiddleware, chain_id: str) -> bool:
    report = await sweep(fanin, dry_run=True)
    return any(
        f.group_id == chain_id and f.kind is FindingKind.CHAIN_STUCK
        for f in report.findings
    )
