"""The stored records, typed: a group's meta and a chain's workflow record.

One class per Redis hash, as arq keeps a job's hash in one ``JobDef``: this
module (and the Lua scripts) alone know the hash's field names; everything else
reads the record's attributes, named as the options they hold (the stored
``span`` is ``deadline_ms``, ``sweep`` is ``sweep_policy``). ``tests/test_records.py``
keeps it so (it walks every other module for a field name used as a key).

Times are epoch ms on Redis's clock (``*_at``, ``run_until``); durations are ms
(``*_ms``). A field a record lacks (one written before the field was kept, or a
hash that is gone) reads as its default: a missing hash reads as state
``missing``. Ledger entries and errors are kept as stored and parsed when asked
for, so that the sweep's judgement of a record parses no JSON it does not use.
"""

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from taskiq_fanin.model.config import ms
from taskiq_fanin.model.options import ResolvedGroupOptions
from taskiq_fanin.model.results import (
    ChainState,
    FailurePolicy,
    GroupState,
    MemberError,
    StepError,
    SweepPolicy,
)
from taskiq_fanin.model.signature import Signature
from taskiq_fanin.store.scripts import RedisClient, text

RawHash = Mapping[str, str] | Mapping[bytes, bytes] | Mapping[Any, Any]
#: A chain's record keeps a failed step's error under ``failure:<step>``.
FAILURE_PREFIX = "failure:"


def as_text(raw: RawHash) -> dict[str, str]:
    """A hash as redis-py hands it back (bytes or text), as text."""
    return {text(name): text(value) for name, value in raw.items()}


def _int(fields: Mapping[str, str], name: str, default: int = 0) -> int:
    value = fields.get(name)
    return int(value) if value else default


def _time(fields: Mapping[str, str], name: str) -> int | None:
    value = fields.get(name)
    return int(value) if value else None


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
        "lost": "lost_count",
        "lost_members": "lost",
        "planned": "planned",
        "redrives": "redrives",
        "then_entry": "then",
        "on_error_entry": "on_error",
        "failure_policy": "policy",
        "sweep_policy": "sweep",
        "ttl_ms": "ttl",
        "deadline_ms": "span",
        "cancellable": "cancellable",
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
    }

    token: str = ""
    state: GroupState = GroupState.MISSING
    total: int = 0
    done: int = 0
    failed: int = 0
    #: How many members the sweep gave up on, and which.
    lost: int = 0
    lost_members: tuple[int, ...] = ()
    #: Every member was dispatched.
    planned: bool = False
    redrives: int = 0
    #: The continuations as the ledger keeps them ('' for none): see ``then``.
    then_entry: str = ""
    on_error_entry: str = ""
    failure_policy: FailurePolicy | None = None
    sweep_policy: SweepPolicy | None = None
    ttl_ms: int = 0
    #: The group's ``deadline`` option: ms from its planning (or re-drive) on.
    deadline_ms: int = 0
    cancellable: bool = False
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

    @classmethod
    def from_hash(cls, raw: RawHash) -> "GroupMeta":
        """Read a meta hash (``HGETALL``, or some fields of it); {}: missing."""
        f = as_text(raw)
        policy, sweep = f.get("policy"), f.get("sweep")
        lost = f.get("lost")
        return cls(
            token=f.get("token", ""),
            state=GroupState(f.get("state") or GroupState.MISSING.value),
            total=_int(f, "total"),
            done=_int(f, "done_count"),
            failed=_int(f, "failed_count"),
            lost=_int(f, "lost_count"),
            lost_members=tuple(int(i) for i in lost.split(",") if i) if lost else (),
            planned=f.get("planned") == "1",
            redrives=_int(f, "redrives"),
            then_entry=f.get("then", ""),
            on_error_entry=f.get("on_error", ""),
            failure_policy=FailurePolicy(policy) if policy else None,
            sweep_policy=SweepPolicy(sweep) if sweep else None,
            ttl_ms=_int(f, "ttl"),
            deadline_ms=_int(f, "span"),
            cancellable=f.get("cancellable") == "1",
            depth=_int(f, "depth", 1),
            created_at=_time(f, "created"),
            due_at=_time(f, "deadline"),
            expires_at=_time(f, "expires"),
            claimed_at=_time(f, "claimed_at"),
            dispatched=f.get("dispatched", ""),
            dispatched_at=_time(f, "dispatched_at"),
            started_at=_time(f, "started_at"),
            completed_at=_time(f, "completed_at"),
            cancelled_at=_time(f, "cancelled_at"),
            reclaimed_at=_time(f, "reclaimed_at"),
            redriven_at=_time(f, "redriven_at"),
            given_up_at=_time(f, "given_up_at"),
            run_until=_int(f, "run_until"),
            run_attempt=_int(f, "run_attempt"),
            run_by=f.get("run_by", ""),
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
}


def meta_options(options: ResolvedGroupOptions, *, depth: int) -> dict[str, str | int]:
    """A group's resolved options (and its nesting depth) as its meta keeps them."""
    written = {
        stored: write(getattr(options, name))
        for name, (stored, write) in META_FIELDS.items()
    }
    return {**written, "depth": depth}


@dataclass(frozen=True, slots=True)
class ChainRecord:
    """A chain's workflow record (``startChain`` writes it, the scripts move it)."""

    #: Python name -> the hash field it is stored under (``failures``: every
    #: field named ``failure:<step>``).
    STORED: ClassVar[Mapping[str, str]] = {
        "token": "token",
        "state": "state",
        "step": "step",
        "steps": "steps",
        "step_names": "names",
        "started_at": "started",
        "updated_at": "updated",
        "finished_at": "finished",
        "deadline_ms": "span",
        "pending": "pending",
        "error_entry": "error",
        "failed_step": "failed_step",
        "redrives": "redrives",
        "run_step": "run_step",
        "run_until": "run_until",
        "run_attempt": "run_attempt",
        "run_by": "run_by",
        "member": "member",
        "outcome": "outcome",
        "payload": "payload",
        "step_undo": "step_undo",
        "moved_by": "moved_by",
    }

    token: str = ""
    state: ChainState = ChainState.MISSING
    #: The step it is at, from 0 (once over: one past the last that ran).
    step: int = 0
    steps: int = 0
    step_names: tuple[str, ...] = ()
    started_at: int | None = None
    #: When the record last moved: a step is stuck ``deadline_ms`` after it.
    updated_at: int | None = None
    finished_at: int | None = None
    #: The chain's ``deadline``: ms a step may take (and a step's run lease).
    deadline_ms: int | None = None
    #: The current step's kick (a ``PendingStep`` as JSON), for the sweep.
    pending: str = ""
    #: The failed step's error as stored (a ``StepError`` as JSON): see ``error``.
    error_entry: str = ""
    failed_step: int | None = None
    #: Each failed step's error as stored, by step index: see ``failures``.
    failure_entries: Mapping[int, str] = field(default_factory=dict)
    redrives: int = 0
    #: A step's run lease: which step, until when, which attempt, whose delivery.
    run_step: int | None = None
    run_until: int = 0
    run_attempt: int = 0
    run_by: str = ""
    #: The label of the group member the chain is ('' if none), and the
    #: member's outcome and payload once the chain is done.
    member: str = ""
    outcome: str = ""
    payload: str = ""
    #: The compensation of a step that ran while the chain was cancelled.
    step_undo: str = ""
    moved_by: str = ""

    @classmethod
    def from_hash(cls, raw: RawHash) -> "ChainRecord":
        """Read a chain's record (``HGETALL``); {}: the chain is missing."""
        f = as_text(raw)
        names = f.get("names")
        return cls(
            token=f.get("token", ""),
            state=ChainState(f.get("state") or ChainState.MISSING.value),
            step=_int(f, "step"),
            steps=_int(f, "steps"),
            step_names=tuple(str(n) for n in json.loads(names)) if names else (),
            started_at=_time(f, "started"),
            updated_at=_time(f, "updated"),
            finished_at=_time(f, "finished"),
            deadline_ms=_time(f, "span"),
            pending=f.get("pending", ""),
            error_entry=f.get("error", ""),
            failed_step=_time(f, "failed_step"),
            failure_entries={
                int(name.removeprefix(FAILURE_PREFIX)): value
                for name, value in f.items()
                if name.startswith(FAILURE_PREFIX)
            },
            redrives=_int(f, "redrives"),
            run_step=_time(f, "run_step"),
            run_until=_int(f, "run_until"),
            run_attempt=_int(f, "run_attempt"),
            run_by=f.get("run_by", ""),
            member=f.get("member", ""),
            outcome=f.get("outcome", ""),
            payload=f.get("payload", ""),
            step_undo=f.get("step_undo", ""),
            moved_by=f.get("moved_by", ""),
        )

    @property
    def error(self) -> StepError | None:
        """Why the chain failed: the failed step's error, parsed."""
        return (
            StepError.model_validate_json(self.error_entry)
            if self.error_entry
            else None
        )

    @property
    def failures(self) -> dict[int, MemberError]:
        """In a chain that kept going past failures: each failed step's error."""
        return {
            step: MemberError.model_validate_json(value)
            for step, value in self.failure_entries.items()
        }


Record = TypeVar("Record", GroupMeta, ChainRecord)


async def read_fields(
    client: RedisClient, key: str, record: type[Record], *names: str
) -> Record:
    """Only these fields of a record (by attribute name): one ``HGET`` or ``HMGET``."""
    stored = [record.STORED[name] for name in names]
    if len(stored) == 1:
        values: list[Any] = [await client.hget(key, stored[0])]
    else:
        values = await client.hmget(key, stored)
    found = {
        name: value
        for name, value in zip(stored, values, strict=True)
        if value is not None
    }
    return record.from_hash(found)


#: Every field name a group's meta or a chain's record is stored under (and the
#: prefix of a chain's ``failure:<step>``): what no module outside this one may
#: use as a key (``tests/test_records.py``).
STORED_FIELDS = frozenset(
    {*GroupMeta.STORED.values(), *ChainRecord.STORED.values(), FAILURE_PREFIX}
)
