"""A locked-down Redis: TLS only, and the README's ACL rule, nothing more.

A real ``redis-server`` of the test's own listens with TLS alone (a CA and a
certificate for 127.0.0.1 made by the test with ``openssl``), its default user
off; the user the README's ``ACL SETUSER`` line makes (pasted as it stands) is
the only one the library, the broker and the workers use, over ``rediss://``.
A real ``taskiq worker`` runs a group, chains (one failing, with its
``on_error`` and compensation) and a group the sweep gives up on. Any command
or key outside the rule is refused and logged: ``ACL LOG`` must stay empty.

And without a server: every command the library's sources send (its Lua
scripts' ``redis.call`` s, which ACL checks one by one, and its Python calls)
is one the rule allows.
"""

import ast
import importlib
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.asyncio import Redis

import taskiq_fanin
from local_redis import RedisServer, stream_drained
from local_redis.secure import SecureRedisServer, TlsUnavailableError
from taskiq_fanin import Signature, chain, group, sweep
from tests.harness import eventually, worker_process

ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "s3cret-for-the-test"


def acl_rule() -> list[str]:
    """The README's ``ACL SETUSER`` line, as words (its password replaced)."""
    readme = (ROOT / "README.md").read_text()
    found = re.search(r"^ACL SETUSER fanin .*$", readme, flags=re.MULTILINE)
    assert found, "README.md has no ACL SETUSER fanin line"
    words = shlex.split(found.group(0))
    return [f">{PASSWORD}" if w.startswith(">") else w for w in words]


def allowed_commands() -> set[str]:
    """The commands the rule adds (``+name``, ``+name|sub``), upper-cased."""
    return {w[1:].upper() for w in acl_rule() if w.startswith("+")}


# -- every command the sources send is in the rule --------------------------------

#: redis-py client methods that send no command of their own name.
_NOT_COMMANDS = {"execute", "pipeline", "register_script", "aclose", "initialize"}


def _lua_commands() -> Iterator[str]:
    lua = Path(taskiq_fanin.__file__).parent / "storage" / "lua"
    for script in lua.glob("*.lua"):
        text = script.read_text()
        assert "redis.pcall" not in text, script.name
        # Every call names its command as a literal: a computed one would hide.
        calls = re.findall(r"redis\.call\(\s*([^,)]*)", text)
        for name in calls:
            assert re.fullmatch(r"'[A-Za-z]+'", name), f"{script.name}: {name}"
            yield name.strip("'").upper()


def _python_commands() -> Iterator[str]:
    """Calls of redis-py commands on a client or pipeline in the package."""
    commands = {n for n in dir(redis.asyncio.Redis) if not n.startswith("_")}
    package = Path(taskiq_fanin.__file__).parent
    for module in package.rglob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            if not (
                isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            ):
                continue
            receiver = ast.unparse(node.func.value)
            if not re.search(r"(pipe|redis|client)$", receiver):
                continue
            name = node.func.attr
            if name == "execute_command":
                first = node.args[0]
                # A command built elsewhere (a script call's EVALSHA tuple) is
                # seen where it is built with its literal.
                if isinstance(first, ast.Constant):
                    yield str(first.value).upper()
            elif name in commands and name not in _NOT_COMMANDS:
                yield name.upper().replace("_", "|")


def test_every_command_the_library_sends_is_in_the_readme_rule() -> None:
    lua, python = set(_lua_commands()), set(_python_commands())
    assert {"HSET", "TIME", "SMISMEMBER"} <= lua  # the scan sees them
    assert {"EVALSHA", "XADD", "ZRANGE"} <= python
    # LPUSH: the library's kicks on a list broker (ListQueueBroker), not a stream's.
    sent = (lua | python) - {"LPUSH"}
    assert sent - allowed_commands() == set()


# -- a real run through TLS and the ACL user --------------------------------------


@pytest.mark.redis_server
@pytest.mark.workers
async def test_groups_chains_and_the_sweep_run_over_tls_as_the_readme_acl_user(
    tmp_path, monkeypatch
):
    try:
        server = SecureRedisServer().start()
    except TlsUnavailableError as exc:
        pytest.skip(str(exc))
    try:
        with RedisServer() as observer:
            await _run(server, observer, tmp_path, monkeypatch)
    finally:
        server.stop()


async def _run(server, observer, tmp_path, monkeypatch) -> None:
    admin = Redis.from_url(server.admin_url)
    obs = Redis.from_url(observer.url, decode_responses=True)
    version = (await admin.info("server"))["redis_version"]
    rule = acl_rule()
    if tuple(int(part) for part in version.split(".")[:2]) < (7, 2):
        rule.remove("+client|setinfo")  # as the README says: not before 7.2
    await admin.execute_command(*rule)
    await admin.execute_command("ACL", "LOG", "RESET")
    env = {"REDIS_URL": server.url_for("fanin", PASSWORD), "OBS_URL": observer.url}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    app = importlib.reload(importlib.import_module("tests.locked_app"))
    await app.broker.startup()
    try:
        with worker_process(
            "tests.locked_app:broker", env, max_async_tasks=10, log=tmp_path / "w.log"
        ):
            try:
                await _workflows(app, obs, admin)
            except AssertionError as exc:  # a refused command stalls a worker
                denied = await admin.execute_command("ACL", "LOG")
                raise AssertionError(f"{exc}; ACL LOG: {denied}") from exc
            await sweep(app.broker)
        denied = await admin.execute_command("ACL", "LOG")
        users = await admin.execute_command("ACL", "LIST")
    finally:
        await app.broker.shutdown()
        await admin.aclose()
        await obs.aclose()
    print(f"\n[locked-down] ACL user: {[u for u in users if b' fanin ' in u]}")
    assert denied == []


async def _workflows(app, obs: Redis, admin: Redis) -> None:
    await _kick(app)
    await eventually(lambda: _listed(obs, "continuations", "g 5 0"), what="the group")
    await eventually(lambda: _listed(obs, "chains", "c 6"), what="the chain")
    await eventually(lambda: _listed(obs, "on_error", "f 1"), what="the failing chain")
    await eventually(
        lambda: _listed(obs, "compensations", "f"), what="its compensation"
    )

    async def given_up() -> bool:
        await sweep(app.broker)
        return await _listed(obs, "continuations", "held 1 1")

    await eventually(given_up, what="the sweep to give the held group up")
    await obs.set("go", 1)  # member 99 ends now: its outcome is refused
    await eventually(
        lambda: stream_drained(admin, "taskiq"), what="the stream to drain"
    )


async def _kick(app) -> None:
    await group(
        [Signature.of(app.member, i) for i in range(5)], then=app.publish, group_id="g"
    ).kiq(app.broker)
    await chain(
        Signature.of(app.step, 1, 2),
        Signature.of(app.step, 3),
        Signature.of(app.last, "c"),
        chain_id="c",
    ).kiq(app.broker)
    await chain(
        Signature.of(app.step, 1, 2).with_compensation(Signature.of(app.undo, "f")),
        Signature.of(app.fail),
        on_error=app.on_error,
        chain_id="f",
    ).kiq(app.broker)
    await group(
        [Signature.of(app.member, 0), Signature.of(app.member, 99)],
        then=app.publish,
        group_id="held",
        deadline=0.5,
        sweep_policy="give_up",
    ).kiq(app.broker)


async def _listed(obs: Redis, key: str, item: str) -> bool:
    return item in await obs.lrange(key, 0, -1)
