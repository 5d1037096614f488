"""What a throwaway server needs of the machine.

A free loopback port, the ``redis-server`` binary on PATH, and whether a
server answers PING yet.
"""

from __future__ import annotations

import shutil
import socket
from typing import Any

import redis
from redis.exceptions import RedisError

#: Only ever listen on, and connect to, the loopback interface.
LOOPBACK = "127.0.0.1"

POLL_INTERVAL = 0.02
INSTALL_HINT = (
    "Install it (Debian/Ubuntu: `apt-get install redis-server`, which also brings "
    "redis-cli; macOS: `brew install redis`), or set REDIS_URL to a Redis server "
    "the tests may use."
)


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now.

    The port is only free at the moment of the call: callers retry when another
    process takes it before they bind it.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def find_executable(name: str) -> str:
    """The path of ``name`` on PATH, or an error that says how to install it."""
    path = shutil.which(name)
    if path is None:
        msg = f"{name} was not found on PATH. {INSTALL_HINT}"
        raise RuntimeError(msg)
    return path


def answers(port: int, **options: Any) -> bool:
    """Whether a server on ``127.0.0.1:port`` answers PING (not while loading).

    ``options``: more of ``redis.Redis``'s (TLS, a user), for a locked-down server.
    """
    client = redis.Redis(
        host=LOOPBACK,
        port=port,
        socket_timeout=1.0,
        socket_connect_timeout=1.0,
        **options,
    )
    try:
        return bool(client.ping())
    except RedisError:
        return False
    finally:
        client.close()
