"""The video pipeline of the seed: probe, three transcodes in parallel, thumbnail,
notify, with a workflow record and compensations.

    taskiq worker examples.video_pipeline.app:broker --workers 1 --max-async-tasks 4

Every step enqueues the next when it is done; none waits on another. A transcode
named in ``FAIL_RENDITION`` (set by ``run.py --fail 720p``) fails for good: the
group fails (policy ``fail``), the chain stops there, ``mark_failed`` runs once
and the storage quota reserved by ``probe`` is released by its compensation.
"""

import asyncio
import os

from redis.asyncio import Redis
from taskiq_redis import RedisStreamBroker

from taskiq_fanin import (
    ChainFailure,
    FanInMiddleware,
    GroupResult,
    Signature,
    chain,
    group,
)
from taskiq_fanin.models import Chain

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
#: Where every step writes one line, for ``run.py`` to show.
JOURNAL_KEY = "example:video:journal"
#: The first part of the keys of the chains' records (and their groups').
PREFIX = "example:fanin"
RENDITIONS = ("1080p", "720p", "480p")

broker = RedisStreamBroker(REDIS_URL, queue_name="example:video").with_middlewares(
    FanInMiddleware(REDIS_URL, prefix=PREFIX)
)


async def journal(line: str) -> None:
    """Stand-in for the database the real pipeline writes to."""
    async with Redis.from_url(REDIS_URL) as redis:
        await redis.rpush(JOURNAL_KEY, line)


@broker.task
async def probe(video: str) -> str:
    """Read the upload's metadata and reserve storage for its renditions."""
    await journal(f"probe {video}: reserved storage quota")
    return video


@broker.task
async def release_quota(video: str) -> None:
    """Compensation of ``probe``: give the reserved storage back."""
    await journal(f"compensate {video}: released storage quota")


@broker.task
async def transcode(video: str, rendition: str, fail: str = "") -> str:
    """One rendition of what ``probe`` returned; ``fail`` names a rendition that
    fails for good."""
    await asyncio.sleep(0.2)
    if rendition == fail:
        raise RuntimeError(f"corrupt frame while transcoding {rendition}")
    await journal(f"transcode {video} {rendition}")
    return f"{video}/{rendition}.mp4"


@broker.task
async def thumbnail(renditions: GroupResult, video: str) -> str:
    """Runs once, after the three transcodes, with their results."""
    await journal(f"thumbnail {video} from {len(renditions.results)} renditions")
    return f"{video}/sprite.jpg"


@broker.task
async def notify(sprite: str, video: str) -> None:
    """Mark the video ready and tell the uploader."""
    await journal(f"notify {video}: ready ({sprite})")


@broker.task
async def mark_failed(failure: ChainFailure, video: str) -> None:
    """The chain's error continuation: runs once, with the failed step."""
    await journal(
        # failure.step counts from 0; people count steps from 1.
        f"failed {video} at step {failure.step + 1} ({failure.step_name}): "
        f"{failure.error.message}"
    )


def pipeline(video: str, upload: str, fail: str = "") -> Chain:
    """The workflow of one upload of ``video``.

    Its chain id names the upload: kicking the same upload twice starts it once.
    """
    return chain(
        Signature.of(probe, video).with_compensation(
            Signature.of(release_quota, video)
        ),
        # Each transcode receives probe's result (the video) first.
        group(
            [Signature.of(transcode, r, fail) for r in RENDITIONS],
            failure_policy="fail",
        ),
        Signature.of(thumbnail, video),
        Signature.of(notify, video),
        on_error=Signature.of(mark_failed, video),
        chain_id=f"video-{video}-{upload}",
    )
