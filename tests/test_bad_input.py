"""Bad input gets a typed error, rooted in taskiq's TaskiqError, and writes nothing."""

from collections.abc import AsyncIterator
from datetime import datetime

import pytest
from fakeredis.aioredis import FakeRedis
from taskiq import InMemoryBroker, TaskiqError

from taskiq_fanin import (
    FanInError,
    FanInMiddleware,
    GroupHandle,
    Signature,
    chain,
    group,
    group_task,
)
from taskiq_fanin.errors import (
    GroupTaskOrderError,
    GroupTaskReturnError,
    GroupTooWideError,
    InvalidChainIdError,
    InvalidGroupError,
    InvalidGroupIdError,
    InvalidOptionError,
    MemberNotSerializableError,
    MemberTooLargeError,
    MiddlewareNotFoundError,
    UnknownTaskError,
)
from taskiq_fanin.inspection import group_status
from tests.harness import eventually

broker = InMemoryBroker()


@broker.task
async def member(value: object) -> None:
    return None


@broker.task
async def collect(result: object, value: object = None) -> None:
    """Takes what the library passes first (a GroupResult, a previous result)."""
    return None


@pytest.fixture
async def fanin(fake_redis: FakeRedis) -> AsyncIterator[FanInMiddleware]:
    middleware = FanInMiddleware(
        fake_redis, prefix="bad", max_group_size=10, max_member_bytes=1000
    )
    broker.middlewares.clear()
    broker.add_middlewares(middleware)
    await broker.startup()
    yield middleware
    await broker.shutdown()
    assert await fake_redis.keys("*") == [], "bad input must write nothing"


def members(count: int) -> list[Signature]:
    return [Signature.of(member, i) for i in range(count)]


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        (lambda: group(members(11)), GroupTooWideError),
        (lambda: group([*members(2), "not a signature"]), InvalidGroupError),
        (lambda: group([Signature.of("no.such:task")]), UnknownTaskError),
        (lambda: group(members(2), then="no.such:task"), UnknownTaskError),
        (lambda: group([Signature.of(member, object())]), MemberNotSerializableError),
        (lambda: group([Signature.of(member, "x" * 2000)]), MemberTooLargeError),
        (
            lambda: group(members(1), then=Signature.of(collect, "x" * 2000)),
            MemberTooLargeError,
        ),
        (lambda: group(members(2), ttl=100, deadline=90), InvalidOptionError),
        (lambda: group(members(2), ttl=30), InvalidOptionError),
        (lambda: group(members(2), group_id="a{b}"), InvalidGroupIdError),
        (lambda: group(members(2), group_id=""), InvalidGroupIdError),
        (lambda: group(members(2), group_id="x" * 129), InvalidGroupIdError),
        (lambda: group(members(2), ttl=0), InvalidOptionError),
        (lambda: group(members(2), ttl=-5), InvalidOptionError),
        (lambda: group(members(2), deadline=0), InvalidOptionError),
        (lambda: group(members(2), failure_policy="explode"), InvalidOptionError),
        (chain, InvalidGroupError),
        (lambda: chain(members(1)[0], group(members(11))), GroupTooWideError),
        (lambda: chain(Signature.of(member, object())), MemberNotSerializableError),
        (lambda: chain(members(1)[0], on_error="no.such:task"), UnknownTaskError),
        (lambda: chain(members(1)[0], chain_id="bad id"), InvalidChainIdError),
        (lambda: chain(members(1)[0], chain_id="c{1}"), InvalidChainIdError),
        (lambda: chain(members(1)[0], chain_id="c~1"), InvalidChainIdError),
        (lambda: group(members(2), group_id="g~1"), InvalidGroupIdError),
        (
            lambda: chain(members(1)[0], group(members(1), then=member)),
            InvalidGroupError,
        ),
        (lambda: group([chain(Signature.of("no.such:task"))]), UnknownTaskError),
        (lambda: group(members(2), version=""), InvalidOptionError),
        (lambda: group(members(2), version="v" * 65), InvalidOptionError),
        (lambda: chain(members(1)[0], version=""), InvalidOptionError),
        (lambda: chain(members(1)[0], version=3), InvalidOptionError),
    ],
)
async def test_bad_group_raises_a_typed_error_and_writes_nothing(
    fanin: FanInMiddleware, spec: object, error: type[Exception]
) -> None:
    with pytest.raises(error) as raised:
        await spec().kiq(broker)  # type: ignore[operator]
    assert isinstance(raised.value, FanInError)
    assert isinstance(raised.value, TaskiqError)
    assert str(raised.value)


async def test_an_unknown_task_says_which_part_names_it_and_what_to_do(
    fanin: FanInMiddleware,
) -> None:
    typo = member.task_name + "s"
    with pytest.raises(UnknownTaskError) as near:
        await group([*members(2), Signature.of(typo, 1)]).kiq(broker)
    with pytest.raises(UnknownTaskError) as far:
        await chain(members(1)[0], Signature.of("billing:charge")).kiq(broker)

    assert f"named {typo!r} (member 2)" in str(near.value)
    assert f"did you mean {member.task_name!r}?" in str(near.value)
    assert "'billing:charge' (step 2 of the chain)" in str(far.value)
    assert "decorate it with @broker.task on this broker" in str(far.value)


async def test_a_serializable_argument_is_accepted(fanin: FanInMiddleware) -> None:
    handle = await group([Signature.of(member, datetime(2026, 1, 1))]).kiq(broker)
    status = await handle.status()
    assert status.total == 1
    # The in-memory broker runs the member at once: let the group finish before
    # its keys go, or its finaliser would write the sweep's index back.
    await broker.wait_all()
    await eventually(lambda: _finalised(handle), what="the group to be finalised")
    await fanin.context.redis.delete(*await fanin.context.redis.keys("*"))


async def _finalised(handle: GroupHandle) -> bool:
    return (await handle.status()).state.value == "completed"


@pytest.mark.parametrize(
    ("members", "says"),
    [
        (Signature.of(member, 1), r"members is one Signature, not a list of them"),
        (chain(Signature.of(member, 1)), r"members is one chain, not a list of them"),
        (None, r"members is None, not a list \(or an iterator\) of Signatures"),
        ("abc", r"members is a str, not a list \(or an iterator\) of Signatures"),
        (7, r"members is an int, not a list \(or an iterator\) of Signatures"),
    ],
    ids=["one signature", "one chain", "None", "a string", "a number"],
)
def test_members_that_are_no_collection_of_members_say_what_to_pass(
    members: object, says: str
) -> None:
    with pytest.raises(InvalidGroupError, match=says):
        group(members)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "options",
    [
        {"ttl": 0},
        {"deadline": -1},
        {"finaliser_lease": 0},
        {"prefix": "a{b"},
        {"max_group_size": 0},
        {"failure_policy": "nope"},
        {"ttl": 10, "deadline": 20},
        {"ttl": 100, "deadline": 60, "finaliser_lease": 50},
        {"retry_for": 0},
        {"max_member_bytes": 0},
    ],
)
def test_bad_middleware_options_raise_a_typed_error(options: dict[str, object]) -> None:
    with pytest.raises(InvalidOptionError):
        FanInMiddleware("redis://127.0.0.1:1", **options)  # type: ignore[arg-type]


async def test_a_broker_without_the_middleware_is_named_in_the_error() -> None:
    with pytest.raises(MiddlewareNotFoundError, match="with_middlewares"):
        await group(members(1)).kiq(InMemoryBroker())


async def test_a_group_task_called_directly_explains_itself() -> None:
    @group_task()
    def fan_out() -> list[Signature]:
        return members(1)

    with pytest.raises(MiddlewareNotFoundError, match="group task"):
        await fan_out()


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        (lambda: group([member]), r"member 0 is the task .*Signature\.of\(member"),
        (lambda: group(members(1), group_id="x" * 10_000), r"\.\.\. \(10002 char"),
        (
            lambda: group(members(1), then=Signature.of(collect, object())),
            r"^The continuation then \(.*collect\) cannot be serialized",
        ),
        (
            lambda: chain(members(1)[0], Signature.of(collect, object())),
            r"^Step 2 of the chain \(.*collect\) cannot be serialized",
        ),
        (lambda: group(members(1), ttl="soon"), r"^Invalid option ttl='soon'"),
    ],
)
async def test_an_error_names_the_thing_cuts_long_values_and_says_what_to_do(
    fanin: FanInMiddleware, spec: object, says: str
) -> None:
    with pytest.raises(FanInError, match=says) as raised:
        await spec().kiq(broker)  # type: ignore[operator]
    assert len(str(raised.value)) < 400


async def test_a_group_task_body_that_returns_no_members_names_the_task(
    fanin: FanInMiddleware,
) -> None:
    @broker.task(task_name="empty_handed")
    @group_task
    async def empty_handed() -> None:
        return None

    task = await empty_handed.kiq()
    result = await task.wait_result()
    assert result.is_err
    assert isinstance(result.error, GroupTaskReturnError)
    assert "empty_handed returned None" in str(result.error)


def test_group_task_above_broker_task_is_refused_when_decorating() -> None:
    with pytest.raises(GroupTaskOrderError, match=r"under @broker\.task") as raised:

        @group_task()
        @broker.task
        async def fan_out() -> list[Signature]:
            return members(1)

    assert isinstance(raised.value, FanInError)


async def test_a_middleware_used_before_startup_says_so() -> None:
    fanin = FanInMiddleware("redis://127.0.0.1:1")
    with pytest.raises(MiddlewareNotFoundError, match="startup"):
        await group_status(fanin, "g")
