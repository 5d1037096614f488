"""The web page's `/` with many open groups: python -m benchmarks.web_page [N].

Plans N open groups (2 members each, no worker: they stay open) on a
throwaway redis-server, serves the page in-process and times GET / (and a
group's page), then takes screenshots into /tmp/web-*.png with the system's
Chromium.
"""

import asyncio
import sys
import time
import urllib.request

from local_redis import RedisServer
from taskiq_fanin import GroupResult, Signature, chain, group
from taskiq_fanin.web import Settings
from tests.harness import stream_broker
from tests.web_harness import chromium, web_server


def _get(url: str) -> float:
    start = time.perf_counter()
    with urllib.request.urlopen(url) as reply:
        reply.read()
    return time.perf_counter() - start


async def main(count: int) -> None:
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
            loop = asyncio.get_running_loop()
            times = sorted(
                [await loop.run_in_executor(None, _get, f"{url}/") for _ in range(20)]
            )
            print(
                f"GET / with {count} open groups: median {times[10] * 1000:.1f} ms,"
                f" max {times[-1] * 1000:.1f} ms (20 requests)"
            )
            group_times = sorted(
                [
                    await loop.run_in_executor(None, _get, f"{url}/groups/g0")
                    for _ in range(20)
                ]
            )
            print(f"GET /groups/g0: median {group_times[10] * 1000:.1f} ms")
            async with chromium() as browser:
                page = await browser.new_page(viewport={"width": 1100, "height": 900})
                for name, path in (
                    ("list", "/"),
                    ("group", "/groups/g0"),
                    ("chain", "/chains/c1"),
                ):
                    await page.goto(url + path)
                    await page.screenshot(path=f"/tmp/web-{name}.png")
        await broker.shutdown()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000))
