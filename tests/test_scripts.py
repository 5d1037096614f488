"""Every branch of the Lua scripts, run for real: on fakeredis (through lupa) and on
a real redis-server. No Python copy of a script exists anywhere.
"""

import asyncio
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from taskiq_fanin.domain.config import DEFAULT_OUTCOME_STREAM_MAX as STREAM_MAX
from taskiq_fanin.storage.chain_scripts import ChainScripts
from taskiq_fanin.storage.group_scripts import GroupScripts
from taskiq_fanin.storage.keys import ChainKeys, GroupKeys
from taskiq_fanin.storage.rechecks import Lost
from taskiq_fanin.storage.replies import (
    Begin,
    CollectedOutcomes,
    Created,
    Outcome,
    Recorded,
)
from taskiq_fanin.transport.pipeline import PipelineBatcher
from tests.script_calls import OPTIONS, TOKEN, create, scripts_on

#: A delivery of a member (or continuation): the same one retrying after a
#: lost reply is told what it did; another is a duplicate.
DELIVERY = "d1"


@pytest.fixture
def keys(key_prefix: str) -> GroupKeys:
    return GroupKeys(key_prefix, "g1")


async def record_with_outcomes(
    scripts: GroupScripts,
    keys: GroupKeys,
    index: int,
    outcome: Outcome = Outcome.DONE,
    token: str = TOKEN,
    payload: str = "",
    delivery: str = DELIVERY,
) -> tuple[Recorded, CollectedOutcomes | None]:
    recorded, collected, _ = await scripts.record_outcome(
        keys,
        token=token,
        index=index,
        outcome=outcome,
        payload=payload,
        lease_ms=30_000,
        claimant="test",
        delivery=delivery,
        stream_max=STREAM_MAX,
    )
    return recorded, collected


async def record(
    scripts: GroupScripts,
    keys: GroupKeys,
    index: int,
    outcome: Outcome = Outcome.DONE,
    token: str = TOKEN,
    payload: str = "",
    delivery: str | None = None,
) -> Recorded:
    """Record one member, as a delivery of its own unless ``delivery`` is given."""
    recorded, _ = await record_with_outcomes(
        scripts, keys, index, outcome, token, payload, delivery or f"d-{index}-{token}"
    )
    return recorded


async def begin(
    scripts: GroupScripts, keys: GroupKeys, *, attempt: int = 0, delivery: str = "c1"
) -> Begin:
    return await scripts.begin_continuation(
        keys, token=TOKEN, attempt=attempt, delivery=delivery, lease_ms=60_000
    )


async def lease_runs_out(client: Redis, keys: GroupKeys) -> None:
    """What the passage of the span does to a running copy's lease."""
    await client.hset(keys.meta, "run_until", 0)


async def dispatch(
    scripts: GroupScripts,
    keys: GroupKeys,
    kind: str = "then",
    claimant: str = f"test#d-0-{TOKEN}",  # member 0's delivery, when it claimed
) -> bool:
    return await scripts.mark_dispatched(
        keys, token=TOKEN, dispatched=kind, tombstone_ms=5_000, claimant=claimant
    )


async def test_create_writes_meta_and_ledger_with_ttls(
    client: Redis, keys: GroupKeys
) -> None:
    scripts = scripts_on(client)
    assert await create(scripts, keys, total=3) == (Created.CREATED, TOKEN)
    meta = await client.hgetall(keys.meta)
    assert meta[b"total"] == b"3"
    assert meta[b"state"] == b"open"
    assert meta[b"token"] == TOKEN.encode()
    assert await client.hlen(keys.plan) == 3
    assert await client.hget(keys.plan, "2") == b'{"t":"m","a":[2]}'
    assert await client.pttl(keys.meta) > 0
    assert await client.pttl(keys.plan) > 0


async def test_create_of_an_existing_group_changes_nothing(
    client: Redis, keys: GroupKeys
) -> None:
    scripts = scripts_on(client)
    await create(scripts, keys, total=3)
    assert await create(scripts, keys, total=5, token="other") == (
        Created.EXISTS,
        TOKEN,
    )
    assert await client.hlen(keys.plan) == 3
    assert await client.hget(keys.meta, "token") == TOKEN.encode()


async def test_a_wide_ledger_is_written_whole(client: Redis, keys: GroupKeys) -> None:
    scripts = scripts_on(client)
    await create(scripts, keys, total=12_345)
    assert await client.hlen(keys.plan) == 12_345


async def test_members_complete_out_of_order_and_the_last_claims(
    client: Redis, keys: GroupKeys
) -> None:
    scripts = scripts_on(client)
    await create(scripts, keys, total=3)
    assert await record(scripts, keys, 2) is Recorded.RECORDED
    assert await record(scripts, keys, 0, payload='"zero"') is Recorded.RECORDED
    assert await record(scripts, keys, 1, Outcome.FAILED) is Recorded.CLAIMED
    assert await client.hget(keys.meta, "state") == b"claimed"
    assert await client.get(keys.claim) == b"test#d-1-t0k3n"  # the claiming delivery
    assert 0 < await client.pttl(keys.claim) <= 30_000
    assert await client.smembers(keys.done) == {b"0", b"2"}
    assert await client.smembers(keys.failed) == {b"1"}
    assert await client.hget(keys.results, "0") == b'"zero"'
    for key in (keys.done, keys.failed, keys.results):
        assert await client.pttl(key) > 0


async def test_members_recorded_together_share_one_call_as_if_recorded_in_turn(
    client: Redis, keys: GroupKeys
) -> None:
    pipeline = PipelineBatcher(client)
    scripts = scripts_on(client, pipeline)
    await create(scripts, keys, total=4)
    await record(scripts, keys, 3, Outcome.FAILED)
    pipelines, commands = pipeline.stats.pipelines, pipeline.stats.commands
    calls = [
        (0, Outcome.DONE, '"a"'),
        (0, Outcome.DONE, ""),  # a second delivery, in the same call
        (3, Outcome.DONE, ""),  # failed already
        (1, Outcome.FAILED, '{"type":"E","message":"m"}'),
        (2, Outcome.DONE, ""),  # the last one: claims
        (2, Outcome.DONE, ""),  # another delivery of it
    ]
    replies = await asyncio.gather(
        *(
            record_with_outcomes(
                scripts, keys, index, outcome, payload=payload, delivery=f"d{n}"
            )
            for n, (index, outcome, payload) in enumerate(calls)
        )
    )
    # One pipeline carrying one script call.
    assert pipeline.stats.pipelines - pipelines == 1
    assert pipeline.stats.commands - commands == 1
    assert [code for code, _ in replies] == [
        Recorded.RECORDED,
        Recorded.DUPLICATE,
        Recorded.CONFLICT,
        Recorded.RECORDED,
        Recorded.CLAIMED,
        Recorded.FINALISED,
    ]
    handed = [collected for _, collected in replies]
    assert handed[:4] == [None] * 4
    assert handed[5] is None
    assert handed[4] is not None
    assert (handed[4].done, handed[4].failed) == ([0, 2], [1, 3])
    assert handed[4].results == {0: "a"}
    meta = await client.hmget(keys.meta, ["done_count", "failed_count", "state"])
    assert meta == [b"2", b"2", b"claimed"]


async def test_an_outcome_of_a_busy_group_with_no_company_here_is_recorded(
    client: Redis, keys: GroupKeys
) -> None:
    scripts = scripts_on(client)
    await create(scripts, keys, total=20)
    # The first call learns that 19 members are outstanding: the next one, soon
    # after, would wait for company, but no other member runs here: it goes.
    assert await record(scripts, keys, 0) is Recorded.RECORDED
    waited = await asyncio.wait_for(record(scripts, keys, 1), timeout=5)
    assert waited is Recorded.RECORDED
    assert await client.scard(keys.done) == 2


async def test_a_call_that_failed_fails_its_members_and_leaves_no_trace(
    client: Redis, keys: GroupKeys, monkeypatch: pytest.MonkeyPatch
) -> None:
    scripts = scripts_on(client)
    await create(scripts, keys, total=3)
    execute = Pipeline.execute

    async def broken_once(self: Pipeline, raise_on_error: bool = True) -> Any:
        monkeypatch.setattr(Pipeline, "execute", execute)
        raise ConnectionError("the connection dropped")

    monkeypatch.setattr(Pipeline, "execute", broken_once)
    failed = await asyncio.gather(
        record(scripts, keys, 0), record(scripts, keys, 1), return_exceptions=True
    )
    assert all(isinstance(error, ConnectionError) for error in failed)
    # Nothing of the failed call lingers: the same members record normally.
    assert await record(scripts, keys, 0) is Recorded.RECORDED
    assert await record(scripts, keys, 1) is Recorded.RECORDED
    assert await record(scripts, keys, 2) is Recorded.CLAIMED


async def test_a_duplicate_counts_once(client: Redis, keys: GroupKeys) -> None:
    scripts = scripts_on(client)
    await create(scripts, keys, total=2)
    assert await record(scripts, keys, 0) is Recorded.RECORDED
    assert await record(scripts, keys, 0) is Recorded.DUPLICATE
    assert await client.hget(keys.meta, "done_count") == b"1"
    assert await client.hget(keys.meta, "state") == b"open"


async def test_failed_then_done_is_refused(client: Redis, keys: GroupKeys) -> None:
    scripts = scripts_on(client)
    await create(scripts, keys, total=2)
    assert await record(scripts, keys, 0, Outcome.FAILED) is Recorded.RECORDED
    assert await record(scripts, keys, 0, Outcome.DONE) is Recorded.CONFLICT
    assert await client.smembers(keys.done) == set()
    assert await record(scripts, keys, 1) is Recorded.CLAIMED


async def test_done_then_failed_is_refused(client: Redis, keys: GroupKeys) -> None:
    scripts = scripts_on(client)
    await create(scripts, keys, total=2)
    assert await record(scripts, keys, 0, Outcome.DONE) is Recorded.RECORDED
    assert await record(scripts, keys, 0, Outcome.FAILED) is Recorded.CONFLICT
    assert await client.exists(keys.failed) == 0
    assert await client.hget(keys.meta, "failed_count") == b"0"


async def test_a_skip_counts_once_toward_the_group_and_is_neither_done_nor_failed(
    client: Redis, keys: GroupKeys
) -> None:
    scripts = scripts_on(client)
    await create(scripts, keys, total=3)
    reason = '"not an image"'
    assert await record(scripts, keys, 1, Outcome.SKIPPED, payload=reason) is (
        Recorded.RECORDED
    )
    assert await record(scripts, keys, 1, Outcome.SKIPPED) is Recorded.DUPLICATE
    assert await record(scripts, keys, 1, Outcome.FAILED) is Recorded.CONFLICT
    assert await record(scripts, keys, 1, Outcome.DONE) is Recorded.DUPLICATE
    await record(scripts, keys, 0, payload='{"w": 0}')
    claimed, handed = await record_with_outcomes(
        scripts, keys, 2, Outcome.FAILED, payload='{"type":"E","message":"m"}'
    )
    collected = await scripts.collect_outcomes(keys, token=TOKEN)

    assert (claimed, handed) == (Recorded.CLAIMED, collected)
    assert collected is not None
    assert (collected.done_count, collected.skipped_count) == (2, 1)
    assert collected.done == [0, 1]  # a skip is among the done ones ...
    assert collected.skipped == {1: "not an image"}  # ... and says so
    assert collected.errors == {2: {"type": "E", "message": "m"}}  # no skip
    assert await client.hget(keys.meta, "failed_count") == b"1"
    assert await client.hget(keys.meta, "skipped_count") == b"1"


@pytest.mark.parametrize("index", [3, 99, -1])
async def test_an_index_outside_the_ledger_is_not_a_member(
    client: Redis, keys: GroupKeys, index: int
) -> None:
    scripts = scripts_on(client)
    await create(scripts, keys, total=3)
    assert await record(scripts, keys, index) is Recorded.NOT_MEMBER
    assert await client.exists(keys.done) == 0


async def test_a_wrong_token_records_nothing(client: Redis, keys: GroupKeys) -> None:
    scripts = scripts_on(client)
    await create(scripts, keys, total=1)
    assert await record(scripts, keys, 0, token="stale") is Recorded.TOKEN_MISMATCH
    assert await client.exists(keys.done, keys.claim) == 0
    assert await client.hget(keys.meta, "state") == b"open"


async def test_a_missing_group_is_never_treated_as_complete(
    client: Redis, keys: GroupKeys
) -> None:
    scripts = scripts_on(client)
    assert await record(scripts, keys, 0) is Recorded.NO_GROUP
    assert await client.exists(*keys.all) == 0


async def test_after_the_claim_nothing_claims_again(
    client: Redis, keys: GroupKeys
) -> None:
    scripts = scripts_on(client)
    await create(scripts, keys, total=2)
    await record(scripts, keys, 0)
    assert await record(scripts, keys, 1, delivery="first") is Recorded.CLAIMED
    assert await record(scripts, keys, 1, delivery="again") is Recorded.FINALISED
    assert await record(scripts, keys, 0, Outcome.FAILED) is Recorded.FINALISED
    assert await client.hget(keys.meta, "done_count") == b"2"


async def test_the_claiming_delivery_asking_again_is_told_it_claimed(
    client: Redis, keys: GroupKeys
) -> None:
    """Its reply was lost (a timeout, a restart): it finalises after all."""
    scripts = scripts_on(client)
    await create(scripts, keys, total=2)
    await record(scripts, keys, 0)
    first = await record_with_outcomes(scripts, keys, 1, delivery="lost-reply")
    again = await record_with_outcomes(scripts, keys, 1, delivery="lost-reply")
    assert first == again
    assert again[0] is Recorded.CLAIMED
    assert again[1] is not None
    assert again[1].done == [0, 1]
    # Once the dispatch is recorded and the lease released, it is over.
    assert await dispatch(scripts, keys, claimant="test#lost-reply")
    retried = await record(scripts, keys, 1, delivery="lost-reply")
    assert retried is Recorded.FINALISED


async def test_a_stale_claim_key_does_not_keep_a_finished_group_open(
    client: Redis, keys: GroupKeys
) -> None:
    """The state is what one call may move; a claim key left from an earlier
    group of the same id (expired while claimed) is only an old lease."""
    scripts = scripts_on(client)
    await create(scripts, keys, total=1)
    await client.set(keys.claim, "an earlier group's finaliser")
    assert await record(scripts, keys, 0) is Recorded.CLAIMED
    assert await client.get(keys.claim) == f"test#d-0-{TOKEN}".encode()
    assert await client.hget(keys.meta, "state") == b"claimed"


async def test_collect_reads_outcomes_and_refuses_a_wrong_token(
    client: Redis, keys: GroupKeys
) -> None:
    scripts = scripts_on(client)
    await create(scripts, keys, total=3)
    await record(scripts, keys, 2, payload='{"w": 2}')
    await record(scripts, keys, 0)
    claimed, handed = await record_with_outcomes(
        scripts, keys, 1, Outcome.FAILED, payload='{"type":"E","message":"m"}'
    )
    collected = await scripts.collect_outcomes(keys, token=TOKEN)
    assert collected is not None
    # The claimant was handed what collectOutcomes reads.
    assert (claimed, handed) == (Recorded.CLAIMED, collected)
    assert collected.state == "claimed"
    assert collected.total == 3
    assert collected.then == '{"t":"then"}'
    assert collected.done == [0, 2]
    assert collected.failed == [1]
    assert collected.results == {2: {"w": 2}}
    assert collected.errors == {1: {"type": "E", "message": "m"}}
    assert await scripts.collect_outcomes(keys, token="stale") is None


async def test_dispatch_then_completion_leave_a_tombstone(
    client: Redis, keys: GroupKeys
) -> None:
    scripts = scripts_on(client)
    await create(scripts, keys, total=1)
    assert await scripts.mark_planned(keys, token=TOKEN)
    args = {"token": TOKEN, "tombstone_ms": 5_000}
    assert not await dispatch(scripts, keys)  # still open
    await record(scripts, keys, 0, payload="1")
    assert await dispatch(scripts, keys)
    assert await client.hget(keys.meta, "state") == b"dispatched"
    assert await client.exists(keys.claim) == 0
    assert not await dispatch(scripts, keys)
    assert not await scripts.mark_completed(keys, token="stale", tombstone_ms=5_000)
    assert await scripts.mark_completed(keys, **args)
    assert not await scripts.mark_completed(keys, **args)
    assert await client.exists(*keys.all) == 1  # the meta alone
    assert await client.hget(keys.meta, "state") == b"completed"
    assert 0 < await client.pttl(keys.meta) <= 5_000


async def test_a_cancelled_group_counts_late_outcomes_and_never_claims(
    client: Redis, keys: GroupKeys
) -> None:
    scripts = scripts_on(client)
    await create(scripts, keys, total=3)
    await record(scripts, keys, 0)
    assert await scripts.cancel_group(keys, tombstone_ms=5_000)
    assert await record(scripts, keys, 1) is Recorded.COUNTED_CANCELLED
    assert await record(scripts, keys, 2, Outcome.FAILED) is Recorded.COUNTED_CANCELLED
    assert await record(scripts, keys, 0, delivery="again") is Recorded.DUPLICATE
    assert await record(scripts, keys, 1, Outcome.FAILED) is Recorded.CONFLICT
    meta = await client.hgetall(keys.meta)
    assert meta[b"state"] == b"cancelled"
    assert (meta[b"done_count"], meta[b"failed_count"]) == (b"2", b"1")
    assert await client.smembers(keys.done) == {b"0", b"1"}
    assert await client.smembers(keys.failed) == {b"2"}
    assert await client.exists(keys.claim, keys.results, keys.errors) == 0
    # The ledger stays a tombstone's time: it says which members are chains.
    for key in (keys.meta, keys.plan, keys.done, keys.failed):
        assert 0 < await client.pttl(key) <= 5_000


async def test_a_group_with_no_continuation_completes_at_dispatch(
    client: Redis, keys: GroupKeys
) -> None:
    scripts = scripts_on(client)
    await create(scripts, keys, total=1)
    await record(scripts, keys, 0)
    assert await dispatch(scripts, keys, "none")
    assert await client.hget(keys.meta, "state") == b"completed"
    assert await client.exists(*keys.all) == 1


async def test_mark_planned_never_recreates_an_expired_group(
    client: Redis, keys: GroupKeys
) -> None:
    scripts = scripts_on(client)
    assert not await scripts.mark_planned(keys, token=TOKEN)
    assert await client.exists(keys.meta) == 0


async def test_one_copy_of_a_continuation_runs_at_a_time_and_none_after_completion(
    client: Redis, keys: GroupKeys
) -> None:
    scripts = scripts_on(client)
    await create(scripts, keys, total=1)
    await record(scripts, keys, 0)
    # The continuation may start before its finaliser records the dispatch.
    assert await begin(scripts, keys) is Begin.RUN
    assert await begin(scripts, keys, delivery="c2") is Begin.RUNNING_ELSEWHERE
    assert await begin(scripts, keys) is Begin.RUN  # the same delivery, asking again
    assert await dispatch(scripts, keys, "then")
    assert await client.hget(keys.meta, "state") == b"running"
    # The running copy's worker died: once its lease (the span) is over, a
    # redelivered copy runs.
    await lease_runs_out(client, keys)
    assert await begin(scripts, keys, delivery="c2") is Begin.RUN
    await scripts.mark_completed(keys, token=TOKEN, tombstone_ms=5_000)
    assert await begin(scripts, keys, delivery="c3") is Begin.SKIP
    gone = await begin(scripts, GroupKeys(keys.prefix, "other"))
    assert gone is Begin.RUN  # nothing known: run rather than lose the work


async def test_a_retry_takes_the_run_lease_over_from_the_attempt_that_failed(
    client: Redis, keys: GroupKeys
) -> None:
    """The retry middleware kicks attempt 1 before attempt 0 releases its lease."""
    scripts = scripts_on(client)
    await create(scripts, keys, total=1)
    await record(scripts, keys, 0)

    assert await begin(scripts, keys, attempt=0) is Begin.RUN
    # The retry, while attempt 0 holds the lease; then a copy of the retry, and a
    # late copy of attempt 0.
    assert await begin(scripts, keys, attempt=1, delivery="c2") is Begin.RUN
    assert await begin(scripts, keys, attempt=1, delivery="c3") is (
        Begin.RUNNING_ELSEWHERE
    )
    assert await begin(scripts, keys, attempt=0, delivery="c4") is (
        Begin.RUNNING_ELSEWHERE
    )
    # Attempt 0's worker now releases: the retry's lease stays.
    assert not await scripts.release_continuation(
        keys, token=TOKEN, attempt=0, delivery="c1"
    )
    assert await client.hget(keys.meta, "run_until") != b"0"
    assert await scripts.release_continuation(
        keys, token=TOKEN, attempt=1, delivery="c2"
    )
    # The lease is released; the state does not move back.
    assert await client.hget(keys.meta, "state") == b"running"
    assert await client.hget(keys.meta, "run_until") == b"0"
    # A redelivered copy of it runs (losing the work is worse), as a run of its
    # own: attempt 2, kicked for the attempt that failed, waits for it.
    assert await begin(scripts, keys, attempt=1, delivery="c5") is Begin.RUN
    waits = await begin(scripts, keys, attempt=2, delivery="c6")
    assert waits is Begin.RUNNING_ELSEWHERE


async def test_the_attempt_recorded_for_a_continuation_never_goes_down(
    client: Redis, keys: GroupKeys
) -> None:
    """A copy of an earlier attempt than the recorded one never runs, lease or
    not; a later one takes a held lease over only from the attempt just before
    it: the sweep's re-dispatch (the attempt after the holder whose worker
    died) is taken over by no late copy of that holder nor its retry."""
    scripts = scripts_on(client)
    await create(scripts, keys, total=1)
    await record(scripts, keys, 0)
    assert await dispatch(scripts, keys, "then")

    assert await begin(scripts, keys, attempt=0, delivery="a0") is Begin.RUN
    await lease_runs_out(client, keys)  # a0's worker died
    assert await begin(scripts, keys, attempt=1, delivery="sweep") is Begin.RUN
    late = await begin(scripts, keys, attempt=1, delivery="a1-late")
    assert late is Begin.RUNNING_ELSEWHERE  # a0's retry
    await lease_runs_out(client, keys)  # the sweep's copy died too
    again = await begin(scripts, keys, attempt=0, delivery="a0-again")
    assert again is Begin.RUNNING_ELSEWHERE  # never lower
    assert await client.hget(keys.meta, "run_attempt") == b"1"
    assert await begin(scripts, keys, attempt=2, delivery="a2") is Begin.RUN
    jump = await begin(scripts, keys, attempt=4, delivery="a4")
    assert jump is Begin.RUNNING_ELSEWHERE  # a jump: the lease is held
    assert await begin(scripts, keys, attempt=3, delivery="a3") is Begin.RUN
    assert await client.hget(keys.meta, "run_attempt") == b"3"
    # The sweep's re-dispatch, as attempt 4, takes no held lease over.
    sweeps = await scripts.begin_continuation(
        keys, token=TOKEN, attempt=4, delivery="sweep", lease_ms=60_000,
        takes_over=False,
    )  # fmt: skip
    assert sweeps is Begin.RUNNING_ELSEWHERE


async def test_the_attempt_recorded_for_a_chain_step_never_goes_down(
    client: Redis, key_prefix: str
) -> None:
    """As a continuation's: at a step, a copy of an earlier attempt than the
    recorded one never runs, and a later one takes a held lease over only from
    the attempt just before it; the next step starts afresh."""
    chains = ChainScripts(client, PipelineBatcher(client))
    keys = ChainKeys(key_prefix, "c")
    await chains.start(
        keys, token=TOKEN, names="[]", steps=2, ttl_ms=60_000, pending="",
        deadline_ms=60_000,
    )  # fmt: skip

    async def begin(attempt: int, delivery: str, step: int = 0) -> Begin:
        return await chains.begin_step(
            keys, token=TOKEN, step=step, attempt=attempt, delivery=delivery,
            lease_ms=60_000,
        )  # fmt: skip

    assert await begin(0, "a0") is Begin.RUN
    await client.hset(keys.record, "run_until", 1)  # a0's worker died
    assert await begin(1, "sweep") is Begin.RUN  # the sweep's copy: attempt 1
    assert await begin(1, "a1-late") is Begin.RUNNING_ELSEWHERE  # a0's retry
    await client.hset(keys.record, "run_until", 1)  # the sweep's died too
    assert await begin(0, "a0-again") is Begin.RUNNING_ELSEWHERE  # never lower
    assert await client.hget(keys.record, "run_attempt") == b"1"
    assert await begin(3, "a3") is Begin.RUN  # a jump, the lease not held
    assert await begin(5, "a5") is Begin.RUNNING_ELSEWHERE  # a jump: held


async def test_the_sweep_reclaims_a_finaliser_lease_only_once_it_ran_out(
    client: Redis, keys: GroupKeys
) -> None:
    scripts = scripts_on(client)
    await create(scripts, keys, total=1)
    await record(scripts, keys, 0)  # claimed by "test", lease held
    reclaim = {"token": TOKEN, "lease_ms": 30_000, "claimant": "sweep"}
    assert not await scripts.reclaim_finaliser(keys, **reclaim)
    await client.delete(keys.claim)  # the lease ran out
    assert await scripts.reclaim_finaliser(keys, **reclaim)
    assert await client.get(keys.claim) == b"sweep"
    assert not await scripts.reclaim_finaliser(keys, **reclaim)
    # The slow original finaliser records its dispatch but leaves the sweep's lease.
    assert await dispatch(scripts, keys, "then")
    assert await client.get(keys.claim) == b"sweep"


async def test_a_redrive_pushes_the_deadline_and_keeps_the_keys_alive_past_it(
    client: Redis, keys: GroupKeys
) -> None:
    scripts = scripts_on(client)
    await scripts.create_group(
        keys,
        token=TOKEN,
        # Its keys about to expire, still open.
        options={**OPTIONS, "then": "", "sweep": "redrive", "ttl": 2_000},
        members=['{"t":"m"}', '{"t":"m"}'],
        planner_lease_ms=60_000,
        claimant="planner",
    )
    await record(scripts, keys, 0)
    deadline_before = int(await client.hget(keys.meta, "deadline"))
    redriven = await scripts.redrive_group(keys, token=TOKEN, max_redrives=3)

    assert (redriven.redriven, redriven.redrives, redriven.over) == (True, 1, True)
    assert await scripts.missing_members(keys, 0, 2) == {1: '{"t":"m"}'}
    redriven_at = int(await client.hget(keys.meta, "redriven_at"))
    assert int(await client.hget(keys.meta, "deadline")) == redriven_at + 60_000
    assert redriven_at >= deadline_before - 60_000  # Redis's clock moved forward
    for key in (keys.meta, keys.plan, keys.done):
        assert await client.pttl(key) > 100_000


async def test_a_dispatch_is_recorded_even_after_the_continuation_completed(
    client: Redis, keys: GroupKeys
) -> None:
    scripts = scripts_on(client)
    await create(scripts, keys, total=1)
    await record(scripts, keys, 0)
    assert await begin(scripts, keys) is Begin.RUN
    await scripts.mark_completed(keys, token=TOKEN, tombstone_ms=5_000)
    assert await dispatch(scripts, keys)
    assert await client.hget(keys.meta, "state") == b"completed"
    assert await client.hget(keys.meta, "dispatched") == b"then"
    assert not await dispatch(scripts, keys)


async def test_an_index_entry_is_only_brought_sooner(
    client: Redis, key_prefix: str
) -> None:
    scripts = scripts_on(client)
    index = f"{key_prefix}:index"
    assert not await scripts.schedule(index, "c", after_ms=1_000, mode="sooner")
    assert await client.zscore(index, "c") is None  # no entry: none is made
    await scripts.schedule(index, "c", after_ms=60_000, mode="set")
    later = await client.zscore(index, "c")
    assert not await scripts.schedule(index, "c", after_ms=120_000, mode="sooner")
    assert await client.zscore(index, "c") == later  # never later
    assert await scripts.schedule(index, "c", after_ms=1_000, mode="sooner")
    sooner = await client.zscore(index, "c")
    assert sooner is not None
    assert later is not None
    assert sooner < later


async def test_a_step_copy_begun_after_its_attempt_released_is_not_taken_over(
    client: Redis, key_prefix: str
) -> None:
    """Attempt 0 failed and released its lease; a copy of attempt 0 kicked
    again (a caller's retried start, a group re-kicking its chain member) runs:
    the retry middleware's attempt 1, kicked to replace the attempt that
    failed, does not take that fresh run's lease over (both would run the
    body to its end); it runs once that lease is not held."""
    from taskiq_fanin.storage.chain_scripts import ChainScripts
    from taskiq_fanin.storage.keys import ChainKeys

    chains = ChainScripts(client, PipelineBatcher(client))
    keys = ChainKeys(key_prefix, "c")
    await chains.start(
        keys, token=TOKEN, names="[]", steps=2, ttl_ms=60_000, pending="",
        deadline_ms=60_000,
    )  # fmt: skip

    async def begin(attempt: int, delivery: str) -> Begin:
        return await chains.begin_step(
            keys, token=TOKEN, step=0, attempt=attempt, delivery=delivery,
            lease_ms=60_000,
        )  # fmt: skip

    assert await begin(0, "a0") is Begin.RUN
    assert await chains.release_step(
        keys, token=TOKEN, step=0, attempt=0, delivery="a0"
    )
    assert await begin(0, "again") is Begin.RUN  # attempt 0 kicked again
    assert await begin(1, "a1") is Begin.RUNNING_ELSEWHERE
    assert await begin(0, "again") is Begin.RUN  # it renews its lease
    await client.hset(keys.record, "run_until", 1)  # its worker died
    assert await begin(1, "a1") is Begin.RUN
    # Without a release, the next attempt takes the failed one's lease over.
    assert await begin(2, "a2") is Begin.RUN


async def test_an_overdue_continuation_is_dispatched_again_at_most_a_bound_of_times(
    client: Redis, keys: GroupKeys
) -> None:
    """``checkContinuation`` rechecks it on Redis's clock (a span past its
    dispatch or its last re-dispatch, no run lease held) and writes nothing;
    ``countRedispatch`` counts a re-dispatch once its kick went; the check
    caps at the bound, answers the attempt after the recorded one, and the
    state never moves."""
    scripts = scripts_on(client)
    await create(scripts, keys, total=1)
    await record(scripts, keys, 0)
    assert await dispatch(scripts, keys)

    async def check(token: str = TOKEN) -> tuple[Lost, int, int]:
        return tuple(
            await scripts.check_continuation(keys, token=token, max_redrives=2)
        )

    async def span_passes() -> None:
        await client.hset(
            keys.meta, mapping={"dispatched_at": 1, "continuation_redriven_at": 1}
        )

    assert await check() == (Lost.ON_ITS_WAY, 0, 0)  # within its span
    await span_passes()
    assert await check("other") == (Lost.ON_ITS_WAY, 0, 0)
    assert await check() == (Lost.LOST, 0, 0)  # none began: attempt 0
    assert await check() == (Lost.LOST, 0, 0)  # a check counts nothing
    assert await scripts.count_redispatch(keys, token="other") is None
    assert await scripts.count_redispatch(keys, token=TOKEN) == 1
    assert await check() == (Lost.ON_ITS_WAY, 1, 0)  # its copy's span to begin
    await span_passes()
    assert await begin(scripts, keys) is Begin.RUN
    assert await check() == (Lost.ON_ITS_WAY, 1, 0)  # its run lease holds
    await lease_runs_out(client, keys)
    assert await check() == (Lost.LOST, 1, 1)  # after the recorded attempt
    assert await scripts.count_redispatch(keys, token=TOKEN) == 2
    await span_passes()
    assert await check() == (Lost.CAPPED, 2, 1)  # used up
    assert await client.hget(keys.meta, "continuation_redrives") == b"2"
    assert await client.hget(keys.meta, "state") == b"running"
    await scripts.mark_completed(keys, token=TOKEN, tombstone_ms=5_000)
    assert await check() == (Lost.ON_ITS_WAY, 2, 0)
    assert await scripts.count_redispatch(keys, token=TOKEN) is None


async def test_a_released_attempt_whose_retry_is_on_its_way_is_not_overdue(
    client: Redis, keys: GroupKeys
) -> None:
    """An attempt that failed released its run lease for its retry: nothing is
    lost until the retry was due to have begun (a span after the release,
    ``run_retry_by``), however long ago the continuation was dispatched."""
    scripts = scripts_on(client)
    await create(scripts, keys, total=1)
    await record(scripts, keys, 0)
    assert await dispatch(scripts, keys)
    await client.hset(keys.meta, "dispatched_at", 1)  # the body ran past a span
    assert await begin(scripts, keys) is Begin.RUN
    # It fails: the retry middleware kicked attempt 1 (a delay), then released.
    assert await scripts.release_continuation(
        keys, token=TOKEN, attempt=0, delivery="c1"
    )

    async def check() -> tuple[Lost, int, int]:
        return tuple(
            await scripts.check_continuation(keys, token=TOKEN, max_redrives=2)
        )

    assert await check() == (Lost.ON_ITS_WAY, 0, 0)  # the retry is on its way
    await client.hset(keys.meta, "run_retry_by", 1)  # its span to begin passed
    assert await check() == (Lost.LOST, 0, 1)  # the retry was lost: attempt 1
    assert await begin(scripts, keys, attempt=1, delivery="c2") is Begin.RUN
    assert await check() == (Lost.ON_ITS_WAY, 0, 0)  # the retry holds the lease


async def test_a_continuation_running_before_its_dispatch_was_recorded_has_a_span(
    client: Redis, keys: GroupKeys
) -> None:
    """Its finaliser died between the kick and ``markDispatched``, and the copy
    that began lost its worker: with no ``dispatched_at``, a span from the
    group's claim counts, not from the epoch (overdue the moment its lease is
    free)."""
    scripts = scripts_on(client)
    await create(scripts, keys, total=1)
    await record(scripts, keys, 0)  # claimed; no dispatch recorded
    assert await begin(scripts, keys) is Begin.RUN
    await lease_runs_out(client, keys)

    async def check() -> tuple[Lost, int, int]:
        return tuple(
            await scripts.check_continuation(keys, token=TOKEN, max_redrives=2)
        )

    assert await client.hget(keys.meta, "dispatched_at") is None
    assert await check() == (Lost.ON_ITS_WAY, 0, 0)  # a span from its claim
    await client.hset(keys.meta, mapping={"claimed_at": 1, "started_at": 1})
    assert await check() == (Lost.LOST, 0, 1)
