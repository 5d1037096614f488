"""One sentinel of a :class:`~local_redis.RedisSentinel`, and what it says.

A sentinel is a ``redis-server --sentinel`` with a config file of its own,
which it rewrites as it learns (the replicas, the other sentinels, the epoch).
The helpers ask a server a question and answer nothing (``None``, ``{}``) when
it does not answer: the caller polls them with a deadline.
"""

from __future__ import annotations

import re

import redis
from redis.exceptions import RedisError

from local_redis.host import LOOPBACK
from local_redis.server import RedisServer

#: Sentinels that must agree the primary is down: a majority of three.
QUORUM = 2

_EPOCH = re.compile(r"^sentinel current-epoch (\d+)$", re.MULTILINE)


def client(port: int) -> redis.Redis:
    """A short-timeout client of the server on ``port``."""
    return redis.Redis(
        host=LOOPBACK,
        port=port,
        socket_timeout=1.0,
        socket_connect_timeout=1.0,
        decode_responses=True,
    )


def named_primary(sentinel_port: int, master_name: str) -> int | None:
    """The primary's port as the sentinel on ``sentinel_port`` names it, if it does."""
    asked = client(sentinel_port)
    try:
        found: object = asked.sentinel_get_master_addr_by_name(master_name)
    except RedisError:
        return None
    finally:
        asked.close()
    if isinstance(found, list | tuple) and len(found) == 2:
        return int(found[1])
    return None


def info(port: int, section: str) -> dict[str, object]:
    """``INFO section`` of the server on ``port``, empty when it does not answer."""
    asked = client(port)
    try:
        found: dict[str, object] = asked.info(section)
    except RedisError:
        return {}
    finally:
        asked.close()
    return found


def master_view(sentinel_port: int, master_name: str) -> dict[str, object]:
    """``SENTINEL MASTER name`` of the sentinel on ``sentinel_port``, or ``{}``."""
    asked = client(sentinel_port)
    try:
        found: object = asked.sentinel_master(master_name)
    except RedisError:
        return {}
    finally:
        asked.close()
    return found if isinstance(found, dict) else {}


class SentinelNode(RedisServer):
    """``redis-server --sentinel`` watching one primary, with its own config file."""

    def __init__(
        self,
        *,
        master_name: str,
        primary_port: int,
        down_after_ms: int,
        failover_timeout_ms: int,
        startup_timeout: float,
        stop_grace: float,
    ) -> None:
        super().__init__(startup_timeout=startup_timeout, stop_grace=stop_grace)
        self._watch = (master_name, primary_port, down_after_ms, failover_timeout_ms)

    def epoch(self) -> int:
        """The sentinel's current epoch, as it saved it.

        One more per election any sentinel started (a failover tried), won or not.
        """
        try:
            saved = (self.directory / "sentinel.conf").read_text()
        except OSError:
            return 0
        found = _EPOCH.search(saved)
        return int(found[1]) if found else 0

    def _server_args(self, port: int) -> list[str]:
        name, primary, down_after, failover = self._watch
        config = self.directory / "sentinel.conf"
        if not config.exists():  # a restart keeps what the sentinel learnt
            config.write_text(
                f"sentinel monitor {name} {LOOPBACK} {primary} {QUORUM}\n"
                f"sentinel down-after-milliseconds {name} {down_after}\n"
                f"sentinel failover-timeout {name} {failover}\n"
                f"sentinel parallel-syncs {name} 1\n"
            )
        return [
            str(config), "--sentinel",
            "--port", str(port),
            "--bind", LOOPBACK,
            "--dir", str(self.directory),
            "--daemonize", "no",
        ]  # fmt: skip
