"""A caller's ``kiq()`` and ``cancel()`` ride through Redis being away for a moment.

The caller's writes (the sweep's index entry, the group's plan, the chain's
record, the kicks) are retried with the same ids and token, for the
middleware's ``retry_for``, as the hooks retry theirs: a reply lost on a reset
connection, or a write too few replicas took (``durability="replicated"``), is
not heard by a caller who would then plan again with a fresh id. Past
``retry_for`` the error is raised. On fakeredis, whose ``WAIT`` is faked
(``tests/fake_replicas.py``; ``test_durability_replica.py`` has a real replica).
"""

import asyncio
import hashlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from local_redis import eventually
from taskiq_fanin import FanInMiddleware, GroupResult, Signature, cancel, chain, group
from taskiq_fanin.errors import NotReplicatedError
from taskiq_fanin.inspection import group_status
from taskiq_fanin.storage.scripts import packaged
from tests.fake_brokers import Kicks, settled
from tests.fake_replicas import Refusing, RefusingPipeline, RefusingRedis, Stack


def calls(name: str) -> Callable[[Stack], bool]:
    """Whether a pipeline calls the packaged script ``name``."""
    sha = hashlib.sha1(packaged()[name].source.encode()).hexdigest()
    return lambda stack: any(c[0] == "EVALSHA" and c[1] == sha for c in stack)


def times(picks: Callable[[Stack], bool], count: int) -> Callable[[Stack], bool]:
    """The first ``count`` pipelines ``picks`` picks."""
    left = [count]

    def refuse(stack: Stack) -> bool:
        if left[0] > 0 and picks(stack):
            left[0] -= 1
            return True
        return False

    return refuse


@pytest.fixture
async def refusing() -> AsyncIterator[RefusingRedis]:
    client = RefusingRedis()
    client.replicas = Refusing()
    yield client
    await client.flushall()
    await client.aclose()


@pytest.fixture
async def rig(
    refusing: RefusingRedis,
) -> AsyncIterator[tuple[Kicks, FanInMiddleware, dict[str, Any]]]:
    fanin = FanInMiddleware(
        refusing,
        prefix="caller",
        durability="replicated",
        replication_timeout=0.05,
        retry_for=1.0,
    )
    broker = Kicks().with_middlewares(fanin)
    go = asyncio.Event()
    seen: dict[str, Any] = {"members": [], "then": [], "last": [], "go": go}

    @broker.task(task_name="hold")
    async def hold() -> None:
        await go.wait()

    @broker.task(task_name="member")
    async def member(index: int) -> int:
        seen["members"].append(index)
        return index

    @broker.task(task_name="then")
    async def then(result: GroupResult) -> None:
        seen["then"].append(len(result.succeeded))

    @broker.task(task_name="step")
    async def step(value: int = 0) -> int:
        return value + 1

    @broker.task(task_name="last")
    async def last(value: int) -> None:
        seen["last"].append(value)

    seen["tasks"] = (member, then, step, last)
    seen["hold"] = hold
    await broker.startup()
    try:
        yield broker, fanin, seen
    finally:
        await broker.shutdown()


async def test_a_group_kiq_rides_through_replicas_behind_for_a_moment(
    rig: tuple[Kicks, FanInMiddleware, dict[str, Any]], refusing: RefusingRedis
) -> None:
    broker, _, seen = rig
    member, then, _, _ = seen["tasks"]
    # The plan reaches the primary each time; its replica lags twice.
    refusing.replicas.refuse = times(calls("createGroup"), 2)
    members = [Signature.of(member, i) for i in range(5)]
    handle = await group(members, then=then, group_id="ride").kiq(broker)
    await settled(broker)

    assert handle.created is True  # the plan is this caller's, written at last
    assert seen["then"] == [5]
    assert sorted(seen["members"]) == [0, 1, 2, 3, 4]
    assert sorted(broker.kicked) == [*(f"ride~{i}" for i in range(5)), "ride~then"]


async def test_past_retry_for_a_group_kiq_raises_and_kicks_nothing(
    rig: tuple[Kicks, FanInMiddleware, dict[str, Any]], refusing: RefusingRedis
) -> None:
    broker, _, seen = rig
    member, then, _, _ = seen["tasks"]
    refusing.replicas.refuse = calls("createGroup")
    began = asyncio.get_running_loop().time()
    with pytest.raises(NotReplicatedError):
        await group([Signature.of(member, 1)], then=then, group_id="no").kiq(broker)

    # Retried for retry_for (1 s), then raised.
    assert asyncio.get_running_loop().time() - began >= 0.9
    assert broker.kicked == []


async def test_a_group_kiq_rides_through_a_kick_that_failed(
    rig: tuple[Kicks, FanInMiddleware, dict[str, Any]],
) -> None:
    broker, _, seen = rig
    member, then, _, _ = seen["tasks"]
    failed: list[str] = []

    def once(task_id: str) -> bool:
        if task_id == "kick~3" and not failed:
            failed.append(task_id)
            return True
        return False

    broker.fail = once
    members = [Signature.of(member, i) for i in range(5)]
    handle = await group(members, then=then, group_id="kick").kiq(broker)
    await settled(broker)

    assert failed == ["kick~3"]
    assert handle.created is True
    assert seen["then"] == [5]  # once, with every member (some ran twice: harmless)
    assert (await group_status(broker, "kick")).done == 5


async def test_a_chain_kiq_whose_record_the_replica_missed_kicks_its_first_step(
    rig: tuple[Kicks, FanInMiddleware, dict[str, Any]], refusing: RefusingRedis
) -> None:
    """The record is on the primary, not yet on the replica: the retry is told
    so by the same token, and kicks the first step (once the record is replicated)."""
    broker, _, seen = rig
    _, _, step, last = seen["tasks"]
    steps = (Signature.of(step), Signature.of(step), Signature.of(last))
    await chain(*steps, chain_id="warm").kiq(broker)  # the scripts are loaded
    await settled(broker)
    refusing.replicas.refuse = times(calls("startChain"), 2)
    await chain(*steps, chain_id="c").kiq(broker)
    await settled(broker)

    assert seen["last"] == [2, 2]
    assert broker.kicked.count("c~0") == 1


async def test_a_cancel_the_replica_missed_is_retried_and_told_true(
    rig: tuple[Kicks, FanInMiddleware, dict[str, Any]], refusing: RefusingRedis
) -> None:
    broker, _, seen = rig
    _, then, _, _ = seen["tasks"]
    await group([Signature.of(seen["hold"])], then=then, group_id="stop").kiq(broker)
    refusing.replicas.refuse = times(calls("cancelGroup"), 1)

    assert await cancel(broker, "stop") is True
    seen["go"].set()
    await settled(broker)
    assert (await group_status(broker, "stop")).state.value == "cancelled"
    assert seen["then"] == []


#: Redis commands that write, as the library sends them outside scripts.
WRITING = frozenset({
    "SET", "HSET", "ZADD", "ZREM", "DEL", "UNLINK", "HDEL", "PEXPIRE", "EXPIRE",
    "RPUSH", "LPUSH", "SADD", "SREM", "INCR", "HINCRBY", "XADD", "GETDEL",
})  # fmt: skip


def writes(command: tuple[Any, ...]) -> bool:
    """Whether a command sent to Redis writes (a script call: unless it reads)."""
    name = str(command[0]).upper()
    if name == "SET" and str(command[1]).endswith(":replicated"):
        return False  # the probe a WAIT follows (transport/replication.py)
    if name == "EVALSHA":
        return command[1] not in READ_SHAS
    return name in WRITING


READ_SHAS = frozenset(
    hashlib.sha1(packaged()[name].source.encode()).hexdigest()
    for name in ("inspectChain", "inspectGroup", "listDue")
)


class Spying(Refusing):
    """Every pipeline's commands as sent, and every command sent alone."""

    def __init__(self) -> None:
        super().__init__()
        self.pipelines: list[Stack] = []
        self.alone: list[tuple[Any, ...]] = []


class SpyingPipeline(RefusingPipeline):
    replicas: Spying

    async def execute(self, raise_on_error: bool = True) -> Any:
        self.replicas.pipelines.append([c for c, _ in self.command_stack])
        return await super().execute(raise_on_error)


class SpyingRedis(RefusingRedis):
    replicas: Spying

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        pipe = SpyingPipeline(
            self.connection_pool, self.response_callbacks, transaction, shard_hint
        )
        pipe.replicas = self.replicas
        return pipe

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        self.replicas.alone.append(args)
        return await super().execute_command(*args, **options)


async def test_under_replicated_no_write_goes_without_a_wait() -> None:
    """A group planned, run, found by the sweep and cancelled; a chain started
    and run; the sweep's lock and its actions: every write is in a pipeline
    whose ``WAIT`` follows it, none is sent alone."""
    from taskiq_fanin import sweep

    client = SpyingRedis()
    spy = client.replicas = Spying()
    fanin = FanInMiddleware(
        client, prefix="spy", durability="replicated", replication_timeout=0.05,
        deadline=0.2, finaliser_lease=0.2, ttl=10, retry_for=0.3,
    )  # fmt: skip
    broker = Kicks().with_middlewares(fanin)
    go = asyncio.Event()

    @broker.task(task_name="member")
    async def member(index: int) -> int:
        return index

    @broker.task(task_name="hold")
    async def hold() -> None:
        await go.wait()

    @broker.task(task_name="then")
    async def then(result: GroupResult) -> None:
        return None

    await broker.startup()
    try:
        members = [Signature.of(member, i) for i in range(3)]
        await group(members, then=then, group_id="g").kiq(broker)
        await chain(Signature.of(member, 1), Signature.of(member)).kiq(broker)
        await group([Signature.of(hold)], then=then, group_id="held").kiq(broker)
        assert await cancel(broker, "held") is True
        go.set()
        # Its member never sent: the sweep finds the group stuck, re-drives it.
        broker.fail = lambda task_id: task_id.startswith("lost~")
        with pytest.raises(Exception):  # noqa: B017,PT011
            await group([Signature.of(member, 1)], group_id="lost").kiq(broker)
        broker.fail = lambda _: False
        await settled(broker)

        async def swept() -> bool:
            return bool((await sweep(broker, sweep_policy="redrive")).findings)

        await eventually(swept, what="the sweep to act")
        await settled(broker)
        assert (await group_status(broker, "lost")).done == 1
    finally:
        await broker.shutdown()

    unwaited = [
        stack
        for stack in spy.pipelines
        if any(writes(c) for c in stack)
        and not any(c[0] == WAITED for c in stack[_last_write(stack) :])
    ]
    alone = [c for c in spy.alone if writes(c)]
    assert (unwaited, alone) == ([], [])
    await client.aclose()


#: What the faked WAIT is sent as (``test_durability.WaitingPipeline``).
WAITED = "ECHO"


def _last_write(stack: Stack) -> int:
    return max(i for i, c in enumerate(stack) if writes(c))


async def test_a_streamed_group_kiq_writes_again_the_chunk_the_replica_missed(
    rig: tuple[Kicks, FanInMiddleware, dict[str, Any]],
    refusing: RefusingRedis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its iterator is read once: the retry writes the chunk in flight again
    from what it holds, then reads on; every member is in the ledger once."""
    from taskiq_fanin.groups import ledger

    monkeypatch.setattr(ledger, "CHUNK_MEMBERS", 2)
    broker, _, seen = rig
    member, then, _, _ = seen["tasks"]
    await group([Signature.of(member, 0)], group_id="warm").kiq(broker)
    await settled(broker)
    refusing.replicas.refuse = times(calls("appendLedger"), 2)
    seen["members"].clear()
    read: list[int] = []

    def members() -> Any:
        for i in range(7):
            read.append(i)
            yield Signature.of(member, i)

    await group(members(), then=then, group_id="streamed").kiq(broker)
    await settled(broker)

    assert read == list(range(7))  # read once
    assert seen["then"] == [7]
    assert sorted(seen["members"]) == list(range(7))


async def test_an_empty_group_whose_plan_the_replica_missed_continues_at_once(
    rig: tuple[Kicks, FanInMiddleware, dict[str, Any]], refusing: RefusingRedis
) -> None:
    """Its first try was written through ``markPlanned``: the retry, told the
    group exists and is its own, finalises it now, not the sweep a lease on."""
    broker, _, seen = rig
    _, then, _, _ = seen["tasks"]
    await group([], then=then, group_id="warm").kiq(broker)  # scripts loaded
    await settled(broker)
    refusing.replicas.refuse = times(calls("markPlanned"), 1)
    handle = await group([], then=then, group_id="empty").kiq(broker)
    await settled(broker)

    assert handle.created is True
    assert broker.kicked.count("empty~then") == 1
    assert seen["then"] == [0, 0]


async def test_a_group_kiq_whose_chain_member_s_first_kick_failed_kicks_it_again(
    rig: tuple[Kicks, FanInMiddleware, dict[str, Any]],
) -> None:
    """The member chain's record was written, its first step's kick refused:
    the retry starts the chain again under the same token and kicks that step,
    rather than leaving the chain for the sweep a deadline on."""
    broker, _, seen = rig
    member, then, step, last = seen["tasks"]
    failed: list[str] = []

    def once(task_id: str) -> bool:
        if task_id == "cm~1~0" and not failed:
            failed.append(task_id)
            return True
        return False

    broker.fail = once
    members = [Signature.of(member, 0), chain(Signature.of(step), Signature.of(last))]
    await group(members, then=then, group_id="cm").kiq(broker)
    await settled(broker)

    assert failed == ["cm~1~0"]
    assert seen["last"] == [1]
    assert seen["then"] == [2]


async def test_a_chain_kiq_whose_first_step_group_the_replica_missed_plans_it(
    rig: tuple[Kicks, FanInMiddleware, dict[str, Any]], refusing: RefusingRedis
) -> None:
    """The first step's group was created on the primary, its replica behind:
    the retry starts the chain again and plans that group under the same
    token, going on where it stopped, rather than leaving it to the sweep."""
    broker, _, seen = rig
    member, _, _, _ = seen["tasks"]

    @broker.task(task_name="count")
    async def count(result: GroupResult) -> None:
        seen["last"].append(len(result.succeeded))

    steps = (group([Signature.of(member, i) for i in range(3)]), Signature.of(count))
    await chain(*steps, chain_id="warm").kiq(broker)  # the scripts are loaded
    await settled(broker)
    refusing.replicas.refuse = times(calls("createGroup"), 1)
    await chain(*steps, chain_id="cg").kiq(broker)
    await settled(broker)

    assert seen["last"] == [3, 3]
