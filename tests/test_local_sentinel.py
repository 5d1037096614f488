"""The toolkit's Sentinel setup (``local_redis.RedisSentinel``): one kill, one
failover, on a box too busy to answer at once.

What the failover tests judge the library by is one failover per kill: the
replica promoted stays the primary, and the other replicas follow it. A
sentinel starts its down clock for a promoted primary at the switch
(``sentinelResetMaster`` sets ``act_ping_time``), but reconnects to an instance
at most once a second (``sentinelReconnectInstance``), and its link had been
retrying the dead primary: its first PING to the promoted one may go out
nearly a second after the switch. With a ``down-after-milliseconds`` of a
second, a promoted primary that does not answer that PING at once (a loaded
box) is subjectively down; the other sentinels' answers about the dead
primary (``SRI_MASTER_DOWN``, kept five seconds) make it objectively down at
once, and the switch cleared the failover delay: a second failover promotes
another replica, and the first promoted is left a primary of its own, taking
the clients' writes with no replica, until a sentinel turns it into a replica
(10 s and more). Seen in ``test_sentinel_failover.py[replicated]`` on a loaded
box: every replicated write refused (0 of 1 acknowledged) the while.
"""

import time

import pytest

from local_redis import RedisSentinel, poll_until
from local_redis.sentinel_node import named_primary

pytestmark = pytest.mark.faults

#: How long the promoted primary stalls right after the switch: what a busy
#: box may do to it, under the toolkit's down-after and over Sentinel's
#: one-second reconnect period.
STALL = 1.5


def _first_named(sentinel: RedisSentinel, old_port: int) -> int:
    """The port the first sentinel to name a new primary names."""
    found: list[int] = []

    def named() -> bool:
        for node in sentinel.sentinel_nodes:
            port = named_primary(node.port, sentinel.master_name)
            if port is not None and port != old_port:
                found.append(port)
                return True
        return False

    assert poll_until(named, timeout=30.0), "no sentinel named a new primary"
    return found[0]


def test_a_promoted_primary_that_stalls_at_once_is_not_failed_over_again() -> None:
    with RedisSentinel(replicas=2) as sentinel:
        old = sentinel.primary
        old.kill()
        port = _first_named(sentinel, old.port)
        (promoted,) = [s for s in sentinel.servers if s.port == port]
        promoted.suspend()  # the fault: a stall, not a wait
        time.sleep(STALL)
        promoted.resume()
        assert poll_until(
            lambda: sentinel.primary_port() == port and sentinel.followed(port),
            timeout=30.0,
        ), f"the replica did not follow {port}, or it is not the primary"
        # Every election any sentinel started shows in its epoch: one.
        assert sentinel.epoch() == 1
        assert sentinel.wait_for_promotion(old.port).port == port
