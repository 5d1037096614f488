"""A chain's workflow record, typed."""

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from taskiq_fanin.domain.results import ChainState, MemberError, StepError
from taskiq_fanin.storage.records.fields import (
    FAILURE_PREFIX,
    RawHash,
    as_int,
    as_text,
    as_time,
)


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
        "run_released": "run_released",
        "member": "member",
        "outcome": "outcome",
        "payload": "payload",
        "step_undo": "step_undo",
        "given_up_step": "given_up_step",
        "moved_by": "moved_by",
        "on_error_state": "on_error_state",
        "on_error_until": "on_error_until",
        "on_error_attempt": "on_error_attempt",
        "on_error_by": "on_error_by",
        "on_error_released": "on_error_released",
        "on_error_retry_by": "on_error_retry_by",
        "on_error_redrives": "on_error_redrives",
        "settled": "settled",
        "version": "version",
        "workflow": "workflow",
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
    #: 'released' once its attempt released it for its retry, 'rebegun' once a
    #: copy of that attempt began since (no later attempt takes it over), ''.
    run_released: str = ""
    #: The label of the group member the chain is ('' if none), and the
    #: member's outcome and payload once the chain is done.
    member: str = ""
    outcome: str = ""
    payload: str = ""
    #: The compensation of a step that ran while the chain was cancelled (or
    #: given up at that step).
    step_undo: str = ""
    #: The step the sweep gave the chain up at: a copy of it ending later
    #: undoes itself.
    given_up_step: int | None = None
    moved_by: str = ""
    #: The error continuation's state once a copy of it began ('': none did;
    #: ``states.ON_ERROR_MOVES``) and its run lease: until when, which attempt,
    #: whose delivery.
    on_error_state: str = ""
    on_error_until: int = 0
    on_error_attempt: int = 0
    on_error_by: str = ""
    #: Its lease's mark, as ``run_released`` is a step's.
    on_error_released: str = ""
    #: Released for its retry: when the retry is due to have begun (epoch ms).
    on_error_retry_by: int = 0
    #: How many times the sweep kicked it again (``countRekick``).
    on_error_redrives: int = 0
    #: The sweep settled its end once (``markSettled``): a watched chain's.
    settled: bool = False
    #: The version it was started with ('' for none).
    version: str = ""
    #: Its name (``chain(..., name=...)``, else its first step's task name; ''
    #: in a record written before names were kept).
    workflow: str = ""

    @classmethod
    def from_hash(cls, raw: RawHash) -> "ChainRecord":
        """Read a chain's record (``HGETALL``); {}: the chain is missing."""
        f = as_text(raw)
        names = f.get("names")
        return cls(
            token=f.get("token", ""),
            state=ChainState(f.get("state") or ChainState.MISSING.value),
            step=as_int(f, "step"),
            steps=as_int(f, "steps"),
            step_names=tuple(str(n) for n in json.loads(names)) if names else (),
            started_at=as_time(f, "started"),
            updated_at=as_time(f, "updated"),
            finished_at=as_time(f, "finished"),
            deadline_ms=as_time(f, "span"),
            pending=f.get("pending", ""),
            error_entry=f.get("error", ""),
            failed_step=as_time(f, "failed_step"),
            failure_entries={
                int(name.removeprefix(FAILURE_PREFIX)): value
                for name, value in f.items()
                if name.startswith(FAILURE_PREFIX)
            },
            redrives=as_int(f, "redrives"),
            run_step=as_time(f, "run_step"),
            run_until=as_int(f, "run_until"),
            run_attempt=as_int(f, "run_attempt"),
            run_by=f.get("run_by", ""),
            run_released=f.get("run_released", ""),
            member=f.get("member", ""),
            outcome=f.get("outcome", ""),
            payload=f.get("payload", ""),
            step_undo=f.get("step_undo", ""),
            given_up_step=as_time(f, "given_up_step"),
            moved_by=f.get("moved_by", ""),
            on_error_state=f.get("on_error_state", ""),
            on_error_until=as_int(f, "on_error_until"),
            on_error_attempt=as_int(f, "on_error_attempt"),
            on_error_by=f.get("on_error_by", ""),
            on_error_released=f.get("on_error_released", ""),
            on_error_retry_by=as_int(f, "on_error_retry_by"),
            on_error_redrives=as_int(f, "on_error_redrives"),
            settled=bool(f.get("settled")),
            version=f.get("version", ""),
            workflow=f.get("workflow", ""),
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
