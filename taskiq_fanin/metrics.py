"""Prometheus metrics, when ``prometheus_client`` is installed; no-ops otherwise.

Every event is also logged with structured ``extra`` fields (``fanin_event``,
``group_id``, ...), so metrics are an addition, never the only signal. Alert on
stuck groups with ``taskiq_fanin_stuck_groups > 0`` (set by each sweep) or on
``increase(taskiq_fanin_sweep_findings_total{kind="stuck"}[15m]) > 0``; on
anything past its deadline with ``taskiq_fanin_overdue_workflows > 0``
(``docs/metrics.md``).
"""

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any


class _NoMetric:
    """Stands in for a metric when prometheus_client is not installed."""

    def labels(self, *_: Any, **__: Any) -> "_NoMetric":
        return self

    def inc(self, amount: float = 1) -> None:
        """Do nothing."""

    def set(self, value: float) -> None:
        """Do nothing."""

    def observe(self, value: float) -> None:
        """Do nothing."""


try:
    from prometheus_client import Counter, Gauge, Histogram
except ImportError:  # pragma: no cover - depends on the environment
    GROUPS_PLANNED: Any = _NoMetric()
    GROUPS_FINALISED: Any = _NoMetric()
    MEMBERS_RECORDED: Any = _NoMetric()
    MEMBERS_REDRIVEN: Any = _NoMetric()
    SWEEP_FINDINGS: Any = _NoMetric()
    STUCK_GROUPS: Any = _NoMetric()
    DISPATCH_LATENCY: Any = _NoMetric()
    WAITING_SECONDS: Any = _NoMetric()
    WORKFLOW_SECONDS: Any = _NoMetric()
    STEP_WAIT_SECONDS: Any = _NoMetric()
    OPEN_WORKFLOWS: Any = _NoMetric()
    OVERDUE_WORKFLOWS: Any = _NoMetric()
    #: Whether anything is observed: a duration's reads are skipped otherwise.
    ENABLED = False
else:
    ENABLED = True
    GROUPS_PLANNED = Counter(
        "taskiq_fanin_groups_planned_total", "Groups planned and dispatched."
    )
    GROUPS_FINALISED = Counter(
        "taskiq_fanin_groups_finalised_total",
        "Groups whose continuation was dispatched, by continuation kind.",
        ["continuation"],
    )
    MEMBERS_RECORDED = Counter(
        "taskiq_fanin_members_recorded_total",
        "Member outcomes recorded, by outcome (done, failed, skipped).",
        ["outcome"],
    )
    MEMBERS_REDRIVEN = Counter(
        "taskiq_fanin_members_redriven_total", "Members kicked again by the sweep."
    )
    SWEEP_FINDINGS = Counter(
        "taskiq_fanin_sweep_findings_total", "Sweep findings, by kind.", ["kind"]
    )
    STUCK_GROUPS = Gauge(
        "taskiq_fanin_stuck_groups",
        "Groups open past their deadline at the last sweep.",
    )
    DISPATCH_LATENCY = Histogram(
        "taskiq_fanin_continuation_dispatch_seconds",
        "From the claim of the last member to the continuation's dispatch.",
    )
    WAITING_SECONDS = Histogram(
        "taskiq_fanin_waiting_seconds",
        "Time task bodies spent awaiting other tasks' results in a worker "
        "(the waiting-parent pattern), by the waiting task's name.",
        ["task_name"],
        buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300),
    )
    WORKFLOW_SECONDS = Histogram(
        "taskiq_fanin_workflow_duration_seconds",
        "End to end, on Redis's clock: a group from its planning to its "
        "continuation's completion (no continuation: to its completion), or to "
        "its cancel; a chain from its start to its end. By kind (group, "
        "chain), workflow name and the state it ended in.",
        ["kind", "workflow", "state"],
        buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200,
                 21600, 86400),
    )  # fmt: skip
    STEP_WAIT_SECONDS = Histogram(
        "taskiq_fanin_chain_step_wait_seconds",
        "A chain step's queue wait, on Redis's clock: from the previous step's "
        "end (the chain's start, for its first step) to the step's body "
        "beginning. By the chain's workflow name.",
        ["workflow"],
        buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
                 300, 900, 3600),
    )  # fmt: skip
    OPEN_WORKFLOWS = Gauge(
        "taskiq_fanin_open_workflows",
        "Groups (kind=group) and chains (kind=chain) not ended, at the last "
        "sweep: the entries of its indexes.",
        ["kind"],
    )
    OVERDUE_WORKFLOWS = Gauge(
        "taskiq_fanin_overdue_workflows",
        "Groups and chains past their deadline and not ended (or whose "
        "continuation, finaliser or on_error is overdue), found by the last "
        "sweep.",
        ["kind"],
    )


def record_sweep(kinds: Iterable[str], *, stuck: int) -> None:
    """Count a sweep's findings by kind, and set the stuck-groups gauge."""
    for kind in kinds:
        SWEEP_FINDINGS.labels(kind=kind).inc()
    STUCK_GROUPS.set(stuck)


_RECORDED = {
    outcome: MEMBERS_RECORDED.labels(outcome=outcome)
    for outcome in ("done", "failed", "skipped")
}


def member_recorded(outcome: str) -> None:
    """Count one recorded member outcome (the labelled child is looked up once)."""
    _RECORDED[outcome].inc()


def waited(task_name: str, seconds: float) -> None:
    """A task body spent ``seconds`` awaiting another task's result."""
    WAITING_SECONDS.labels(task_name=task_name).observe(seconds)


#: How many ended workflows a process remembers having observed (see
#: :func:`first_end`).
REMEMBERED = 10_000
_observed: "OrderedDict[str, None]" = OrderedDict()


def first_end(key: str) -> bool:
    """True the first time this process is told of ``key``'s end; False after.

    The scripts tell a workflow's end once (``APPLIED``); a call retried with
    the same delivery after its reply was lost is told it again, in the same
    process: this keeps it from being observed twice.
    """
    if key in _observed:
        return False
    _observed[key] = None
    if len(_observed) > REMEMBERED:
        _observed.popitem(last=False)
    return True


def workflow_ended(kind: str, workflow: str, state: str, seconds: float) -> None:
    """A group or a chain ended: its duration from planning (or start) to its end."""
    WORKFLOW_SECONDS.labels(kind=kind, workflow=workflow, state=state).observe(
        max(seconds, 0.0)
    )


def step_waited(workflow: str, seconds: float) -> None:
    """A chain step's body began ``seconds`` after the step was kicked."""
    STEP_WAIT_SECONDS.labels(workflow=workflow).observe(max(seconds, 0.0))


def record_workflows(kind: str, *, open_: int, overdue: int) -> None:
    """Set the open and overdue gauges of groups or chains (the sweep's)."""
    OPEN_WORKFLOWS.labels(kind=kind).set(open_)
    OVERDUE_WORKFLOWS.labels(kind=kind).set(overdue)
