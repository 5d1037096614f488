"""A chain's ``on_error``: its run guard, and the sweep that brings a lost one
back, in the test process (the real-worker fault scenarios are
``tests/test_on_error_once.py``'s).

A worker of the test's own (``tests.harness.worker``) on a stream broker that
can lose a message (``lossy_stream_broker``): the sweep reports a lost
``on_error``, kicks it again under ``redrive`` as the attempt after the
recorded one, at most ``max_redrives`` times, and no late copy takes the lease
over from its copy; attempts before it are played on the record by hand. Then
taskiq's retry middlewares on an ``on_error`` that fails: its retry runs (the
guard lets it), and nothing else does; and the guard's scripts, on fakeredis
and a real server.
"""

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from redis.asyncio import Redis
from taskiq import (
    AsyncBroker,
    SimpleRetryMiddleware,
    SmartRetryMiddleware,
    TaskiqMiddleware,
)

from taskiq_fanin import (
    ChainFailure,
    ChainHandle,
    FanInMiddleware,
    GroupResult,
    Signature,
    chain,
    group,
    sweep,
)
from taskiq_fanin.api.chains import Chain
from taskiq_fanin.domain.ids import member_task_id
from taskiq_fanin.domain.labels import RETRIES_LABEL, retry_labels, takes_over
from taskiq_fanin.inspection import list_chains
from taskiq_fanin.models import ChainState
from taskiq_fanin.storage.chain_scripts import ChainScripts
from taskiq_fanin.storage.keys import ChainKeys, chain_index_key
from taskiq_fanin.storage.rechecks import Lost
from taskiq_fanin.storage.records import ChainRecord
from taskiq_fanin.storage.replies import Begin, Failed
from taskiq_fanin.sweep import chain_sweep
from taskiq_fanin.sweeping import Finding, FindingKind, SweepAction, SweepReport
from taskiq_fanin.transport.pipeline import PipelineBatcher
from tests.harness import (
    SentMessages,
    chain_reached,
    drained,
    eventually,
    lossy_stream_broker,
    stream_broker,
    worker,
)

#: Seconds: a chain's step span and run lease short enough to pass within a test.
SHORT = 0.3


class FailingChains:
    """A broker's task that fails, and the ``on_error`` of its chains: it notes
    each failure as it begins (``began``), waits for ``go`` when given, and
    notes it again as it ends (``ended``)."""

    def __init__(self, broker: AsyncBroker, go: asyncio.Event | None = None) -> None:
        self.broker = broker
        self.began: list[ChainFailure] = []
        self.ended: list[ChainFailure] = []

        @broker.task
        async def fails() -> None:
            raise RuntimeError("on purpose")

        @broker.task
        async def chain_failed(failure: ChainFailure) -> None:
            self.began.append(failure)
            if go is not None:
                await go.wait()
            self.ended.append(failure)

        self.fails, self.on_error = fails, chain_failed

    def chain(self, chain_id: str | None = None) -> Chain:
        """A one-step chain whose step fails."""
        return chain(
            Signature.of(self.fails), on_error=self.on_error, chain_id=chain_id
        )

    async def failed(self, chain_id: str) -> ChainHandle:
        """Kick such a chain, and wait until it failed."""
        handle = await self.chain(chain_id).kiq(self.broker)
        await eventually(lambda: _failed(handle), what="the chain to fail")
        return handle

    async def failed_by_hand(
        self, fanin: FanInMiddleware, chain_id: str
    ) -> tuple[ChainKeys, str]:
        """The same, its ``on_error``'s kick lost (its attempts are played on
        the record by hand, on a lossy broker): the chain's keys and token."""
        self.broker.drop = {f"{chain_id}~on_error"}  # type: ignore[attr-defined]
        await self.failed(chain_id)
        keys = ChainKeys(fanin.context.config.prefix, chain_id)
        return keys, (await fanin.context.chain_scripts.read(keys)).token


async def _failed(handle: ChainHandle) -> bool:
    return (await handle.status()).state.value == "failed"


def _beginner(
    scripts: ChainScripts, keys: ChainKeys, token: str
) -> Callable[..., Awaitable[Begin]]:
    """``begin(delivery, attempt=0, *, token, takes_over)``: the guard's ask, for
    ``on_error`` of the chain at ``keys`` (a 60 s lease)."""

    async def begin(
        delivery: str, attempt: int = 0, *, token: str = token, takes_over: bool = True
    ) -> Begin:
        return await scripts.begin_on_error(
            keys,
            token=token,
            attempt=attempt,
            delivery=delivery,
            lease_ms=60_000,
            takes_over=takes_over,
        )

    return begin


async def _on_error_is(redis: Redis, record: str, state: str) -> bool:
    found = await redis.hget(record, "on_error_state")
    return found is not None and found.decode() == state


async def _sweep_until_lost(
    fanin: FanInMiddleware, *, sweep_policy: str | None
) -> Finding:
    """Sweep until a sweep finds a chain's ``on_error`` lost: that finding."""
    found: list[Finding] = []

    async def lost() -> bool:
        report = await sweep(fanin, sweep_policy=sweep_policy)
        found.extend(f for f in report.findings if f.kind is FindingKind.ON_ERROR_LOST)
        return bool(found)

    await eventually(lost, interval=0.05, what="a sweep to find on_error lost")
    (finding,) = found
    return finding


async def test_a_chains_on_error_lost_before_any_copy_began_is_kicked_again_once(
    redis_url: str, key_prefix: str
) -> None:
    """Its message lost on the way (a list broker's worker killed before the
    guard, a purge): no copy began a step span after the failure. The sweep
    reports it; with ``redrive`` kicks it again, once a span; once it ran to
    its end the chain leaves the index."""
    sent = SentMessages()
    broker, fanin = lossy_stream_broker(
        redis_url, key_prefix, sent, deadline=SHORT, finaliser_lease=SHORT
    )
    chains = FailingChains(broker)
    ran = chains.ended
    broker.drop = {"lost~on_error"}  # its one kick is lost on its way
    async with worker(broker, max_async_tasks=4) as receiver:
        await chains.failed("lost")
        reported = await _sweep_until_lost(fanin, sweep_policy=None)
        await drained(broker, receiver)
        ran_on_report = len(ran)
        again = await _sweep_until_lost(fanin, sweep_policy="redrive")
        await eventually(lambda: len(ran) == 1, what="on_error to run")
        await drained(broker, receiver)
        index = chain_index_key(key_prefix)

        async def pruned() -> bool:
            await sweep(fanin)
            return await fanin.context.redis.zscore(index, "lost") is None

        await eventually(pruned, interval=0.1, what="the chain to leave the index")
        await drained(broker, receiver)

    assert (reported.action, reported.applied, ran_on_report) == (
        SweepAction.REPORT,
        True,
        0,
    )
    assert "no copy began" in reported.note
    assert (again.action, again.applied) == (SweepAction.REDISPATCH, True)
    assert sent.executions_of(chains.on_error.task_name) == 1
    assert [(f.chain_id, f.step, f.error.type) for f in ran] == [
        ("lost", 0, "RuntimeError")
    ]


async def test_the_sweep_watches_a_failed_chain_until_its_on_error_ran_to_its_end(
    redis_url: str, key_prefix: str
) -> None:
    """While a copy of ``on_error`` holds its lease, or has released it for a
    retry middleware's next attempt, the sweep leaves it and keeps the chain
    indexed; once the lease ran out it reports it (the app's policy); once a
    copy ran to its end the chain leaves the index. The record's lease and the
    index are set by hand (a worker's death, the sweep's time come)."""
    broker, fanin = stream_broker(redis_url, key_prefix)  # a 60 s lease
    go = asyncio.Event()
    chains = FailingChains(broker, go)
    ran = chains.ended
    index = chain_index_key(key_prefix)
    record = ChainKeys(key_prefix, "w").record
    seen: list[tuple[str, list[tuple[FindingKind, SweepAction]], bool]] = []

    async def look(moment: str) -> None:
        """Make the chain due, sweep, and note what was found and if indexed."""
        await redis.zadd(index, {"w": 0})
        report = await sweep(fanin)
        found = [(f.kind, f.action) for f in report.findings]
        seen.append((moment, found, await redis.zscore(index, "w") is not None))

    async with worker(broker, max_async_tasks=4) as receiver:
        redis = fanin.context.redis
        await chains.failed("w")
        await eventually(
            lambda: _on_error_is(redis, record, "running"), what="on_error to begin"
        )
        await look("running")
        await redis.hset(record, "on_error_until", 0)  # released for a retry
        await look("released")
        await redis.hset(record, "on_error_until", 1)  # its worker died long ago
        await look("lease ran out")
        go.set()
        await eventually(lambda: len(ran) == 1, what="on_error to end")
        await eventually(
            lambda: _on_error_is(redis, record, "completed"), what="its completion"
        )
        await look("completed")
        await drained(broker, receiver)

    lost = [(FindingKind.ON_ERROR_LOST, SweepAction.REPORT)]
    assert seen == [
        ("running", [], True),
        ("released", [], True),
        ("lease ran out", lost, True),
        ("completed", [], False),
    ]


#: How the attempts of a chain's on_error stood when its holder's worker died,
#: and the late copies that may still come (a reclaimed one, a retry it kicked).
_HOLDERS = {
    # Attempt 0 failed and its retry middleware kicked attempt 1; its worker
    # died before it released the lease (or mid-body: nothing comes then).
    "attempt 0": ([0], [0, 1]),
    # Attempt 0 failed and released; attempt 1 ran and its worker died: the
    # stream broker reclaims attempt 1 an idle timeout later.
    "attempt 1": ([0, 1], [0, 1, 2]),
}


@pytest.mark.parametrize("holder", list(_HOLDERS))
async def test_a_late_copy_never_takes_the_lease_over_from_the_sweeps_copy(
    redis_url: str, key_prefix: str, holder: str
) -> None:
    """The copy of ``on_error`` the sweep kicks once the holder's lease ran out
    holds the lease alone: no late copy of the holder's attempt (reclaimed by
    the stream broker), nor the retry the holder kicked, takes it over. The
    attempts before it are played on the record by hand (their message lost)."""
    broker, fanin = lossy_stream_broker(redis_url, key_prefix)
    go = asyncio.Event()
    chains = FailingChains(broker, go)
    began = chains.began
    played, late = _HOLDERS[holder]
    async with worker(broker, max_async_tasks=4) as receiver:
        redis = fanin.context.redis
        scripts = fanin.context.chain_scripts
        keys, token = await chains.failed_by_hand(fanin, "late")
        begin = _beginner(scripts, keys, token)
        for attempt in played:
            assert await begin(f"a{attempt}", attempt) is Begin.RUN
            if attempt != played[-1]:
                assert await scripts.release_on_error(
                    keys,
                    token=token,
                    attempt=attempt,
                    delivery=f"a{attempt}",
                    deadline_ms=60_000,
                )
        await redis.hset(keys.record, "on_error_until", 1)  # its worker died
        await redis.zadd(chain_index_key(key_prefix), {"late": 0})
        finding = await _sweep_until_lost(fanin, sweep_policy="redrive")
        await eventually(lambda: bool(began), what="the sweep's copy to begin")
        answers = {attempt: await begin(f"late{attempt}", attempt) for attempt in late}
        go.set()
        await eventually(
            lambda: _on_error_is(redis, keys.record, "completed"),
            what="on_error to complete",
        )
        await drained(broker, receiver)

    assert (finding.action, finding.applied) == (SweepAction.REDISPATCH, True)
    assert answers == dict.fromkeys(late, Begin.RUNNING_ELSEWHERE)
    assert len(began) == 1


async def test_a_lost_on_error_is_kicked_again_at_most_max_redrives_times(
    redis_url: str, key_prefix: str
) -> None:
    """Every kick of it lost on its way, no copy ever begins: under ``redrive``
    the sweep kicks it again once a span, each counted (``redrives``), at most
    ``max_redrives`` times; past that it reports it, and the chain stays
    indexed (a copy may still come)."""
    broker, fanin = lossy_stream_broker(
        redis_url, key_prefix, deadline=SHORT, finaliser_lease=SHORT, max_redrives=2
    )
    chains = FailingChains(broker)
    seen: list[tuple[SweepAction, bool, int]] = []
    async with worker(broker, max_async_tasks=4) as receiver:
        broker.drop = {"cap~on_error"}
        await chains.failed("cap")

        async def reported_past_the_cap() -> bool:
            broker.drop.add("cap~on_error")  # this kick is lost too
            report = await sweep(fanin, sweep_policy="redrive")
            seen.extend(
                (f.action, f.applied, f.redrives)
                for f in report.findings
                if f.kind is FindingKind.ON_ERROR_LOST
            )
            return bool(seen) and seen[-1][0] is SweepAction.REPORT

        await eventually(
            reported_past_the_cap, timeout=10, interval=0.1, what="the cap"
        )
        await drained(broker, receiver)
        indexed = await fanin.context.redis.zscore(chain_index_key(key_prefix), "cap")
        note = await _last_note(fanin, "cap")

    assert seen == [
        (SweepAction.REDISPATCH, True, 1),
        (SweepAction.REDISPATCH, True, 2),
        (SweepAction.REPORT, True, 2),
    ]
    assert "2 re-kicks used" in note
    assert chains.ended == []
    assert indexed is not None


async def test_a_re_kick_whose_kick_failed_is_not_counted_and_goes_again(
    redis_url: str, key_prefix: str
) -> None:
    """Its ``on_error``'s kick lost, the sweep's one re-kick (``max_redrives=1``)
    meets a broker error: nothing was sent, so nothing is counted, and the next
    sweep kicks it (counting what was sent): it runs."""
    broker, fanin = lossy_stream_broker(
        redis_url, key_prefix, deadline=SHORT, finaliser_lease=SHORT, max_redrives=1
    )
    chains = FailingChains(broker)
    seen: list[tuple[SweepAction, int]] = []
    async with worker(broker, max_async_tasks=4) as receiver:
        broker.drop = {"rk~on_error"}
        await chains.failed("rk")

        async def lost() -> bool:
            report = await sweep(fanin, dry_run=True)
            return any(f.kind is FindingKind.ON_ERROR_LOST for f in report.findings)

        await eventually(lost, interval=0.05, what="on_error to be lost")
        broker.fail_after = broker.sent  # the sweep's kick meets a broker error
        failed = await sweep(fanin, sweep_policy="redrive")
        broker.fail_after = None
        counted = await fanin.context.redis.hget(
            ChainKeys(key_prefix, "rk").record, "on_error_redrives"
        )

        async def ran() -> bool:
            report = await sweep(fanin, sweep_policy="redrive")
            seen.extend(
                (f.action, f.redrives)
                for f in report.findings
                if f.kind is FindingKind.ON_ERROR_LOST
            )
            return bool(chains.ended)

        await eventually(ran, timeout=10, interval=0.1, what="on_error to run")
        await drained(broker, receiver)

    assert failed.findings == []  # its kick raised: reported in the log
    assert counted in (None, b"0")
    assert seen == [(SweepAction.REDISPATCH, 1)]
    assert [(f.chain_id, f.step) for f in chains.ended] == [("rk", 0)]


async def _last_note(fanin: FanInMiddleware, chain_id: str) -> str:
    """The note of what a sweep now finds of the chain (a dry run)."""
    await fanin.context.redis.zadd(
        chain_index_key(fanin.context.config.prefix), {chain_id: 0}
    )
    report = await sweep(fanin, sweep_policy="redrive", dry_run=True)
    (finding,) = [f for f in report.findings if f.group_id == chain_id]
    return finding.note


async def test_a_released_on_error_whose_retry_is_lost_is_kicked_as_the_next_attempt(
    redis_url: str, key_prefix: str
) -> None:
    """Attempt 0 failed and released its lease for the retry middleware's
    attempt 1, whose message was lost. A span after the release the sweep
    reports it; under ``redrive`` it kicks it again as attempt 1, which runs
    to its end. Attempt 0 is played on the record by hand."""
    sent = SentMessages()
    broker, fanin = lossy_stream_broker(
        redis_url, key_prefix, sent, deadline=SHORT, finaliser_lease=SHORT
    )
    chains = FailingChains(broker)
    async with worker(broker, max_async_tasks=4) as receiver:
        scripts = fanin.context.chain_scripts
        keys, token = await chains.failed_by_hand(fanin, "rel")
        began = await _beginner(scripts, keys, token)("a0", 0)
        assert await scripts.release_on_error(
            keys, token=token, attempt=0, delivery="a0", deadline_ms=60_000
        )
        reported = await _sweep_until_lost(fanin, sweep_policy=None)
        again = await _sweep_until_lost(fanin, sweep_policy="redrive")
        await eventually(lambda: len(chains.ended) == 1, what="on_error to run")
        await drained(broker, receiver)

    assert began is Begin.RUN
    assert (reported.action, reported.applied) == (SweepAction.REPORT, True)
    assert "its retry did not begin" in reported.note
    assert (again.action, again.applied) == (SweepAction.REDISPATCH, True)
    (kicked,) = [m for m in sent.executed if m.task_name == chains.on_error.task_name]
    assert int(kicked.labels["_retries"]) == 1


async def test_a_watched_failed_member_chain_is_settled_once(
    redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A group member's chain failed; its ``on_error`` runs long, so the sweep
    keeps the chain indexed and visits it again and again: what its end may
    have left undone (the member's outcome) is settled at the first visit
    only, not with a ``recordOutcome`` call at every one."""
    broker, fanin = stream_broker(redis_url, key_prefix)
    go = asyncio.Event()
    settled: list[str] = []
    settle = chain_sweep.settle_member

    async def counted(ctx: object, chain: ChainRecord, *, delivery: str) -> None:
        settled.append(delivery)
        await settle(ctx, chain, delivery=delivery)  # type: ignore[arg-type]

    monkeypatch.setattr(chain_sweep, "settle_member", counted)
    chains = FailingChains(broker, go)
    index = chain_index_key(key_prefix)
    member = member_task_id("gm", 0)  # the member chain's id
    record = ChainKeys(key_prefix, member).record
    async with worker(broker, max_async_tasks=4) as receiver:
        redis = fanin.context.redis
        await group([chains.chain()], failure_policy="fail", group_id="gm").kiq(broker)
        await eventually(
            lambda: _on_error_is(redis, record, "running"), what="on_error to begin"
        )
        # Failed once the kicks of its end returned (until then the sweep finds
        # it failing, and has nothing of a failed chain's to settle).
        await eventually(
            lambda: chain_reached(fanin, member, ChainState.FAILED),
            what="the chain to be failed",
        )
        for _ in range(3):
            await redis.zadd(index, {member: 0})
            await sweep(fanin)
        go.set()
        await eventually(
            lambda: _on_error_is(redis, record, "completed"), what="its completion"
        )
        await drained(broker, receiver)

    assert len(settled) == 1


async def test_failed_chains_watched_in_the_index_hide_no_running_chain_from_list(
    redis_url: str, key_prefix: str
) -> None:
    """Failed chains the sweep watches (their ``on_error`` lost, reported
    each visit) sit in the chains' index ahead of a running chain: a listing
    of ``limit`` chains still finds the running one."""
    broker, fanin = stream_broker(redis_url, key_prefix)
    await broker.startup()
    try:
        scripts = fanin.context.chain_scripts
        index = chain_index_key(key_prefix)
        for n in range(3):
            await _fail_by_hand(scripts, ChainKeys(key_prefix, f"f{n}"))
            await fanin.context.redis.zadd(index, {f"f{n}": n})
        await _start_by_hand(scripts, ChainKeys(key_prefix, "run"))
        await fanin.context.redis.zadd(index, {"run": 10})
        listed = await list_chains(fanin, limit=2)
    finally:
        await broker.shutdown()

    assert [status.chain_id for status in listed] == ["run"]


async def test_the_sweeps_copy_takes_no_lease_over_from_a_copy_begun_after_its_kick(
    redis_url: str, key_prefix: str
) -> None:
    """The sweep kicked its copy once the holder's lease ran out; before that
    copy began, the broker brought the holder's message back (reclaimed) and
    it took the lease. The sweep's copy goes as the next attempt, but no
    attempt ended: it takes no lease over, and is left unacknowledged."""
    sent = SentMessages()
    broker, fanin = lossy_stream_broker(redis_url, key_prefix, sent)
    chains = FailingChains(broker)
    async with worker(broker, max_async_tasks=4) as receiver:
        redis = fanin.context.redis
        keys, token = await chains.failed_by_hand(fanin, "race")
        begin = _beginner(fanin.context.chain_scripts, keys, token)
        assert await begin("a0") is Begin.RUN
        await redis.hset(keys.record, "on_error_until", 1)  # its worker died
        await redis.zadd(chain_index_key(key_prefix), {"race": 0})
        broker.drop.add("race~on_error")  # the sweep's kick: held back here
        finding = await _sweep_until_lost(fanin, sweep_policy="redrive")
        reclaimed = await begin("a0-reclaimed")  # the broker brought a0 back
        kicked = sent.of_task(chains.on_error.task_name)[-1]  # the sweep's
        await sent.resend(kicked)  # now the sweep's copy reaches a worker
        await drained(broker, receiver, abandoned=1)  # refused, unacknowledged

    assert (finding.action, finding.applied) == (SweepAction.REDISPATCH, True)
    assert reclaimed is Begin.RUN
    assert int(kicked.labels["_retries"]) == 1
    assert chains.began == []


# -- taskiq's retry middlewares on an on_error that fails -----------------------


def _simple() -> TaskiqMiddleware:
    return SimpleRetryMiddleware(default_retry_count=3)


def _smart() -> TaskiqMiddleware:
    return SmartRetryMiddleware(
        default_retry_count=3,
        default_delay=0,
        use_jitter=False,
        use_delay_exponent=False,
    )


@pytest.mark.parametrize("retry", [_simple, _smart], ids=["simple", "smart"])
@pytest.mark.parametrize("where", ["chain", "group"])
async def test_an_on_error_that_fails_is_retried_and_runs_to_its_end_once(
    redis_url: str,
    key_prefix: str,
    retry: Callable[[], TaskiqMiddleware],
    where: str,
) -> None:
    """``retry_on_error``: its first two attempts fail, the third succeeds; no
    attempt runs twice and none is blocked by the guard."""
    broker, _ = stream_broker(redis_url, key_prefix, retry())
    attempts: list[str] = []
    ended: list[str] = []

    @broker.task
    async def fails() -> None:
        raise RuntimeError("on purpose")

    def attempt(kind: str) -> None:
        attempts.append(kind)
        if len(attempts) < 3:
            raise RuntimeError(f"on_error attempt {len(attempts)} fails")
        ended.append(kind)

    @broker.task(retry_on_error=True, max_retries=3)
    async def chain_failed(failure: ChainFailure) -> None:
        attempt(type(failure).__name__)

    @broker.task(retry_on_error=True, max_retries=3)
    async def group_failed(result: GroupResult) -> None:
        attempt(type(result).__name__)

    async with worker(broker, max_async_tasks=4) as receiver:
        if where == "chain":
            await chain(Signature.of(fails), on_error=chain_failed).kiq(broker)
        else:
            await group(
                [Signature.of(fails)], on_error=group_failed, failure_policy="fail"
            ).kiq(broker)
        await eventually(lambda: len(ended) == 1, what="on_error to succeed")
        await drained(broker, receiver)

    kind = "ChainFailure" if where == "chain" else "GroupResult"
    assert attempts == [kind] * 3
    assert ended == [kind]


# -- the guard's scripts ----------------------------------------------------------


async def _start_by_hand(scripts: ChainScripts, keys: ChainKeys) -> None:
    """A one-step chain started (token ``tok``), as ``chain().kiq`` records it."""
    await scripts.start(
        keys, token="tok", names="[]", steps=1, ttl_ms=60_000, pending="",
        deadline_ms=60_000,
    )  # fmt: skip


async def _fail_by_hand(scripts: ChainScripts, keys: ChainKeys) -> None:
    """A one-step chain failed at its step, its on_error kicked."""
    await _start_by_hand(scripts, keys)
    failed, _ = await scripts.begin_failing(
        keys, token="tok", step=0, error="{}", delivery="step"
    )
    assert failed is Failed.FAILING
    assert await scripts.end_failing(keys, token="tok")


async def _failed_chain(
    client: Redis, key_prefix: str
) -> tuple[ChainScripts, ChainKeys]:
    """A one-step chain failed at its step, its on_error kicked."""
    scripts = ChainScripts(client, PipelineBatcher(client))
    keys = ChainKeys(key_prefix, "c")
    await _fail_by_hand(scripts, keys)
    return scripts, keys


async def _state(client: Redis, keys: ChainKeys) -> ChainRecord:
    return ChainRecord.from_hash(await client.hgetall(keys.record))


async def test_one_copy_of_on_error_runs_at_a_time_and_none_after_it_ran(
    client: Redis, key_prefix: str
) -> None:
    scripts, keys = await _failed_chain(client, key_prefix)
    begin = _beginner(scripts, keys, "tok")

    assert await begin("d1") is Begin.RUN
    assert (await _state(client, keys)).on_error_state == "running"
    assert await begin("d2") is Begin.RUNNING_ELSEWHERE
    assert await begin("d1") is Begin.RUN  # the same delivery renews its lease
    # d1's worker died: once its lease is over, a redelivered copy runs.
    await client.hset(keys.record, "on_error_until", 0)
    assert await begin("d2") is Begin.RUN
    assert await scripts.complete_on_error(keys, token="tok")
    assert not await scripts.complete_on_error(keys, token="tok")  # once
    assert await begin("d3") is Begin.SKIP
    assert await begin("d4", attempt=5) is Begin.SKIP  # even a later attempt
    found = await _state(client, keys)
    assert (found.on_error_state, found.state.value) == ("completed", "failed")
    # Another chain's token, or no record at all: run rather than lose the work.
    assert await begin("d5", token="other") is Begin.RUN
    gone = ChainKeys(key_prefix, "gone")
    assert await scripts.begin_on_error(
        gone, token="tok", attempt=0, delivery="d6", lease_ms=60_000
    ) is Begin.RUN  # fmt: skip


async def test_a_failed_attempt_of_on_error_lets_its_retry_run(
    client: Redis, key_prefix: str
) -> None:
    """The retry middleware kicks attempt 1 before attempt 0 releases its lease."""
    scripts, keys = await _failed_chain(client, key_prefix)
    begin = _beginner(scripts, keys, "tok")

    assert await begin("a0", 0) is Begin.RUN
    assert await begin("a1", 1) is Begin.RUN  # the retry takes the lease over
    assert await begin("a1-copy", 1) is Begin.RUNNING_ELSEWHERE
    assert await begin("a0-copy", 0) is Begin.RUNNING_ELSEWHERE
    # Attempt 0's worker releases late: the retry's lease stays.
    assert not await scripts.release_on_error(
        keys, token="tok", attempt=0, delivery="a0", deadline_ms=60_000
    )
    assert (await _state(client, keys)).on_error_until > 0
    # Attempt 1 fails too and releases: a copy of it may run, the state stays.
    assert await scripts.release_on_error(
        keys, token="tok", attempt=1, delivery="a1", deadline_ms=60_000
    )
    found = await _state(client, keys)
    assert (found.on_error_state, found.on_error_until) == ("running", 0)
    assert await begin("a1-copy", 1) is Begin.RUN


async def test_a_lost_on_errors_check_writes_nothing_and_its_count_counts_once(
    client: Redis, key_prefix: str
) -> None:
    """``checkOnError`` answers lost, capped or on its way on Redis's clock and
    writes nothing; ``countRekick`` counts a re-kick once its kick went."""
    scripts, keys = await _failed_chain(client, key_prefix)

    async def check() -> tuple[Lost, int, int]:
        return tuple(
            await scripts.check_on_error(
                keys, token="tok", max_redrives=1, deadline_ms=60_000
            )
        )

    assert await check() == (Lost.ON_ITS_WAY, 0, 0)  # within its span
    await client.hset(keys.record, mapping={"finished": 1, "span": 1})
    assert await check() == (Lost.LOST, 0, 0)  # no copy began
    assert await check() == (Lost.LOST, 0, 0)  # a check counts nothing
    assert await scripts.count_rekick(keys, token="other") is None
    assert await scripts.count_rekick(keys, token="tok") == 1
    assert await check() == (Lost.CAPPED, 1, 0)
    assert await _beginner(scripts, keys, "tok")("d1") is Begin.RUN
    assert await check() == (Lost.ON_ITS_WAY, 1, 0)  # its lease holds
    assert await scripts.complete_on_error(keys, token="tok")
    assert await check() == (Lost.ON_ITS_WAY, 1, 0)
    assert await scripts.count_rekick(keys, token="tok") is None


async def test_the_attempt_recorded_for_on_error_never_goes_down(
    client: Redis, key_prefix: str
) -> None:
    """Attempt n exists only once a copy of attempt n-1 ended: a copy of an
    earlier attempt than the one recorded never runs, lease or not, and a later
    one takes a held lease over only from the attempt just before it. So the
    sweep's copy, kicked as the attempt after the holder whose worker died,
    is taken over by no late copy of that holder nor by the retry it kicked."""
    scripts, keys = await _failed_chain(client, key_prefix)
    begin = _beginner(scripts, keys, "tok")

    assert await begin("a0", 0) is Begin.RUN
    await client.hset(keys.record, "on_error_until", 1)  # a0's worker died
    assert await begin("sweep", 1) is Begin.RUN  # the sweep's copy: attempt 1
    assert await begin("a1-late", 1) is Begin.RUNNING_ELSEWHERE  # a0's retry
    assert await begin("a0-again", 0) is Begin.RUNNING_ELSEWHERE
    await client.hset(keys.record, "on_error_until", 1)  # the sweep's died too
    assert await begin("a0-again", 0) is Begin.RUNNING_ELSEWHERE  # never lower
    assert (await _state(client, keys)).on_error_attempt == 1
    assert await begin("a2", 2) is Begin.RUN
    assert await begin("a4", 4) is Begin.RUNNING_ELSEWHERE  # a jump: lease held
    assert await begin("a3", 3) is Begin.RUN  # the attempt after a2's
    assert (await _state(client, keys)).on_error_attempt == 3
    # The sweep's copy, as attempt 4, takes no held lease over: a3 may run.
    assert await begin("sweep4", 4, takes_over=False) is Begin.RUNNING_ELSEWHERE
    await client.hset(keys.record, "on_error_until", 1)  # a3's worker died
    assert await begin("sweep4", 4, takes_over=False) is Begin.RUN


def test_a_retry_of_the_sweeps_copy_takes_over_and_the_copy_does_not() -> None:
    """taskiq's retry middlewares copy every label to the next attempt."""
    sweeps = retry_labels(2, sweep_copy=True)
    assert not takes_over(sweeps)
    assert takes_over({**sweeps, RETRIES_LABEL: 3})  # the retry of it
    assert takes_over({RETRIES_LABEL: 1})
    assert takes_over({})
    assert retry_labels(0, sweep_copy=False) == {}


def test_a_lost_on_error_counts_as_stuck() -> None:
    """For the stuck gauge, ``--fail-on-stuck`` and alerts (``report.stuck``)."""
    finding = Finding(
        group_id="c",
        kind=FindingKind.ON_ERROR_LOST,
        action=SweepAction.REPORT,
        applied=True,
        state="failed",
    )
    assert SweepReport(dry_run=False, findings=[finding]).stuck == [finding]
