"""The one warning the suite ignores is taskiq-redis's, never the library's.

``pyproject.toml`` turns every warning into an error but one: the
``ResourceWarning`` of a pipeline collected while holding a connection of a
broker's pool (taskiq-redis's stream broker leaves its autoclaim pipeline so
when its read is cancelled while redis-py loads the lock's script; taskiq's
Receiver cancels that read when a test's in-process worker stops). A pipeline
of the library's own client holding a connection must still fail the test that
left it: the filter is held to both here, with the messages redis-py writes.
"""

import re
import warnings

import pytest
from _pytest.config import parse_warning_filter
from redis.asyncio import Redis
from taskiq_redis import ListQueueBroker, RedisStreamBroker

from taskiq_fanin.transport.client import connect

URLS = ["redis://127.0.0.1:6390", "redis://127.0.0.1:6390/3"]


def ignored_resource_warnings(config: pytest.Config) -> list[re.Pattern[str]]:
    """The messages of the ``ignore`` filters for ``ResourceWarning`` in the ini."""
    patterns = []
    for line in config.getini("filterwarnings"):
        action, message, category, _, _ = parse_warning_filter(line, escape=False)
        if action == "ignore" and issubclass(ResourceWarning, category):
            patterns.append(re.compile(message, re.IGNORECASE))
    return patterns


def unclosed(client: object) -> str:
    """What redis-py's ``Redis.__del__`` warns for a pipeline of ``client``."""
    pipe = client.pipeline()  # type: ignore[attr-defined]
    return f"Unclosed client session {pipe!r}"


def ignored(config: pytest.Config, message: str) -> bool:
    return any(p.match(message) for p in ignored_resource_warnings(config))


@pytest.mark.parametrize("url", URLS)
def test_a_brokers_pipeline_left_holding_a_connection_is_ignored(
    pytestconfig: pytest.Config, url: str
) -> None:
    for broker in (RedisStreamBroker(url), ListQueueBroker(url)):
        client = Redis(connection_pool=broker.connection_pool)
        assert ignored(pytestconfig, unclosed(client)), unclosed(client)


@pytest.mark.parametrize("url", URLS)
def test_the_librarys_pipeline_left_holding_a_connection_fails_the_test(
    pytestconfig: pytest.Config, url: str
) -> None:
    client = connect(url, max_connections=4, socket_timeout=5.0)
    message = unclosed(client)
    assert not ignored(pytestconfig, message), message
    # And the suite's own filters, applied as pytest does (the last first),
    # make it an error.
    with warnings.catch_warnings():
        for line in pytestconfig.getini("filterwarnings"):
            action, pattern, category, module, lineno = parse_warning_filter(
                line, escape=False
            )
            warnings.filterwarnings(action, pattern, category, module, lineno)
        with pytest.raises(ResourceWarning):
            warnings.warn(message, ResourceWarning, stacklevel=1)
