"""Arguments are bound against the task's signature at kiq(), as Python would
call it, with what the library passes first: a continuation's GroupResult, a
chain's ChainFailure, a previous step's result. Nothing is written when refused.
"""

from collections.abc import AsyncIterator, Callable
from typing import Annotated

import pytest
from fakeredis.aioredis import FakeRedis
from taskiq import Context, InMemoryBroker, TaskiqDepends

from taskiq_fanin import FanInError, FanInMiddleware, Signature, chain, group
from taskiq_fanin.chains.chain_validation import validate_chain
from taskiq_fanin.domain.spec import ChainSpec, GroupSpec
from taskiq_fanin.errors import (
    ArgumentsMismatchError,
    InvalidChainError,
    InvalidGroupError,
    NotATaskError,
)
from taskiq_fanin.groups.group_validation import validate_group
from taskiq_fanin.worker.skipping import _guarded

broker = InMemoryBroker()


@broker.task
async def resize(photo: int, width: int = 100, *, crop: bool = False) -> int:
    return photo


@broker.task
async def publish(result: object, album: int) -> None:
    return None


@broker.task
async def undo(photo: int) -> None:
    return None


@broker.task
async def with_context(photo: int, context: Context = TaskiqDepends()) -> None:
    return None


@broker.task
async def annotated_context(
    photo: int, context: Annotated[Context, TaskiqDepends()]
) -> None:
    return None


@broker.task
async def anything(*args: object, **kwargs: object) -> None:
    return None


@broker.task
async def keyword_only(*, photo: int) -> None:
    return None


@broker.task(task_name="by_name_only")
async def named(photo: int) -> None:
    return None


def plain_function(photo: int) -> None:
    return None


@pytest.fixture
async def fanin(fake_redis: FakeRedis) -> AsyncIterator[FanInMiddleware]:
    middleware = FanInMiddleware(fake_redis, prefix="args")
    broker.middlewares.clear()
    broker.add_middlewares(middleware)
    await broker.startup()
    yield middleware
    await broker.shutdown()
    assert await fake_redis.keys("*") == [], "refused input must write nothing"


Spec = Callable[[], GroupSpec | ChainSpec]


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        (
            lambda: group([Signature.of(resize, 1), Signature.of(resize, 1, 2, 3)]),
            r"^Member 1 \(.*:resize\) cannot take its arguments: too many positional "
            r"arguments\. The task is resize\(photo, width=100, \*, crop=False\)$",
        ),
        (
            lambda: group([Signature.of(resize, 1, zz=4)]),
            r"^Member 0 .*unexpected keyword argument 'zz'",
        ),
        (
            lambda: group([Signature.of(resize)]),
            r"^Member 0 .*missing a required argument: 'photo'",
        ),
        (
            lambda: group([Signature.of(resize, 1)], then=Signature.of(publish)),
            r"^The continuation then .*missing a required argument: 'album'\. The "
            r"task is publish\(result, album\), and it receives the GroupResult first",
        ),
        (
            lambda: group(
                [Signature.of(resize, 1)],
                failure_policy="fail",
                on_error=Signature.of(publish, 1, 2),
            ),
            r"^The continuation on_error .*too many positional",
        ),
        (
            lambda: chain(Signature.of(resize, 1), Signature.of(undo, 2)),
            r"^Step 2 of the chain .*too many positional.*receives the previous "
            r"step's result \(Signature\.immutable\(\) opts out\) first",
        ),
        (
            lambda: chain(Signature.of(resize, 1), Signature.of(undo).immutable()),
            r"^Step 2 of the chain .*missing a required argument: 'photo'",
        ),
        (
            lambda: chain(Signature.of(resize, 1), on_error=Signature.of(undo, 1)),
            r"^The chain's on_error .*too many positional.*a ChainFailure first",
        ),
        (
            lambda: chain(
                Signature.of(resize, 1).with_compensation(Signature.of(undo)),
            ),
            r"^The compensation of step 1 .*missing a required argument: 'photo'",
        ),
        (
            lambda: chain(
                Signature.of(resize, 1), group([Signature.of(resize, 1, 2, 3)])
            ),
            r"^Member 0 of step 2 .*too many positional",
        ),
        (
            lambda: chain(
                Signature.of(resize, 1),
                group([chain(Signature.of(undo, 1), Signature.of(undo, 2))]),
            ),
            r"^Step 1 of the chain in member 0 of step 2 .*too many positional",
        ),
        (
            lambda: group([chain(Signature.of(resize, 1), Signature.of(publish))]),
            r"^Step 2 of the chain in member 0 .*missing a required argument: 'album'",
        ),
        (
            lambda: group([Signature.of("by_name_only", 1, 2)]),
            r"^Member 0 \(by_name_only\) .*The task is named\(photo\)$",
        ),
        (
            lambda: group([Signature.of(with_context, 1, 2)]),
            r"too many positional arguments\. The task is with_context\(photo\)$",
        ),
        (
            lambda: group([Signature.of(keyword_only, 1)]),
            r"too many positional arguments\. The task is keyword_only\(\*, photo\)$",
        ),
    ],
)
async def test_arguments_that_do_not_fit_the_task_are_refused_at_kiq(
    fanin: FanInMiddleware, spec: Spec, says: str
) -> None:
    with pytest.raises(ArgumentsMismatchError, match=says) as raised:
        await spec().kiq(broker)  # type: ignore[attr-defined]
    assert isinstance(raised.value, FanInError)
    assert isinstance(raised.value, TypeError)
    assert "taskiq_original" not in str(raised.value)


@pytest.mark.parametrize(
    "spec",
    [
        lambda: group([Signature.of(resize, 1)], then=Signature.of(publish, 7)),
        lambda: group([Signature.of(resize, 1, 2, crop=True)]),
        lambda: group([Signature.of(with_context, 1)]),
        lambda: group([Signature.of(with_context, photo=1)]),
        lambda: group([Signature.of(annotated_context, 1)]),
        lambda: group([Signature.of(anything), Signature.of(anything, 1, 2, x=3)]),
        lambda: group([Signature.of(keyword_only, photo=1)]),
        lambda: group([Signature.of("by_name_only", 1)]),
        lambda: chain(Signature.of(resize, 1), Signature.of(resize)),
        lambda: chain(Signature.of(resize, 1), Signature.of(undo, 2).immutable()),
        lambda: chain(
            Signature.of(resize, 1).with_compensation(Signature.of(undo, 1)),
            Signature.of(resize, width=3),
            on_error=Signature.of(publish, 9),
        ),
        lambda: chain(
            Signature.of(resize, 1),
            group([Signature.of(resize, 2), Signature.of(undo, 3).immutable()]),
            Signature.of(publish, 4),
        ),
        lambda: chain(
            Signature.of(resize, 1),
            group([chain(Signature.of(resize), Signature.of(undo, 3).immutable())]),
        ),
        lambda: chain(group([Signature.of(undo, 1)]), Signature.of(publish, 2)),
    ],
)
async def test_arguments_that_fit_as_python_would_bind_them_are_accepted(
    fanin: FanInMiddleware, spec: Spec
) -> None:
    built = spec()
    if isinstance(built, GroupSpec):
        validate_group(fanin.context, built)
    else:
        validate_chain(fanin.context, built, depth=1)


def test_a_plain_function_is_named_with_the_fix() -> None:
    with pytest.raises(NotATaskError) as raised:
        Signature.of(plain_function, 1)  # type: ignore[arg-type]
    assert str(raised.value) == (
        "plain_function is a plain function, not a taskiq task or a task name: "
        "decorate it with @broker.task, then use Signature.of(plain_function, ...)"
    )
    assert isinstance(raised.value, FanInError)
    assert isinstance(raised.value, TypeError)


@pytest.mark.parametrize("value", [42, None, [resize], lambda photo: None])
def test_anything_else_that_is_not_a_task_is_refused(value: object) -> None:
    with pytest.raises(NotATaskError, match="give it a task decorated with"):
        Signature.of(value)  # type: ignore[arg-type]


def test_a_plain_function_as_a_continuation_is_refused_too() -> None:
    with pytest.raises(NotATaskError, match=r"decorate it with @broker\.task"):
        group([Signature.of(resize, 1)], then=plain_function)  # type: ignore[arg-type]


def test_a_bare_task_is_named_by_its_public_name() -> None:
    with pytest.raises(InvalidGroupError) as raised:
        group([resize])  # type: ignore[list-item]
    message = str(raised.value)
    assert "Signature.of(resize, ...)" in message
    assert "taskiq_original" not in message


@broker.task
async def guarded(photo: int) -> None:
    return None


async def test_a_task_whose_function_the_skip_guard_wrapped_is_still_bound(
    fanin: FanInMiddleware,
) -> None:
    guarded.original_func = _guarded(guarded.original_func)
    validate_group(fanin.context, group([Signature.of(guarded, 1)]))
    with pytest.raises(ArgumentsMismatchError, match=r"The task is guarded\(photo\)$"):
        await group([Signature.of(guarded, 1, 2)]).kiq(broker)


def test_a_bare_task_as_a_chain_step_says_chain() -> None:
    with pytest.raises(InvalidChainError, match=r"^Invalid chain: step 2 is the task"):
        chain(Signature.of(resize, 1), resize)  # type: ignore[arg-type]
    with pytest.raises(InvalidGroupError, match=r"^Invalid chain: step 1 is the"):
        chain(resize)  # type: ignore[arg-type]  # still an InvalidGroupError
