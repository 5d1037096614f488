"""Kick ten albums and wait until each is published (a worker must be running).

python -m examples.album.run
"""

import argparse
import asyncio
import time

from redis.asyncio import Redis

from examples.album.app import PUBLISHED_KEY, REDIS_URL, broker, make_album


async def main(albums: int, timeout: float) -> int:
    """Kick ``albums`` fan-outs; print each publish line as it lands."""
    await broker.startup()
    async with Redis.from_url(REDIS_URL, decode_responses=True) as redis:
        await redis.delete(PUBLISHED_KEY)
        started = time.monotonic()
        for album in range(albums):
            await make_album.kiq(album)
        published = 0
        while published < albums and time.monotonic() - started < timeout:
            popped = await redis.blpop([PUBLISHED_KEY], timeout=1)
            if popped:
                published += 1
                print(f"{time.monotonic() - started:5.2f}s  {popped[1]}")
    await broker.shutdown()
    print(f"{published} of {albums} albums published")
    return 0 if published == albums else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--albums", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args()
    raise SystemExit(asyncio.run(main(args.albums, args.timeout)))
