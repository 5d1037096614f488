"""The sweep: run it from Python, schedule it as a task, read its report.

``sweep`` is also at the top level; ``taskiq-fanin sweep`` runs the same from
the command line.
"""

from taskiq_fanin.api.sweep_task import SWEEP_TASK_NAME, register_sweep_task, sweep
from taskiq_fanin.sweep.report import Finding, FindingKind, SweepAction, SweepReport

__all__ = [
    "SWEEP_TASK_NAME",
    "Finding",
    "FindingKind",
    "SweepAction",
    "SweepReport",
    "register_sweep_task",
    "sweep",
]
