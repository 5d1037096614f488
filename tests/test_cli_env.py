"""The command line's Redis URL and prefix from the environment, set once:
``TASKIQ_FANIN_REDIS_URL`` (then ``REDIS_URL``) and ``TASKIQ_FANIN_PREFIX``,
each overridden by its flag. Run as a user runs it, in a subprocess, against a
real redis-server, on a group planned by the library with no worker running.
"""

import pytest

from local_redis import free_port
from taskiq_fanin import Signature, group
from tests.cli_runner import run_cli
from tests.harness import stream_broker

#: A Redis nothing listens on: a command that used it would exit 4.
NOWHERE = f"redis://127.0.0.1:{free_port()}/0"


@pytest.fixture
async def planned(redis_url: str, key_prefix: str):
    """A group of two under the test's prefix, and the environment of nothing."""
    broker, _ = stream_broker(redis_url, key_prefix)

    @broker.task(task_name="cli_env.member")
    async def member(number: int) -> int:
        return number

    await broker.startup()
    try:
        members = [Signature.of(member, n) for n in range(2)]
        yield (await group(members).kiq(broker)).group_id
    finally:
        await broker.shutdown()


def unset(**env: str) -> dict[str, str | None]:
    """The CLI's variables unset, but for ``env``."""
    names = ("TASKIQ_FANIN_REDIS_URL", "REDIS_URL", "TASKIQ_FANIN_PREFIX")
    return dict.fromkeys(names) | env


async def test_the_url_and_prefix_come_from_taskiq_fanin_variables_before_redis_url(
    planned: str, redis_url: str, key_prefix: str
) -> None:
    env = unset(
        TASKIQ_FANIN_REDIS_URL=redis_url,
        REDIS_URL=NOWHERE,
        TASKIQ_FANIN_PREFIX=key_prefix,
    )

    run = await run_cli("status", planned, "--json", env=env)

    assert run.code == 0, run.stderr
    assert (run.json()["group_id"], run.json()["total"]) == (planned, 2)


async def test_redis_url_is_used_when_taskiq_fanin_redis_url_is_unset_or_empty(
    planned: str, redis_url: str, key_prefix: str
) -> None:
    env = unset(
        TASKIQ_FANIN_REDIS_URL="", REDIS_URL=redis_url, TASKIQ_FANIN_PREFIX=key_prefix
    )

    run = await run_cli("status", planned, "--json", env=env)

    assert run.code == 0, run.stderr
    assert run.json()["group_id"] == planned


async def test_flags_win_over_the_variables(
    planned: str, redis_url: str, key_prefix: str
) -> None:
    env = unset(TASKIQ_FANIN_REDIS_URL=NOWHERE, TASKIQ_FANIN_PREFIX="not-this-one")

    flags = ("--redis-url", redis_url, "--prefix", key_prefix)
    run = await run_cli("status", planned, "--json", *flags, env=env)
    # The URL from its flag, the prefix from the variable: not found there.
    elsewhere = await run_cli("status", planned, "--redis-url", redis_url, env=env)

    assert run.code == 0, run.stderr
    assert run.json()["group_id"] == planned
    assert elsewhere.code == 1
    assert 'under prefix "not-this-one"' in elsewhere.stderr


async def test_without_url_flag_or_variable_the_error_names_both_variables() -> None:
    run = await run_cli("list", env=unset())

    assert run.code == 2
    assert "TASKIQ_FANIN_REDIS_URL or REDIS_URL" in run.stderr


async def test_help_names_the_variables() -> None:
    run = await run_cli("--help")

    assert run.code == 0
    for name in ("TASKIQ_FANIN_REDIS_URL", "REDIS_URL", "TASKIQ_FANIN_PREFIX"):
        assert f"${name}" in run.stdout
