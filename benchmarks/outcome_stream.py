"""What the outcome stream costs per member: Redis commands, Redis CPU, bytes,
and the recording client's CPU, with the stream kept and without it.

One throwaway redis-server; a group of N members planned through the library
(no worker: its members stay in the broker's stream), then each member's
outcome recorded through the library's own recording call (the worker's path,
``GroupScripts.record_outcome``), the members of a call one at a time. Both
sides alternate over the rounds; medians. The results are small JSON values
(an int) or about 100 bytes (``--payload``).

    python -m benchmarks.outcome_stream [--members 2000] [--rounds 3] [--payload 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

from redis.asyncio import Redis
from taskiq_redis import RedisStreamBroker

from local_redis import RedisServer
from taskiq_fanin import FanInMiddleware, Signature, group
from taskiq_fanin.storage.keys import group_keys
from taskiq_fanin.storage.replies import Outcome


async def _commandstats(client: Redis) -> dict[str, tuple[int, int]]:
    stats = await client.info("commandstats")
    return {
        name.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"]))
        for name, v in stats.items()
    }


async def _one(url: str, members: int, stream_max: int, payload: int) -> dict[str, Any]:
    prefix = f"cost{time.monotonic_ns()}"
    broker = RedisStreamBroker(url, queue_name=f"{prefix}:q")
    fanin = FanInMiddleware(url, prefix=prefix, outcome_stream_max=stream_max)
    broker.with_middlewares(fanin)

    @broker.task(task_name=f"{prefix}.member")
    async def member(index: int) -> int:
        return index

    await broker.startup()
    client = Redis.from_url(url)
    try:
        handle = await group(
            [Signature.of(member, i) for i in range(members)], results_inline_max=1
        ).kiq(broker)
        ctx = fanin.context
        keys = group_keys(prefix, handle.group_id)
        token = (await client.hget(keys.meta, "token")).decode()
        value = json.dumps("x" * max(payload - 2, 0)) if payload else None
        before = await _commandstats(client)
        cpu = time.process_time()
        for index in range(members):
            await ctx.scripts.record_outcome(
                keys,
                token=token,
                index=index,
                outcome=Outcome.DONE,
                payload=value or str(index),
                lease_ms=60_000,
                claimant="bench",
                delivery=f"d{index}",
                stream_max=stream_max,
            )
        cpu = time.process_time() - cpu
        after = await _commandstats(client)
        stream_bytes = await client.memory_usage(keys.outcomes) or 0
    finally:
        await client.aclose()
        await broker.shutdown()
    skip = {"info", "memory"}
    calls = sum(after[n][0] - before.get(n, (0, 0))[0] for n in after if n not in skip)
    evalsha = after["evalsha"][1] - before.get("evalsha", (0, 0))[1]
    return {
        "commands_per_member": calls / members,
        "script_us_per_member": evalsha / members,
        "stream_bytes_per_member": stream_bytes / members,
        "client_cpu_us_per_member": cpu * 1e6 / members,
    }


async def main(members: int, rounds: int, payload: int) -> dict[str, dict[str, float]]:
    sides = {"without stream": 0, "with stream": 10_000}
    seen: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    with RedisServer() as server:
        for _ in range(rounds):
            for side, stream_max in sides.items():
                seen[side].append(await _one(server.url, members, stream_max, payload))
    return {
        side: {
            key: round(statistics.median(run[key] for run in runs), 2)
            for key in runs[0]
        }
        for side, runs in seen.items()
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--payload", type=int, default=0, help="result bytes (0: int)")
    args = parser.parse_args()
    found = asyncio.run(main(args.members, args.rounds, args.payload))
    print(json.dumps(found, indent=2))
