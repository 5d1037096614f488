"""``durability="replicated"``: writes wait for replicas (``WAIT``), reads do not.

fakeredis knows no ``WAIT``: here each pipeline's ``WAIT`` is sent as an
``ECHO`` of the acknowledgements the test sets (``tests/fake_replicas.py``), so
what the store does with too few is shown without a replica
(``test_durability_replica.py`` has a real one).
"""

import re
from collections.abc import AsyncIterator
from typing import Any

import pytest

from taskiq_fanin import FanInMiddleware
from taskiq_fanin.domain.config import DEFAULT_OUTCOME_STREAM_MAX as STREAM_MAX
from taskiq_fanin.domain.config import Durability, FanInConfig
from taskiq_fanin.errors import InvalidOptionError, NotReplicatedError
from taskiq_fanin.storage.chain_scripts import ChainScripts
from taskiq_fanin.storage.group_scripts import GroupScripts
from taskiq_fanin.storage.keys import ChainKeys, GroupKeys
from taskiq_fanin.storage.replies import Outcome, Recorded
from taskiq_fanin.storage.scripts import READS, packaged
from taskiq_fanin.transport.pipeline import PipelineBatcher
from taskiq_fanin.transport.replication import Replication, probe_key, replication
from taskiq_fanin.transport.retrying import is_transient
from tests.fake_replicas import Replicas, WaitingRedis
from tests.script_calls import create

#: Redis commands that change data, as the scripts call them.
WRITES = re.compile(
    r"call\('(SET|HSET|SADD|DEL|UNLINK|HDEL|HINCRBY|PEXPIRE|PEXPIREAT|RPUSH|ZADD|"
    r"ZREM|SREM|LPUSH|INCR|EXPIRE|HSETNX)'|\bmove(_field)?\(|keep_for_reading\("
)


@pytest.fixture
def replicas() -> Replicas:
    return Replicas()


@pytest.fixture
async def waiting(replicas: Replicas) -> AsyncIterator[WaitingRedis]:
    client = WaitingRedis()
    client.replicas = replicas
    yield client
    await client.flushall()
    await client.aclose()


def scripts_on(client: Any, durable: bool) -> tuple[GroupScripts, ChainScripts]:
    pipeline = PipelineBatcher(
        client, replication=Replication(1, 500) if durable else None
    )
    return GroupScripts(client, pipeline), ChainScripts(client, pipeline)


async def record(scripts: GroupScripts, keys: GroupKeys, index: int) -> Recorded:
    recorded, _, _ = await scripts.record_outcome(
        keys,
        token="t0k3n",
        index=index,
        outcome=Outcome.DONE,
        payload="",
        lease_ms=60_000,
        claimant="w",
        delivery=f"d{index}",
        stream_max=STREAM_MAX,
    )
    return recorded


async def test_the_default_sends_no_wait(
    waiting: WaitingRedis, replicas: Replicas
) -> None:
    scripts, _ = scripts_on(waiting, durable=False)
    keys = GroupKeys("t", "g")
    await create(scripts, keys, total=2)
    assert await record(scripts, keys, 0) is Recorded.RECORDED
    assert replicas.waits == []


async def test_a_write_waits_for_its_replicas(
    waiting: WaitingRedis, replicas: Replicas
) -> None:
    scripts, _ = scripts_on(waiting, durable=True)
    keys = GroupKeys("t", "g")
    await create(scripts, keys, total=3)
    assert replicas.waits[-1] == (1, 500)
    before = len(replicas.waits)
    await record(scripts, keys, 0)  # registers the script (a NOSCRIPT first)
    assert await record(scripts, keys, 1) is Recorded.RECORDED
    assert len(replicas.waits) == before + 3
    # Before each WAIT a probe on the write's slot: the WAIT covers what is there.
    assert await waiting.exists(probe_key(keys.meta)) == 1


async def test_too_few_replicas_is_redis_away_and_the_retry_finds_it_done(
    waiting: WaitingRedis, replicas: Replicas
) -> None:
    scripts, _ = scripts_on(waiting, durable=True)
    keys = GroupKeys("t", "g")
    await create(scripts, keys, total=1)
    await create(scripts, GroupKeys("t", "other"), total=1)
    await record(scripts, GroupKeys("t", "other"), 0)  # scripts registered
    replicas.acknowledged = 0
    before = len(replicas.waits)
    with pytest.raises(NotReplicatedError) as raised:
        await record(scripts, keys, 0)
    # The hooks retry it, as a connection lost mid-call.
    assert is_transient(raised.value)
    # The write did happen on the primary: its retry is told CLAIMED again.
    replicas.acknowledged = 1
    assert await record(scripts, keys, 0) is Recorded.CLAIMED
    assert (
        len(replicas.waits) == before + 2
    )  # and it waited again, though it wrote nothing


async def test_reads_send_no_wait(waiting: WaitingRedis, replicas: Replicas) -> None:
    scripts, chains = scripts_on(waiting, durable=True)
    keys = GroupKeys("t", "g")
    await create(scripts, keys, total=2)
    before = len(replicas.waits)
    await scripts.inspect_group(keys)
    await scripts.due("t:due", batch=10)
    await chains.inspect(ChainKeys("t", "c"))
    await chains.read(ChainKeys("t", "c"))
    assert len(replicas.waits) == before
    # A read refused nothing though replicas are away.
    replicas.acknowledged = 0
    assert await scripts.inspect_group(keys) is not None


async def test_writes_sent_together_share_one_wait(
    waiting: WaitingRedis, replicas: Replicas
) -> None:
    import asyncio

    scripts, _ = scripts_on(waiting, durable=True)
    await create(scripts, GroupKeys("t", "first"), total=1)  # registered
    before = len(replicas.waits)
    groups = [GroupKeys("t", f"g{i}") for i in range(5)]
    await asyncio.gather(*(create(scripts, keys, total=1) for keys in groups))
    assert len(replicas.waits) == before + 1


def test_the_reads_write_nothing_and_every_other_script_writes() -> None:
    for name, script in packaged().items():
        own = WRITES.search(_own_source(script.filename))
        assert (own is None) == (name in READS), name


def _own_source(filename: str) -> str:
    from taskiq_fanin.storage.scripts import _source

    return _source(filename)


def test_probe_keys_share_their_write_s_slot() -> None:
    from redis.crc import key_slot

    for key in ("fanin:{g1}:meta", "fanin:due", b"p:{chain-7}:record"):
        probe = probe_key(key)
        assert probe.startswith("p:" if isinstance(key, bytes) else "fanin:")
        raw = key if isinstance(key, bytes) else key.encode()
        assert key_slot(probe.encode()) == key_slot(raw)


def test_the_option() -> None:
    assert replication(FanInConfig()) is None
    middleware = FanInMiddleware(
        "redis://localhost:1", durability="replicated", replicas=2,
        replication_timeout=0.25,
    )  # fmt: skip
    assert middleware.config.durability is Durability.REPLICATED
    assert replication(middleware.config) == Replication(2, 250)
    with pytest.raises(InvalidOptionError, match="durability"):
        FanInMiddleware("redis://localhost:1", durability="fsynced")
    with pytest.raises(InvalidOptionError, match="replication_timeout"):
        FanInMiddleware(
            "redis://localhost:1", durability="replicated", replication_timeout=5.0
        )
    with pytest.raises(InvalidOptionError, match="replicas"):
        FanInMiddleware("redis://localhost:1", replicas=0)
    # The default durability waits for nothing: a short socket timeout is fine.
    FanInMiddleware("redis://localhost:1", socket_timeout=0.5)


async def test_a_chain_s_advance_and_finish_refused_for_replicas_are_told_again(
    waiting: WaitingRedis, replicas: Replicas
) -> None:
    """A step's retry after ``NotReplicatedError``: the same delivery is told
    ``ADVANCED`` (kick the next step) and ``DONE`` again, not a duplicate."""
    from taskiq_fanin.storage.replies import Advanced, Finished

    _, chains = scripts_on(waiting, durable=True)
    keys = ChainKeys("t", "c")
    start = {"token": "tk", "names": "[]", "ttl_ms": 60_000, "pending": ""}
    await chains.start(keys, **start, steps=2, deadline_ms=60_000)
    moving = {"token": "tk", "step": 0, "compensation": "", "ttl_ms": 60_000}
    replicas.acknowledged = 0
    with pytest.raises(NotReplicatedError):
        await chains.advance(keys, **moving, pending="", delivery="d0")
    replicas.acknowledged = 1
    advanced = await chains.advance(keys, **moving, pending="", delivery="d0")
    assert advanced is Advanced.ADVANCED
    replicas.acknowledged = 0
    with pytest.raises(NotReplicatedError):
        await chains.finish(keys, token="tk", step=1, delivery="d1")
    replicas.acknowledged = 1
    assert await chains.finish(keys, token="tk", step=1, delivery="d1") is Finished.DONE


async def test_a_script_not_loaded_yet_is_loaded_while_replicas_are_away(
    waiting: WaitingRedis, replicas: Replicas
) -> None:
    """Its NOSCRIPT is not hidden behind the WAIT's refusal: it is loaded, and
    the call then refused for its replicas (before, every retry met NOSCRIPT
    again, and nothing was written while they were away)."""
    scripts, _ = scripts_on(waiting, durable=True)
    replicas.acknowledged = 0
    keys = GroupKeys("t", "g")
    with pytest.raises(NotReplicatedError):
        await create(scripts, keys, total=1)
    sha = scripts._scripts["createGroup"].script.sha
    assert await waiting.script_exists(sha) == [True]
    assert await waiting.exists(keys.meta) == 1  # on the primary, not replicated
