"""What a completion costs in Redis, counted by the server (``INFO commandstats``):
counts do not drift with a noisy machine the way seconds do.

The fan-in keys live on a Redis of their own, so the broker's traffic (which
includes redis-py's Lua locks) cannot blur the count.
"""

from collections import Counter

from redis.asyncio import Redis

from local_redis import RedisServer, replica_of
from local_redis import commandstats as count_calls
from taskiq_fanin import GroupResult, Signature, group
from tests.harness import SentMessages, drained, eventually, stream_broker, worker
from tests.window_probe import Gate

IGNORED = {"info", "ping", "hello", "client|setinfo", "script|load"}


async def commandstats(client: Redis) -> Counter[str]:
    """Calls per command, the test's own probes left out."""
    counts = await count_calls(client)
    return Counter({name: n for name, n in counts.items() if name not in IGNORED})


async def run_group(
    redis_url: str,
    fanin_url: str,
    prefix: str,
    size: int,
    *,
    slots: int = 1,
    max_in_flight: int | None = None,
    gate: Gate | None = None,
    **fanin: object,
) -> Counter[str]:
    """Commands the fan-in's Redis ran for one group of ``size`` no-op members.

    With one slot, members finish one at a time, so none share a script call.
    With ``gate``, its members wait for each other, then finish together.
    """
    # Listed before the fan-in middleware, its post_execute runs after fan-in's:
    # waiting on it needs no Redis command that would blur the count.
    sent = SentMessages()
    broker, _ = stream_broker(redis_url, prefix, sent, fanin_redis=fanin_url, **fanin)

    @broker.task
    async def member(index: int) -> None:
        if gate is not None:
            await gate.meet(index)

    @broker.task
    async def then(result: GroupResult) -> None:
        return None

    client = Redis.from_url(fanin_url)
    try:
        async with worker(broker, max_async_tasks=slots) as receiver:
            before = await commandstats(client)
            members = [Signature.of(member, i) for i in range(size)]
            await group(members, then=then, max_in_flight=max_in_flight).kiq(broker)
            await eventually(
                lambda: sent.executions_of(then.task_name) == 1,
                what="the continuation to complete",
            )
            # The finaliser records the dispatch after its kick returned: the
            # continuation may end first. Counted once every message was acked
            # (the broker's stream is on the other Redis: no command counted).
            await drained(broker, receiver)
            after = await commandstats(client)
    finally:
        await client.aclose()
    return after - before


async def test_one_script_call_per_completion_and_a_fixed_cost_per_group(
    redis_url: str, key_prefix: str
) -> None:
    with RedisServer() as fanin_server:
        # Loads the scripts, so that no NOSCRIPT retry is counted below.
        await run_group(redis_url, fanin_server.url, f"{key_prefix}-warm", 1)
        small = await run_group(redis_url, fanin_server.url, f"{key_prefix}-a", 20)
        large = await run_group(redis_url, fanin_server.url, f"{key_prefix}-b", 40)
    per_child = {name: (large[name] - small[name]) / 20 for name in large | small}
    per_group = {name: small[name] - 20 * per_child[name] for name in per_child}

    # One round trip per completion finishing alone: one EVALSHA, nothing else.
    assert per_child["evalsha"] == 1
    # Per group: create, planned, dispatched, begin (the continuation's run
    # guard) and completed: five scripts (the claim hands the finaliser the
    # outcomes); the sweep's index scored at planning and at the claim (two
    # one-key scripts, on Redis's clock), then removed.
    assert per_group["evalsha"] == 7
    assert per_group["zadd"] == 2
    assert per_group["zrem"] == 1
    # The default durability waits for no replica.
    assert per_child.get("wait", 0) == per_group.get("wait", 0) == 0
    inside = sum(v for k, v in per_child.items() if k != "evalsha")
    print(f"\nper completion: 1 round trip, {inside:.2f} commands inside Redis")
    print("per completion, by command:", {k: v for k, v in per_child.items() if v})
    print("per group, by command:", {k: v for k, v in per_group.items() if v})
    # A Celery 5.7 chord runs 12 per completion; a no-op member costs us fewer.
    assert inside < 12


async def test_members_finishing_together_share_a_script_call(
    redis_url: str, key_prefix: str
) -> None:
    """No-op members in 50 slots finish together only when the worker happens
    to take them together (one run in a clean CI sent 200 calls for 200
    members): the first 50 hold their slots until all of them run, so that at
    least they do finish together."""
    size, slots = 200, 50
    with RedisServer() as fanin_server:
        await run_group(redis_url, fanin_server.url, f"{key_prefix}-warm", 1)
        alone = await run_group(redis_url, fanin_server.url, f"{key_prefix}-a", size)
        together = await run_group(
            redis_url, fanin_server.url, f"{key_prefix}-b", size, slots=slots,
            gate=Gate(range(slots)),
        )  # fmt: skip
    # Every member was recorded either way (the continuation ran with all of
    # them: run_group waits for it), in fewer calls with 50 slots.
    assert alone["evalsha"] == size + 7
    assert together["evalsha"] < alone["evalsha"]
    print(f"\n{size} members: {together['evalsha'] - 7} record calls with 50 slots")


async def test_a_windowed_completion_is_still_one_script_call(
    redis_url: str, key_prefix: str
) -> None:
    """The release is decided inside the recording call: no round trip more on
    the fan-in's Redis (the released member's kick is the broker's, as the
    planner's kick of it would have been)."""
    window = 5
    with RedisServer() as fanin_server:
        await run_group(redis_url, fanin_server.url, f"{key_prefix}-warm", 1)
        plain = await run_group(redis_url, fanin_server.url, f"{key_prefix}-p", 40)
        runs = [
            await run_group(
                redis_url, fanin_server.url, f"{key_prefix}-{size}", size,
                max_in_flight=window,
            )
            for size in (20, 40)
        ]  # fmt: skip
    small, large = runs
    per_child = {name: (large[name] - small[name]) / 20 for name in large | small}
    per_group = {name: small[name] - 20 * per_child[name] for name in per_child}

    assert per_child["evalsha"] == 1
    assert per_group["evalsha"] == 7  # as an unwindowed group's
    assert large["evalsha"] == plain["evalsha"]
    inside = sum(v for k, v in per_child.items() if k != "evalsha")
    print(f"\nwindowed, per completion: 1 round trip, {inside:.2f} commands inside")
    print(
        "windowed, per completion, by command:",
        {k: v for k, v in per_child.items() if v},
    )


async def test_replicated_durability_adds_a_probe_and_a_wait_not_a_round_trip(
    redis_url: str, key_prefix: str
) -> None:
    """What ``durability="replicated"`` costs: in each pipeline that writes, a
    probe SET and a WAIT, sent with the script call (no round trip more)."""
    replicated = {"durability": "replicated"}
    with RedisServer() as fanin_server, replica_of(fanin_server.url):
        url = fanin_server.url
        await run_group(redis_url, url, f"{key_prefix}-warm", 1, **replicated)
        small = await run_group(redis_url, url, f"{key_prefix}-a", 20, **replicated)
        large = await run_group(redis_url, url, f"{key_prefix}-b", 40, **replicated)
    per_child = {name: (large[name] - small[name]) / 20 for name in large | small}
    per_group = {name: small[name] - 20 * per_child[name] for name in per_child}
    # A completion finishing alone: its script call, a probe and a WAIT.
    assert per_child["evalsha"] == 1
    assert per_child["wait"] == per_child["set"] == 1
    # Per group: as many WAITs as write pipelines, at most one per script.
    assert per_group["evalsha"] == 7
    assert 0 < per_group["wait"] <= 7
    print(f"\nreplicated, per completion: {per_child}; per group: {per_group}")
