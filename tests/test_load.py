"""Load with faults: many groups, members sent twice, a worker SIGKILLed midway.

Two real ``taskiq worker`` processes of ``tests.fault_app`` on a RedisStreamBroker
(unacknowledged messages come back after a 2 s idle timeout) and a redis-server
of the test's own. Counts come from the observation server and are asserted
once the stream is drained: every message ever sent was delivered and
acknowledged, so a duplicate continuation would have run by then.
"""

import asyncio
import json
import os
import signal
import time
import zlib
from collections import Counter

import pytest
from taskiq import TaskiqMessage

from taskiq_fanin import Signature, group
from taskiq_fanin.domain.labels import MEMBER_LABEL
from taskiq_fanin.inspection import group_status
from tests.fault_harness import Rig, alive, children_of, fault_rig, nudging, summary
from tests.fault_harness import the_child as worker_child
from tests.harness import DuplicatingMiddleware, eventually

#: Beyond the suite's 120 s per test: on a loaded machine the load can take
#: longer than it does alone (about 20 s).
pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]

GROUPS, MEMBERS = 50, 200
#: Members sent twice: this percentage of them, chosen by their task id.
DUPLICATE_PERCENT = 5
SEED = 20261201
SLOTS = 100
#: Generous on a loaded 2-core machine; a quiet run takes a fraction of it.
RECOVERY = 150.0


def sent_twice(message: TaskiqMessage) -> bool:
    """A seeded choice of members: the same ones in every run."""
    if MEMBER_LABEL not in message.labels:
        return False
    digest = zlib.crc32(f"{SEED}:{message.task_id}".encode())
    return digest % 100 < DUPLICATE_PERCENT


async def delivered_at_least(rig: Rig, least: int) -> bool:
    return await rig.delivered(rig.app.member.task_name) >= least


async def all_continued_and_drained(rig: Rig) -> bool:
    return await rig.count("continuations") >= GROUPS and await rig.drained()


async def test_fifty_groups_of_200_with_duplicates_and_a_killed_worker_continue_once(
    tmp_path, monkeypatch
):
    # Members that take a moment: the killed worker holds a slot-full of them.
    async with fault_rig(tmp_path, monkeypatch, MEMBER_SECONDS="0.2") as rig:
        app = rig.app
        duplicating = DuplicatingMiddleware(sent_twice)
        app.broker.add_middlewares(duplicating)
        group_ids = [f"load{g}" for g in range(GROUPS)]
        started = time.monotonic()
        with (
            rig.worker("a", max_async_tasks=SLOTS),
            rig.worker("b", max_async_tasks=SLOTS) as b,
        ):
            await asyncio.gather(
                *(
                    group(
                        [Signature.of(app.member, gid, i) for i in range(MEMBERS)],
                        then=app.publish,
                        group_id=gid,
                    ).kiq(app.broker)
                    for gid in group_ids
                )
            )
            planned = time.monotonic()
            await eventually(
                lambda: delivered_at_least(rig, GROUPS * MEMBERS // 2),
                timeout=RECOVERY,
                what="half the members to be delivered",
            )
            victim = worker_child(b)
            os.kill(victim, signal.SIGKILL)
            killed_at = await rig.delivered(app.member.task_name)
            async with nudging(rig) as nudges:
                await eventually(
                    lambda: all_continued_and_drained(rig),
                    timeout=RECOVERY,
                    what="every continuation and the stream to drain",
                )
            finished = time.monotonic()
            restarted = bool(set(children_of(b.pid)) - {victim})
            ran = [json.loads(item) for item in await rig.listed("continuations")]
            states = Counter(
                [(await group_status(app.broker, gid)).state.value for gid in group_ids]
            )
            delivered = await rig.counted("delivered")
            added = await rig.added()
            untimed = await rig.keys_without_ttl()

    per_group = Counter(run["group_id"] for run in ran)
    member_deliveries = delivered.get(app.member.task_name, 0)
    sent_members = GROUPS * MEMBERS + len(duplicating.duplicated)
    outcomes_lost = sum(
        MEMBERS - run["succeeded"] + run["failed"] + run["lost"] for run in ran
    ) + MEMBERS * (GROUPS - len(per_group))
    summary(
        "load: 50 groups x 200 members",
        workers=2,
        slots_each=SLOTS,
        faults="1 worker SIGKILLed",
        killed_after_member_deliveries=killed_at,
        worker_restarted=restarted,
        members=GROUPS * MEMBERS,
        duplicates_injected=len(duplicating.duplicated),
        messages_added_to_stream=added,
        messages_delivered=sum(delivered.values()),
        member_deliveries=member_deliveries,
        redelivered_by_broker=member_deliveries - sent_members,
        nudges=nudges.sent,
        continuations_run=len(ran),
        groups_completed=states["completed"],
        outcomes_lost=outcomes_lost,
        keys_without_ttl=sorted(untimed),
        plan_seconds=round(planned - started, 1),
        seconds=round(finished - started, 1),
    )
    assert not alive(victim)
    assert len(duplicating.duplicated) > 0
    assert member_deliveries >= sent_members  # every message was delivered
    assert per_group == dict.fromkeys(group_ids, 1)  # each continuation ran once
    assert all(
        (run["succeeded"], run["failed"], run["lost"], run["results_in_order"])
        == (MEMBERS, 0, 0, True)
        for run in ran
    )
    assert states == {"completed": GROUPS}
    assert outcomes_lost == 0
    # Only the documented indexes, and the broker's own stream (with its
    # consumer group), live without a TTL.
    prefix = rig.prefix
    assert untimed <= {f"{prefix}:index", f"{prefix}:chains", f"{prefix}:stream"}
