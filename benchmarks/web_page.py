"""The web page with many open groups and one big group.

    python -m benchmarks.web_page [N] [BIG]

Plans N open groups (2 members each, no worker: they stay open; default
10,000) on a throwaway redis-server, serves the page in-process and times
GET / (and a small group's page); then plans one group of BIG members
(default 100,000), records the outcomes of all but its last 1,000 (one in a
hundred failed) through the library's own recording, and times its page: the
first members, the last ones, and the outcomes after a cursor. Then it takes
screenshots into /tmp/web-*.png with the system's Chromium.
"""

import asyncio
import json
import sys
import time
import urllib.request
from typing import Any

from taskiq import AsyncTaskiqDecoratedTask

from local_redis import RedisServer
from taskiq_fanin import FanInMiddleware, GroupResult, Signature, chain, group
from taskiq_fanin.domain.labels import MemberRef
from taskiq_fanin.groups.recording import error_payload, record
from taskiq_fanin.storage.keys import GroupKeys
from taskiq_fanin.storage.records import GroupMeta
from taskiq_fanin.storage.replies import Outcome
from taskiq_fanin.web import Settings
from tests.harness import stream_broker
from tests.web_harness import chromium, web_server

#: Members of the big group left without an outcome (it stays open).
PENDING = 1_000
#: Outcomes recorded at once (the library's pipeline batches them).
RECORDED_AT_ONCE = 2_000


def _get(url: str) -> float:
    start = time.perf_counter()
    with urllib.request.urlopen(url) as reply:
        reply.read()
    return time.perf_counter() - start


async def _timed(url: str, repeats: int = 20) -> tuple[float, float]:
    """Median and slowest of ``repeats`` GETs of ``url``, in ms."""
    loop = asyncio.get_running_loop()
    times = sorted(
        [await loop.run_in_executor(None, _get, url) for _ in range(repeats)]
    )
    return times[len(times) // 2] * 1000, times[-1] * 1000


async def _big_group(
    broker: Any,
    fanin: FanInMiddleware,
    member: AsyncTaskiqDecoratedTask[[int], int],
    then: AsyncTaskiqDecoratedTask[[GroupResult], None],
    size: int,
) -> None:
    """Plan ``big`` with ``size`` members; record all but the last ``PENDING``."""
    start = time.perf_counter()
    await group(
        (Signature.of(member, n) for n in range(size)), then=then, group_id="big"
    ).kiq(broker)
    planned = time.perf_counter() - start
    ctx = fanin.context
    raw = await ctx.redis.hgetall(GroupKeys(ctx.config.prefix, "big").meta)
    token = GroupMeta.from_hash(raw).token
    failure = error_payload(ValueError("no thumbnail"), ctx.config.max_result_bytes)

    async def one(index: int) -> None:
        failed = index % 100 == 7
        outcome = Outcome.FAILED if failed else Outcome.DONE
        payload = failure if failed else json.dumps(index)
        ref = MemberRef(group_id="big", index=index, token=token)
        await record(ctx, ref, outcome, payload, delivery=f"bench{index}")

    start = time.perf_counter()
    for batch in range(0, size - PENDING, RECORDED_AT_ONCE):
        last = min(batch + RECORDED_AT_ONCE, size - PENDING)
        await asyncio.gather(*(one(n) for n in range(batch, last)))
    print(
        f"planned a group of {size} in {planned:.1f}s, recorded"
        f" {size - PENDING} outcomes in {time.perf_counter() - start:.1f}s"
    )


async def main(count: int, big: int) -> None:
    with RedisServer() as server:
        broker, fanin = stream_broker(server.url, "bench")

        @broker.task
        async def member(n: int) -> int:
            return n

        @broker.task
        async def then(result: GroupResult) -> None:
            pass

        await broker.startup()
        start = time.perf_counter()
        for batch in range(0, count, 200):
            await asyncio.gather(
                *(
                    group(
                        [Signature.of(member, 0), Signature.of(member, 1)],
                        then=then,
                        group_id=f"g{n}",
                    ).kiq(broker)
                    for n in range(batch, min(batch + 200, count))
                )
            )
        await chain(
            Signature.of(member, 1), Signature.of(member, 2).immutable(), chain_id="c1"
        ).kiq(broker)
        print(f"planned {count} groups in {time.perf_counter() - start:.1f}s")
        async with web_server(Settings(fanin)) as url:
            median, most = await _timed(f"{url}/")
            print(
                f"GET / with {count} open groups: median {median:.1f} ms,"
                f" max {most:.1f} ms (20 requests)"
            )
            median, most = await _timed(f"{url}/groups/g0")
            print(f"GET /groups/g0: median {median:.1f} ms, max {most:.1f} ms")
            if big:
                await _big_group(broker, fanin, member, then, big)
                for what, path in (
                    ("its first members", "/groups/big"),
                    ("its last members", f"/groups/big?offset={big - 50}"),
                    ("outcomes after a cursor", "/groups/big?after=0-1"),
                ):
                    median, most = await _timed(url + path)
                    print(
                        f"GET {path} ({big} members, {what}): median"
                        f" {median:.1f} ms, max {most:.1f} ms (20 requests)"
                    )
            async with chromium() as browser:
                page = await browser.new_page(viewport={"width": 1100, "height": 900})
                for name, path in (
                    ("list", "/"),
                    ("group", "/groups/g0"),
                    ("chain", "/chains/c1"),
                    *((("big", "/groups/big"),) if big else ()),
                ):
                    await page.goto(url + path)
                    await page.screenshot(path=f"/tmp/web-{name}.png")
        await broker.shutdown()


if __name__ == "__main__":
    numbers = [int(arg) for arg in sys.argv[1:3]]
    asyncio.run(main(*numbers, *(10_000, 100_000)[len(numbers) :]))
