"""A group's meta hash, typed, and how a group's options are written into it."""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from taskiq_fanin.domain.config import ms
from taskiq_fanin.domain.options import ResolvedGroupOptions
from taskiq_fanin.domain.results import FailurePolicy, GroupState, SweepPolicy
from taskiq_fanin.domain.signature import Signature
from taskiq_fanin.storage.records.fields import (
    RawHash,
    as_int,
    as_text,
    as_time,
)

#: A run lease's mark once its attempt released it for its retry (the Lua
#: prelude's ``RELEASED``).
RELEASED = "released"


def _ledger_entry(value: Signature | None) -> str:
    return value.to_ledger() if value is not None else ""


def _signature(entry: str) -> Signature | None:
    return Signature.from_ledger(entry) if entry else None


@dataclass(frozen=True, slots=True)
class GroupMeta:
    """A group's meta hash (``createGroup`` writes it, the scripts move it)."""

    #: Python name -> the hash field it is stored under: the only such list.
    STORED: ClassVar[Mapping[str, str]] = {
        "token": "token",
        "state": "state",
        "total": "total",
        "done": "done_count",
        "failed": "failed_count",
        "skipped": "skipped_count",
        "lost": "lost_count",
        "lost_next": "lost_next",
        "planned": "planned",
        "sealed": "sealed",
        "open": "open",
        "sealed_at": "sealed_at",
        "digest": "digest",
        "version": "version",
        "workflow": "workflow",
        "planner_at": "planner_at",
        "redrives": "redrives",
        "redrive_next": "redrive_next",
        "then_entry": "then",
        "on_error_entry": "on_error",
        "failure_policy": "policy",
        "sweep_policy": "sweep",
        "ttl_ms": "ttl",
        "deadline_ms": "span",
        "cancellable": "cancellable",
        "results_inline_max": "inline_max",
        "max_in_flight": "max_in_flight",
        "depth": "depth",
        "created_at": "created",
        "due_at": "deadline",
        "expires_at": "expires",
        "claimed_at": "claimed_at",
        "dispatched": "dispatched",
        "dispatched_at": "dispatched_at",
        "started_at": "started_at",
        "completed_at": "completed_at",
        "cancelled_at": "cancelled_at",
        "reclaimed_at": "reclaimed_at",
        "redriven_at": "redriven_at",
        "given_up_at": "given_up_at",
        "run_until": "run_until",
        "run_attempt": "run_attempt",
        "run_by": "run_by",
        "run_released": "run_released",
        "run_retry_by": "run_retry_by",
        "continuation_redrives": "continuation_redrives",
        "continuation_redriven_at": "continuation_redriven_at",
    }

    token: str = ""
    state: GroupState = GroupState.MISSING
    total: int = 0
    #: Members done, the skipped ones among them (``skipped``).
    done: int = 0
    failed: int = 0
    skipped: int = 0
    #: How many members the sweep gave up on (their indexes are in the group's
    #: lost set: the meta stays small, whatever the group's width).
    lost: int = 0
    #: Where the sweep's give-up pass goes on (``giving_up`` only).
    lost_next: int = 0
    #: Every member was dispatched.
    planned: bool = False
    #: The ledger takes no more chunks (every member written; none is kicked before).
    sealed: bool = False
    #: Planned with ``open=True``: members are added until it is sealed.
    open: bool = False
    #: When an open group was sealed (``None``: not sealed by a call, or not open).
    sealed_at: int | None = None
    #: What its members are (``groups/ledger.py``'s ``digest``): planning the id
    #: again with others is refused; '' in a group made before digests were.
    digest: str = ""
    #: The version it was planned with ('' for none).
    version: str = ""
    #: Its name (``group(..., name=...)``, else its continuation's or first
    #: member's task name; '' in a meta written before names were kept).
    workflow: str = ""
    #: When the planner last wrote a chunk: its lease runs from then.
    planner_at: int | None = None
    redrives: int = 0
    #: Where the sweep's re-drive pass goes on at its next visit (0: no pass).
    redrive_next: int = 0
    #: The continuations as the ledger keeps them ('' for none): see ``then``.
    then_entry: str = ""
    on_error_entry: str = ""
    failure_policy: FailurePolicy | None = None
    sweep_policy: SweepPolicy | None = None
    ttl_ms: int = 0
    #: The group's ``deadline`` option: ms from its planning (or re-drive) on.
    deadline_ms: int = 0
    cancellable: bool = False
    #: More members than this: the continuation reads its results by reference
    #: (``None``: a group written before the option was kept, inline).
    results_inline_max: int | None = None
    #: At most this many members queued or running at once (``None``: no
    #: window; the meta keeps 0 for it, as the scripts read it).
    max_in_flight: int | None = None
    depth: int = 1
    created_at: int | None = None
    #: When an open group is stuck: its deadline, pushed on by a re-drive.
    due_at: int | None = None
    expires_at: int | None = None
    claimed_at: int | None = None
    #: Which continuation was enqueued (``then``, ``on_error`` or ``none``).
    dispatched: str = ""
    dispatched_at: int | None = None
    started_at: int | None = None
    completed_at: int | None = None
    cancelled_at: int | None = None
    reclaimed_at: int | None = None
    redriven_at: int | None = None
    given_up_at: int | None = None
    #: The continuation's run lease: until when, which attempt, whose delivery.
    run_until: int = 0
    run_attempt: int = 0
    run_by: str = ""
    #: 'released' once its attempt released it for its retry, 'rebegun' once a
    #: copy of that attempt began since (no later attempt takes it over), ''.
    run_released: str = ""
    #: Released for its retry: when the retry is due to have begun (epoch ms;
    #: ``releaseContinuation``): until then the sweep counts nothing lost.
    run_retry_by: int | None = None
    #: How many times the sweep dispatched an overdue continuation again, and
    #: when last (``countRedispatch``; at most ``max_redrives``).
    continuation_redrives: int = 0
    continuation_redriven_at: int | None = None

    @classmethod
    def stored_as(cls, name: str) -> str:
        """The hash field the attribute ``name`` is stored under (to read it alone)."""
        return cls.STORED[name]

    @classmethod
    def from_hash(cls, raw: RawHash) -> "GroupMeta":
        """Read a meta hash (``HGETALL``, or some fields of it); {}: missing."""
        f = as_text(raw)
        policy, sweep = f.get("policy"), f.get("sweep")
        return cls(
            token=f.get("token", ""),
            state=GroupState(f.get("state") or GroupState.MISSING.value),
            total=as_int(f, "total"),
            done=as_int(f, "done_count"),
            failed=as_int(f, "failed_count"),
            skipped=as_int(f, "skipped_count"),
            lost=as_int(f, "lost_count"),
            lost_next=as_int(f, "lost_next"),
            planned=f.get("planned") == "1",
            sealed=f.get("sealed", "1") == "1",
            open=f.get("open") == "1",
            sealed_at=as_time(f, "sealed_at"),
            digest=f.get("digest", ""),
            version=f.get("version", ""),
            workflow=f.get("workflow", ""),
            planner_at=as_time(f, "planner_at"),
            redrives=as_int(f, "redrives"),
            redrive_next=as_int(f, "redrive_next"),
            then_entry=f.get("then", ""),
            on_error_entry=f.get("on_error", ""),
            failure_policy=FailurePolicy(policy) if policy else None,
            sweep_policy=SweepPolicy(sweep) if sweep else None,
            ttl_ms=as_int(f, "ttl"),
            deadline_ms=as_int(f, "span"),
            cancellable=f.get("cancellable") == "1",
            results_inline_max=as_int(f, "inline_max") or None,
            max_in_flight=as_int(f, "max_in_flight") or None,
            depth=as_int(f, "depth", 1),
            created_at=as_time(f, "created"),
            due_at=as_time(f, "deadline"),
            expires_at=as_time(f, "expires"),
            claimed_at=as_time(f, "claimed_at"),
            dispatched=f.get("dispatched", ""),
            dispatched_at=as_time(f, "dispatched_at"),
            started_at=as_time(f, "started_at"),
            completed_at=as_time(f, "completed_at"),
            cancelled_at=as_time(f, "cancelled_at"),
            reclaimed_at=as_time(f, "reclaimed_at"),
            redriven_at=as_time(f, "redriven_at"),
            given_up_at=as_time(f, "given_up_at"),
            run_until=as_int(f, "run_until"),
            run_attempt=as_int(f, "run_attempt"),
            run_by=f.get("run_by", ""),
            run_released=f.get("run_released", ""),
            run_retry_by=as_time(f, "run_retry_by"),
            continuation_redrives=as_int(f, "continuation_redrives"),
            continuation_redriven_at=as_time(f, "continuation_redriven_at"),
        )

    @property
    def then(self) -> Signature | None:
        """The continuation, parsed from its ledger entry."""
        return _signature(self.then_entry)

    @property
    def on_error(self) -> Signature | None:
        """The error continuation, parsed from its ledger entry."""
        return _signature(self.on_error_entry)

    @property
    def retry_due_at(self) -> int | None:
        """Released for its retry: when the retry is due to have begun (else None)."""
        return self.run_retry_by if self.run_released == RELEASED else None

    @property
    def released(self) -> int:
        """How many ledger indexes (from 0) have been kicked or may be: the window.

        Not stored: each recorded outcome releases the next index, so it is
        ``max_in_flight`` past the outcomes recorded (``recordOutcome`` works
        it out the same way), never more than the ledger.
        """
        if self.max_in_flight is None:
            return self.total
        return min(self.total, self.max_in_flight + self.done + self.failed)

    @property
    def in_flight(self) -> int:
        """Members released but without an outcome: queued or running."""
        if self.state is not GroupState.OPEN:
            return 0
        return max(self.released - self.done - self.failed - self.lost, 0)

    @property
    def waiting(self) -> int:
        """Members of a windowed group not released yet."""
        if self.state is not GroupState.OPEN:
            return 0
        return max(self.total - self.released, 0)

    @property
    def finished_at(self) -> int | None:
        """When the group reached its end (completed or cancelled), if it has."""
        if self.state is GroupState.COMPLETED:
            return self.completed_at
        if self.state is GroupState.CANCELLED:
            return self.cancelled_at
        return None


#: Where each option of a group is kept in its meta, and how it is written. Every
#: option has an entry (a test checks): none can be dropped on the way.
META_FIELDS: dict[str, tuple[str, Callable[[Any], str | int]]] = {
    "then": ("then", _ledger_entry),
    "on_error": ("on_error", _ledger_entry),
    "failure_policy": ("policy", lambda policy: policy.value),
    "sweep_policy": ("sweep", lambda policy: policy.value),
    "ttl": ("ttl", ms),
    "deadline": ("span", ms),
    "cancellable": ("cancellable", int),
    "open": ("open", int),
    "results_inline_max": ("inline_max", int),
    "max_in_flight": ("max_in_flight", lambda most: most or 0),
    "version": ("version", lambda version: version or ""),
    "name": ("workflow", lambda name: name or ""),
}


def meta_options(
    options: ResolvedGroupOptions, *, depth: int, digest: str = ""
) -> dict[str, str | int]:
    """A group's resolved options, nesting depth and plan digest as its meta keeps them.

    An empty ``digest`` is left out: a plan the library derived is never refused.
    """
    written: dict[str, str | int] = {
        stored: write(getattr(options, name))
        for name, (stored, write) in META_FIELDS.items()
    }
    written["depth"] = depth
    if digest:
        written["digest"] = digest
    return written
