"""Random interleavings against the real Lua scripts (hypothesis, stateful).

A group's members are delivered, delivered again, retried after a lost reply
(the same delivery asking again), fail, race the sweep (re-drive, give up,
reclaim), crash as finalisers, get cancelled, and see their leases run out; a
continuation's copies start, fail, are released and complete. Chains move,
fail, keep going, are cancelled and re-driven. After every step:

- the continuation is claimed by exactly one delivery, and only once every
  member is terminal (or the sweep gave up on the rest);
- done and failed never share a member, and the counts match the sets;
- states only move along their table (``domain/states.py``);
- one copy of a continuation or a chain step runs at a time.

Run on fakeredis (the scripts through lupa) and on a real redis-server.
"""

import asyncio
import uuid
from collections.abc import Awaitable
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from redis.asyncio import Redis

from taskiq_fanin.domain.config import DEFAULT_OUTCOME_STREAM_MAX as STREAM_MAX
from taskiq_fanin.domain.states import may_move
from taskiq_fanin.storage import releases
from taskiq_fanin.storage.chain_scripts import ChainScripts
from taskiq_fanin.storage.group_scripts import GroupScripts
from taskiq_fanin.storage.keys import ChainKeys, GroupKeys
from taskiq_fanin.storage.replies import (
    Advanced,
    Begin,
    Failed,
    Finished,
    Outcome,
    Recorded,
)
from taskiq_fanin.transport.pipeline import PipelineBatcher

T = TypeVar("T")
#: What the runs did, for the summary line (``pytest -s``).
TALLY: dict[str, int] = {}


def count(what: str, n: int = 1) -> None:
    TALLY[what] = TALLY.get(what, 0) + n


class Scripted(RuleBasedStateMachine):
    """A machine that drives the async scripts from a loop of its own."""

    #: A factory of the client each run uses (fakeredis, or the real server).
    new_client: Any = None

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.client: Redis = self.run(self._connect())
        self.prefix = f"hyp-{uuid.uuid4().hex[:10]}"
        count("interleavings")

    async def _connect(self) -> Redis:
        client: Redis = type(self).new_client()
        return client

    def run(self, work: Awaitable[T]) -> T:
        count("redis calls")
        return self.loop.run_until_complete(work)

    def teardown(self) -> None:
        async def clean() -> None:
            keys = [k async for k in self.client.scan_iter(match=f"{self.prefix}*")]
            if keys:
                await self.client.delete(*keys)
            await self.client.aclose()

        self.loop.run_until_complete(clean())
        self.loop.close()


class GroupLife(Scripted):
    """One group of a few members, and everything that can happen to it."""

    @initialize(total=st.integers(0, 4), window=st.sampled_from([0, 1, 1, 2]))
    def plan(self, total: int, window: int) -> None:
        pipeline = PipelineBatcher(self.client)
        self.scripts = GroupScripts(self.client, pipeline)
        self.keys = GroupKeys(self.prefix, "g")
        self.total = total
        options = {"then": '{"t":"then"}', "on_error": "", "policy": "continue",
                   "sweep": "redrive", "span": 60_000, "ttl": 3_600_000,
                   "cancellable": 0, "depth": 1,
                   "max_in_flight": window}  # fmt: skip
        self.run(
            self.scripts.create_group(
                self.keys, token="tok", options=options,
                members=[f'{{"t":"m","a":[{i}]}}' for i in range(total)],
                planner_lease_ms=60_000, claimant="planner",
            )
        )  # fmt: skip
        self.terminal: dict[int, str] = {}
        #: A windowed group's (0: none) members kicked so far: its first window,
        #: then what each outcome released (unless its worker died first).
        self.window = window
        self.kicked = set(range(min(window, total) if window else total))
        self.deliveries: dict[int, list[str]] = {}
        self.claimed_by: set[str] = set()  # deliveries (or the sweep) told "claim"
        self.holder: str | None = None  # who may finalise now
        self.dispatched = self.completed = 0
        self.given_up = False
        self.give_up_at = 0  # where the sweep's give-up pass goes on
        self.state = "open"
        self.run_lease: tuple[str, int] | None = None  # (delivery, attempt)
        if total == 0:  # nothing to wait for: complete at once, the planner's
            self.state, self.holder = "claimed", "planner"
            self.claimed_by.add("planner")

    def read(self) -> dict[str, str]:
        raw = self.run(self.client.hgetall(self.keys.meta))
        return {k.decode(): v.decode() for k, v in raw.items()}

    @precondition(lambda self: self.total > 0)
    @rule(
        index=st.integers(0, 3),
        failed=st.booleans(),
        again=st.booleans(),
        dies=st.booleans(),
    )
    def deliver(self, index: int, failed: bool, again: bool, dies: bool) -> None:
        """A member's delivery records its outcome; ``again``: a retry whose
        first reply was lost (the same delivery), else a new delivery; ``dies``:
        its worker dies before kicking what the outcome released."""
        if not self.kicked:
            return  # nothing of the group is in any queue
        index = sorted(self.kicked)[index % len(self.kicked)]
        used = self.deliveries.setdefault(index, [])
        delivery = used[-1] if again and used else uuid.uuid4().hex[:8]
        used.append(delivery)
        outcome = Outcome.FAILED if failed else Outcome.DONE
        was_open = self.state == "open"
        giving_up = self.state == "giving_up"
        code, collected, released = self.run(
            self.scripts.record_outcome(
                self.keys, token="tok", index=index, outcome=outcome, payload="",
                lease_ms=60_000, claimant="w", delivery=delivery, stream_max=STREAM_MAX,
            )
        )  # fmt: skip
        count("deliveries")
        if giving_up:  # being given up: nothing is recorded any more
            assert code is Recorded.FINALISED
        if released is not None:
            # Only an open windowed group releases, only what it has not kicked
            # (unless a kick may have died), and never past the ledger.
            assert was_open
            assert self.window
            assert released.index < self.total
            assert released.index < self.window + len(self.terminal) + (
                code is Recorded.RECORDED
            )
            if not dies:
                self.kicked.add(released.index)
                count("released members kicked")
        if code in (Recorded.RECORDED, Recorded.CLAIMED) and was_open:
            self.terminal.setdefault(index, outcome.value)
        if code is Recorded.COUNTED_CANCELLED:
            # Ran through a cancel: counted, and nothing claimed or moved.
            assert self.state == "cancelled"
            assert collected is None
            assert index not in self.terminal
            self.terminal[index] = outcome.value
        if code is Recorded.CLAIMED:
            assert collected is not None
            if delivery not in self.claimed_by:
                # Claimed now: every member has an outcome, none lost.
                assert was_open
                assert len(self.terminal) == self.total
                self.holder = f"w#{delivery}"
            self.claimed_by.add(delivery)
            assert sorted(collected.done + collected.failed) == list(range(self.total))
        if code is Recorded.CONFLICT:
            assert self.terminal[index] != outcome.value

    @precondition(lambda self: self.holder is not None)
    @rule(kind=st.sampled_from(["then", "none"]), crash=st.booleans())
    def finalise(self, kind: str, crash: bool) -> None:
        """The claim's holder records its dispatch, or dies before it does."""
        if crash:
            count("finaliser crashes")
            self.holder = None
            return
        recorded = self.run(
            self.scripts.mark_dispatched(
                self.keys, token="tok", dispatched=kind, tombstone_ms=60_000,
                claimant=self.holder or "",
            )
        )  # fmt: skip
        self.dispatched += recorded
        self.holder = None

    @rule()
    def lease_runs_out(self) -> None:
        """Time passes: the finaliser's lease and a running copy's lease end."""
        self.run(self.client.delete(self.keys.claim))
        if self.state not in ("completed", "cancelled"):
            self.run(self.client.hset(self.keys.meta, "run_until", 0))
        self.run_lease = None
        count("leases expired")

    @rule()
    def sweep_reclaims(self) -> None:
        if self.run(
            self.scripts.reclaim_finaliser(
                self.keys, token="tok", lease_ms=60_000, claimant="sweep"
            )
        ):
            self.holder = "sweep"
            count("finalisers reclaimed")

    @rule(window=st.integers(1, 3), stale=st.booleans())
    def sweep_gives_up(self, window: int, stale: bool) -> None:
        """The sweep gives up a window of the ledger; ``stale``: a second sweep
        asks for a window where the pass is not."""
        start = self.give_up_at + stale
        given = self.run(
            self.scripts.give_up(
                self.keys, token="tok", lease_ms=60_000, claimant="s",
                start=start, stop=start + window,
            )
        )  # fmt: skip
        if stale or not given.applied:
            assert not given.applied
            return
        assert self.state in ("open", "giving_up")
        gone_over = set(range(min(start + window, self.total)))
        lost = {int(m) for m in self.run(self.client.smembers(self.keys.lost))}
        assert lost == gone_over - set(self.terminal)
        assert given.lost == len(lost)
        count("give-up windows")
        if given.claimed:
            assert given.lost == self.total - len(self.terminal)
            self.given_up, self.holder = True, "s"
            self.claimed_by.add("sweep")
            count("groups given up")
        else:
            self.give_up_at = given.next

    @rule()
    def sweep_redrives(self) -> None:
        redriven = self.run(
            self.scripts.redrive_group(self.keys, token="tok", max_redrives=100)
        )
        if redriven.redriven:
            # As the sweep does: of a windowed group, its released members only.
            released = self.run(releases.released(self.scripts.send, self.keys))
            missing = self.run(self.scripts.missing_members(self.keys, 0, released))
            assert set(missing) == set(range(released)) - set(self.terminal)
            self.kicked |= set(missing)

    @rule()
    def cancel(self) -> None:
        if self.run(self.scripts.cancel_group(self.keys, tombstone_ms=60_000)):
            assert self.state == "open"

    @rule(copy=st.integers(0, 2), attempt=st.integers(0, 1))
    def continuation_starts(self, copy: int, attempt: int) -> None:
        delivery = f"c{copy}"
        begun = self.run(
            self.scripts.begin_continuation(
                self.keys,
                token="tok",
                attempt=attempt,
                delivery=delivery,
                lease_ms=60_000,
            )
        )
        if begun is Begin.RUN:
            if self.run_lease is not None:
                held_by, held_attempt = self.run_lease
                # One copy at a time: only its own delivery, or a later attempt.
                assert held_by == delivery or attempt > held_attempt
            self.run_lease = (delivery, attempt)
            assert self.state in ("claimed", "dispatched", "running")
            count("continuation runs granted")
        if self.completed:
            assert begun is Begin.SKIP

    @precondition(lambda self: self.run_lease is not None)
    @rule(succeeded=st.booleans())
    def continuation_ends(self, succeeded: bool) -> None:
        held_by, attempt = self.run_lease or ("", 0)
        if succeeded:
            self.completed += self.run(
                self.scripts.mark_completed(self.keys, token="tok", tombstone_ms=60_000)
            )
        else:
            self.run(
                self.scripts.release_continuation(
                    self.keys, token="tok", attempt=attempt, delivery=held_by
                )
            )
        self.run_lease = None

    @invariant()
    def holds(self) -> None:
        if not hasattr(self, "keys"):
            return
        meta = self.read()
        state = meta["state"]
        assert state == self.state or may_move("group", self.state, state)
        self.state = state
        # Claimed by exactly one delivery (or the sweep), never twice.
        assert len(self.claimed_by) <= 1
        assert self.dispatched <= 1
        assert self.completed <= 1
        if state == "completed":
            # Shrunk to its meta: the sets are gone with the rest.
            assert self.run(self.client.exists(self.keys.lost)) == 0
            return
        done = {int(m) for m in self.run(self.client.smembers(self.keys.done))}
        failed = {int(m) for m in self.run(self.client.smembers(self.keys.failed))}
        if self.window and state == "open":
            # The window: what was kicked is released, and at most K of it has
            # no outcome (a member kicked twice is one member).
            released = min(self.total, self.window + len(done) + len(failed))
            assert self.kicked <= set(range(released))
            assert len(self.kicked - done - failed) <= self.window
        assert not done & failed
        assert int(meta["done_count"]) == len(done)
        assert int(meta["failed_count"]) == len(failed)
        assert done | failed == set(self.terminal)
        lost = {int(m) for m in self.run(self.client.smembers(self.keys.lost))}
        assert not lost & (done | failed)
        assert int(meta.get("lost_count", 0)) == len(lost)
        if state in ("open", "cancelled", "giving_up"):
            assert len(done) + len(failed) <= self.total
            assert state == "cancelled" or len(done) + len(failed) < self.total
        elif not self.given_up:
            assert len(done) + len(failed) == self.total


class ChainLife(Scripted):
    """One chain of a few steps, its deliveries racing, failing, cancelled."""

    @initialize(steps=st.integers(1, 4), keep_going=st.booleans())
    def start(self, steps: int, keep_going: bool) -> None:
        self.scripts = ChainScripts(self.client, PipelineBatcher(self.client))
        self.keys = ChainKeys(self.prefix, "c")
        self.steps, self.keep_going = steps, keep_going
        assert self.run(
            self.scripts.start(
                self.keys, token="tok", names="[]", steps=steps, ttl_ms=3_600_000,
                pending="{}", deadline_ms=60_000,
            )
        )  # fmt: skip
        self.state, self.step = "running", 0
        self.moved_by: dict[int, str] = {}  # step -> the delivery that moved it
        self.lease: tuple[int, str, int] | None = None

    def record(self) -> dict[str, str]:
        raw = self.run(self.client.hgetall(self.keys.record))
        return {k.decode(): v.decode() for k, v in raw.items()}

    @rule(step=st.integers(0, 3), copy=st.integers(0, 2), attempt=st.integers(0, 1))
    def step_starts(self, step: int, copy: int, attempt: int) -> None:
        delivery = f"{step}-{copy}"
        begun = self.run(
            self.scripts.begin_step(
                self.keys,
                token="tok",
                step=step,
                attempt=attempt,
                delivery=delivery,
                lease_ms=60_000,
            )
        )
        if begun is Begin.RUN:
            assert self.state == "running"
            assert step == self.step
            if self.lease is not None and self.lease[0] == step:
                assert self.lease[1] == delivery or attempt > self.lease[2]
            self.lease = (step, delivery, attempt)
            count("chain steps granted")

    @rule(step=st.integers(0, 3), copy=st.integers(0, 2), failed=st.booleans())
    def step_ends(self, step: int, copy: int, failed: bool) -> None:
        """A delivery of a step reports its end (the same delivery may retry)."""
        delivery = f"{step}-{copy}"
        failure = '{"type":"E","message":"m"}' if failed else ""
        undo = "" if failed else f'{{"t":"undo{step}"}}'
        last = step == self.steps - 1
        if failed and not self.keep_going:
            failed, _ = self.run(
                self.scripts.begin_failing(
                    self.keys, token="tok", step=step, error=failure, delivery=delivery
                )
            )
            if failed is Failed.FAILING:
                assert step == self.step or self.moved_by.get(step) == delivery
                self.moved_by[step] = delivery
        elif last:
            finished = self.run(
                self.scripts.finish(
                    self.keys, token="tok", step=step, failure=failure,
                    delivery=delivery, outcome="done", payload="1",
                    compensation=undo,
                )
            )  # fmt: skip
            if finished is Finished.DONE:
                # Once; again only for the delivery that finished it.
                assert self.moved_by.setdefault(step, delivery) == delivery
            elif finished is Finished.CANCELLED:
                assert self.record()["state"] == "cancelled"
        else:
            advanced = self.run(
                self.scripts.advance(
                    self.keys, token="tok", step=step, compensation=undo,
                    ttl_ms=3_600_000, pending="{}", delivery=delivery, failure=failure,
                )
            )  # fmt: skip
            if advanced is Advanced.ADVANCED:
                # Once per step; again only for the delivery that moved it.
                assert self.moved_by.setdefault(step, delivery) == delivery
        count("chain transitions")

    @rule()
    def failing_ends(self) -> None:
        self.run(self.scripts.end_failing(self.keys, token="tok"))

    @rule()
    def cancel(self) -> None:
        cancelled = self.run(self.scripts.cancel(self.keys))
        if cancelled is not None:
            # Cancelled now from running; asked again, the same step handed back.
            assert self.state == ("running" if cancelled.now else "cancelled")
            assert cancelled.step == self.step

    @rule()
    def sweep_redrives(self) -> None:
        _, pending = self.run(
            self.scripts.redrive(
                self.keys, token="tok", max_redrives=100, ttl_ms=3_600_000
            )
        )
        if pending is not None:
            assert self.state == "running"

    @rule()
    def lease_runs_out(self) -> None:
        self.run(self.client.hset(self.keys.record, "run_until", 0))
        self.lease = None

    @invariant()
    def holds(self) -> None:
        if not hasattr(self, "keys"):
            return
        found = self.record()
        state, step = found["state"], int(found["step"])
        assert state == self.state or may_move("chain", self.state, state)
        assert step >= self.step  # steps only move forward
        assert step <= self.steps
        if state != "running":
            assert step == self.step or state == "done"
        if "step_undo" in found:  # kept only for a step that ran through a cancel
            assert state == "cancelled"
            assert found["step_undo"] == f'{{"t":"undo{step}"}}'
        if self.lease is not None and step != self.lease[0]:
            self.lease = None
        self.state, self.step = state, step


@pytest.mark.parametrize(
    ("machine", "where", "examples"),
    [
        (GroupLife, "fakeredis", 300),
        (ChainLife, "fakeredis", 300),
        (GroupLife, "redis-server", 60),
        (ChainLife, "redis-server", 60),
    ],
)
def test_random_interleavings_keep_every_invariant(
    machine: type[Scripted], where: str, examples: int, redis_url: str
) -> None:
    from fakeredis.aioredis import FakeRedis

    machine.new_client = (
        FakeRedis if where == "fakeredis" else (lambda: Redis.from_url(redis_url))
    )
    TALLY.clear()
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
    print(f"\n{machine.__name__} on {where}: {TALLY}")
    assert TALLY["interleavings"] >= examples
