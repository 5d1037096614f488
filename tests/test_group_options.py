"""Every option of a group reaches its ledger, on every path that plans a group.

One ``GroupOptions`` value travels from the caller to the meta: a direct
``group(...)``, a ``@group_task`` body (the decorator's options as defaults) and
a chain's group step. Each option is set to a value that is not its default and
read back from Redis, on fakeredis and on a real redis-server.
"""

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from redis.asyncio import Redis
from taskiq import BrokerMessage, InMemoryBroker

from taskiq_fanin import FanInMiddleware, Signature, chain, group, group_task
from taskiq_fanin.chains.tasks import CONTINUE_TASK_NAME, FAIL_TASK_NAME
from taskiq_fanin.domain.labels import CANCELLABLE_LABEL
from taskiq_fanin.domain.options import GroupOptionsArgs
from taskiq_fanin.models import GroupOptions
from taskiq_fanin.storage.keys import GroupKeys
from taskiq_fanin.storage.records import META_FIELDS

#: A value of each option that is not its default (continuations: task names),
#: and a check of the meta (fields as text, the meta's TTL in ms) for it.
Check = Callable[[dict[str, str], int], bool]
EVERY_OPTION: dict[str, tuple[Any, Check]] = {
    "then": ("then_task", lambda meta, _: '"t":"then_task"' in meta["then"]),
    "on_error": ("error_task", lambda meta, _: '"t":"error_task"' in meta["on_error"]),
    "failure_policy": ("fail", lambda meta, _: meta["policy"] == "fail"),
    "sweep_policy": ("redrive", lambda meta, _: meta["sweep"] == "redrive"),
    "ttl": (600, lambda meta, pttl: meta["ttl"] == "600000" and pttl > 590_000),
    "deadline": (120, lambda meta, _: meta["span"] == "120000"),
    "cancellable": (True, lambda meta, _: meta["cancellable"] == "1"),
    "results_inline_max": (7, lambda meta, _: meta["inline_max"] == "7"),
    # Narrower than the groups below (a window as wide is none).
    "max_in_flight": (1, lambda meta, _: meta["max_in_flight"] == "1"),
    "open": (True, lambda meta, _: meta["open"] == "1" and meta["sealed"] == "0"),
    "version": ("2026.12", lambda meta, _: meta["version"] == "2026.12"),
    "name": ("nightly", lambda meta, _: meta["workflow"] == "nightly"),
}
#: The values a ``@group_task`` body overrides its decorator's with.
OVERRIDES: dict[str, tuple[Any, Check]] = {
    "sweep_policy": ("give_up", lambda meta, _: meta["sweep"] == "give_up"),
    "ttl": (300, lambda meta, pttl: meta["ttl"] == "300000" and pttl <= 300_000),
}


class HoldingBroker(InMemoryBroker):
    """Runs the fan-out tasks it is given; holds every other message unsent."""

    def __init__(self, *run: str) -> None:
        super().__init__()
        self.run = set(run)
        self.held: list[BrokerMessage] = []

    async def kick(self, message: BrokerMessage) -> None:
        if message.task_name in self.run:
            await super().kick(message)
        else:
            self.held.append(message)


@pytest.fixture
async def broker(client: Redis, key_prefix: str) -> AsyncIterator[HoldingBroker]:
    broker = HoldingBroker("fan_out")
    broker.add_middlewares(FanInMiddleware(client, prefix=key_prefix))
    for name in ("member", "then_task", "error_task", "after"):
        broker.register_task(_noop, task_name=name)
    await broker.startup()
    yield broker
    await broker.shutdown()


async def _noop(*_: Any) -> None:
    return None


async def read_back(client: Redis, keys: GroupKeys) -> tuple[dict[str, str], int]:
    raw = await client.hgetall(keys.meta)
    meta = {field.decode(): value.decode() for field, value in raw.items()}
    return meta, await client.pttl(keys.meta)


def failing(
    checks: dict[str, tuple[Any, Check]], meta: dict[str, str], pttl: int
) -> set[str]:
    """The options whose check fails on this meta."""
    return {name for name, (_, ok) in checks.items() if not ok(meta, pttl)}


def test_every_option_has_a_place_in_the_meta_and_a_keyword() -> None:
    fields = set(GroupOptions.model_fields)
    assert set(META_FIELDS) == fields
    assert set(GroupOptionsArgs.__annotations__) == fields
    assert set(EVERY_OPTION) == fields  # this test sets every one of them


async def test_a_direct_group_writes_every_option(
    broker: HoldingBroker, client: Redis, key_prefix: str
) -> None:
    options = {name: value for name, (value, _) in EVERY_OPTION.items()}
    members = [Signature.of("member", 1), Signature.of("member", 2)]
    spec = group(members, group_id="direct", **options)
    handle = await spec.kiq(broker)
    meta, pttl = await read_back(client, GroupKeys(key_prefix, handle.group_id))
    assert failing(EVERY_OPTION, meta, pttl) == set()
    assert all(CANCELLABLE_LABEL in message.labels for message in broker.held)


async def test_a_group_task_writes_its_options_and_the_bodys_win(
    broker: HoldingBroker, client: Redis, key_prefix: str
) -> None:
    defaults = {name: value for name, (value, _) in EVERY_OPTION.items()}
    overrides = {name: value for name, (value, _) in OVERRIDES.items()}

    @broker.task(task_name="fan_out")
    @group_task(**defaults)
    async def fan_out() -> Any:
        return group(
            [Signature.of("member", 1), Signature.of("member", 2)], **overrides
        )

    task = await fan_out.kicker().with_task_id("fan-1").kiq()
    assert (await task.wait_result()).return_value == "fan-1"
    meta, pttl = await read_back(client, GroupKeys(key_prefix, "fan-1"))
    expected = {**EVERY_OPTION, **OVERRIDES}
    assert failing(expected, meta, pttl) == set()


async def test_a_group_step_in_a_chain_writes_every_option(
    broker: HoldingBroker, client: Redis, key_prefix: str
) -> None:
    """A chain's continuations are its own; every other option is the step's."""
    step_options = {
        name: value
        for name, (value, _) in EVERY_OPTION.items()
        if name not in ("then", "on_error")
    }
    await chain(
        group([Signature.of("member", 1), Signature.of("member", 2)], **step_options),
        Signature.of("after"),
        chain_id="c1",
    ).kiq(broker)
    meta, pttl = await read_back(client, GroupKeys(key_prefix, "c1~0"))
    assert meta["total"] == "2"
    checks = {name: EVERY_OPTION[name] for name in step_options}
    assert failing(checks, meta, pttl) == set()
    assert f'"t":"{CONTINUE_TASK_NAME}"' in meta["then"]
    assert f'"t":"{FAIL_TASK_NAME}"' in meta["on_error"]
    members = [m for m in broker.held if m.task_name == "member"]
    assert len(members) == 1  # its window: one kicked, one waiting
    assert all(CANCELLABLE_LABEL in message.labels for message in members)
