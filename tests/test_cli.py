"""The ``taskiq-fanin`` command, run as a user runs it: in a subprocess, against a
real redis-server, on groups planned by the library with no worker running.
"""

import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest
from redis.asyncio import Redis
from taskiq import AsyncBroker, TaskiqResult

from local_redis import free_port
from taskiq_fanin import FanInMiddleware, Signature, chain, group, group_handle
from taskiq_fanin.cli.parser import EXIT_MEANINGS, ExitCode
from taskiq_fanin.domain.ids import LONGEST_ID, step_id
from taskiq_fanin.errors import InvalidGroupIdError
from taskiq_fanin.inspection import chain_status, group_status
from taskiq_fanin.storage.keys import ChainKeys, GroupKeys, index_key, sweep_lock_key
from tests.cli_runner import run_cli
from tests.harness import ROOT, SentMessages, eventually, stream_broker

#: The member task, under the name tests/cli_app.py gives it.
RESIZE = "cli_app.resize"
#: Two more steps for chains, known only to the test's own broker (no worker runs).
PROBE, PUBLISH = "cli_app.probe", "cli_app.publish"
#: A chain's error continuation, known the same way.
NOTIFY = "cli_app.notify"


@dataclass
class App:
    broker: AsyncBroker
    fanin: FanInMiddleware
    sent: SentMessages
    redis: Redis
    url: str
    prefix: str

    @property
    def options(self) -> tuple[str, ...]:
        return ("--redis-url", self.url, "--prefix", self.prefix)

    async def plan(self, size: int = 3, **options: Any) -> str:
        members = [Signature.of(RESIZE, image) for image in range(size)]
        handle = await group(members, **options).kiq(self.broker)
        return handle.group_id

    async def finish(
        self, group_id: str, index: int, error: Exception | None = None
    ) -> None:
        """End member (or chain step) ``index`` as a worker's middleware would:
        done, or failed for good with ``error``.
        """
        (message,) = (m for m in self.sent.sent if m.task_id == f"{group_id}~{index}")
        result = TaskiqResult(
            is_err=error is not None,
            return_value=None if error else "ok",
            execution_time=0.0,
            error=error,
        )
        await self.fanin.post_execute(message, result)

    async def chain(
        self,
        chain_id: str,
        *,
        done: int = 0,
        on_error: Signature | None = None,
        version: str | None = None,
    ) -> str:
        """A chain probe -> resize -> publish whose first ``done`` steps ended."""
        steps = [
            Signature.of(PROBE).immutable(),
            Signature.of(RESIZE, 0).immutable(),
            Signature.of(PUBLISH).immutable(),
        ]
        handle = await chain(
            *steps, on_error=on_error, chain_id=chain_id, version=version
        ).kiq(self.broker)
        for index in range(done):
            await self.finish(handle.chain_id, index)
        return handle.chain_id

    async def stuck(self, size: int = 3, done: tuple[int, ...] = ()) -> str:
        """A group past its deadline, with members ``done`` finished."""
        group_id = await self.plan(size, deadline=0.3)
        for index in done:
            await self.finish(group_id, index)

        async def overdue() -> bool:
            return (await group_status(self.fanin, group_id)).overdue()

        await eventually(overdue, timeout=5, what=f"group {group_id} overdue")
        return group_id


@pytest.fixture
async def app(redis_url, key_prefix, redis_client):
    sent = SentMessages()
    broker, fanin = stream_broker(redis_url, key_prefix, sent)

    @broker.task(task_name=RESIZE)
    async def resize(image: int) -> str:
        return f"{image}.jpg"

    @broker.task(task_name=PROBE)
    async def probe() -> None: ...

    @broker.task(task_name=PUBLISH)
    async def publish() -> None: ...

    @broker.task(task_name=NOTIFY)
    async def notify(failure: Any) -> None: ...

    await broker.startup()
    try:
        yield App(broker, fanin, sent, redis_client, redis_url, key_prefix)
    finally:
        await broker.shutdown()


async def test_status_of_a_windowed_group_says_how_many_are_in_flight_and_wait(
    app,
) -> None:
    group_id = await app.plan(6, max_in_flight=2)
    await app.finish(group_id, 0)  # kicks member 2, released

    as_json = await run_cli("status", group_id, "--json", *app.options)
    table = await run_cli("status", group_id, *app.options)

    assert as_json.code == 0, as_json.stderr
    status = as_json.json()
    assert (status["max_in_flight"], status["in_flight"], status["waiting"]) == (
        2,
        2,
        3,
    )
    assert sorted(m.task_id for m in app.sent.sent) == [
        f"{group_id}~{i}" for i in range(3)
    ]
    assert re.search(r"in flight\s+2\b", table.stdout)
    assert re.search(r"waiting\s+3\b", table.stdout)


async def test_status_of_an_open_group_reports_its_counts(app) -> None:
    group_id = await app.plan(4)
    await app.finish(group_id, 2)

    run = await run_cli("status", group_id, "--json", *app.options)

    assert run.code == 0, run.stderr
    status = run.json()
    assert (status["kind"], status["group_id"]) == ("group", group_id)
    assert status["state"] == "open"
    assert (status["total"], status["done"], status["failed"]) == (4, 1, 0)
    assert (status["pending"], status["planned"], status["redrives"]) == (3, True, 0)
    assert status["overdue"] is False
    assert status["sweep_policy"] == "report"
    assert 0 <= status["age_seconds"] < 30


async def test_status_of_an_unknown_id_says_so_in_one_line_and_exits_1(app) -> None:
    table = await run_cli("status", "no-such-id", *app.options)
    as_json = await run_cli("status", "no-such-id", "--json", *app.options)

    expected = (
        f'taskiq-fanin: no group or chain "no-such-id" under prefix "{app.prefix}"\n'
    )
    assert (table.code, table.stdout, table.stderr) == (1, "", expected)
    # With --json, stdout is still one JSON document: null.
    assert (as_json.code, as_json.json(), as_json.stderr) == (1, None, expected)


async def test_status_of_a_running_chain_marks_the_step_it_is_at(app) -> None:
    chain_id = await app.chain("video-1", done=1)

    table = await run_cli("status", chain_id, *app.options)
    as_json = await run_cli("status", chain_id, "--json", *app.options)

    assert table.code == 0, table.stderr
    assert f"Chain {chain_id}" in table.stdout
    assert _row(table.stdout, "state") == "running"
    assert _row(table.stdout, "step") == f"2 of 3 ({RESIZE})"
    assert _row(table.stdout, "failed step") == "-"
    assert _row(table.stdout, "error") == "-"
    assert _row(table.stdout, "1") == f"{PROBE} done"
    assert _row(table.stdout, ">") == f"2 {RESIZE} current"
    assert _row(table.stdout, "3") == f"{PUBLISH} waiting"
    assert table.stderr == ""
    assert as_json.code == 0, as_json.stderr
    status = as_json.json()
    assert (status["kind"], status["chain_id"], status["state"]) == (
        "chain",
        chain_id,
        "running",
    )
    # JSON counts steps from 0, as chain_status() does in Python.
    assert (status["step"], status["steps"], status["current"]) == (1, 3, RESIZE)
    assert status["step_names"] == [PROBE, RESIZE, PUBLISH]
    assert status["started"] is not None
    assert status["updated"] >= status["started"]
    assert (status["failed_step"], status["error"]) == (None, None)


async def test_status_of_a_failed_chain_names_the_failed_step_and_its_error(
    app,
) -> None:
    chain_id = await app.chain("video-2", done=1)
    await app.finish(chain_id, 1, error=RuntimeError("corrupt frame at 00:42"))
    assert (await chain_status(app.fanin, chain_id)).state.value == "failed"

    table = await run_cli("status", chain_id, *app.options)
    as_json = await run_cli("status", chain_id, "--json", *app.options)

    assert table.code == as_json.code == 0, table.stderr + as_json.stderr
    assert _row(table.stdout, "state") == "failed"
    assert _row(table.stdout, "failed step") == f"2 of 3 ({RESIZE})"
    assert _row(table.stdout, "error") == "RuntimeError: corrupt frame at 00:42"
    assert _row(table.stdout, "2") == f"{RESIZE} failed"
    assert _row(table.stdout, "3") == f"{PUBLISH} not run"
    assert ">" not in table.stdout.split()  # nothing is current any more
    status = as_json.json()
    assert (status["state"], status["failed_step"], status["current"]) == (
        "failed",
        1,
        None,
    )
    assert "corrupt frame at 00:42" in status["error"]["message"]


async def test_status_of_a_failed_chain_says_what_became_of_its_on_error(
    app,
) -> None:
    """Kicked and not begun, begun, run to its end: its worker's hooks are
    played by hand on its message; a chain without one shows no such row."""
    chain_id = await app.chain("video-5", done=1, on_error=Signature.of(NOTIFY))
    await app.finish(chain_id, 1, error=RuntimeError("corrupt frame at 00:42"))
    bare = await app.chain("video-6", done=1)
    await app.finish(bare, 1, error=RuntimeError("corrupt frame at 00:42"))
    (kicked,) = (m for m in app.sent.sent if m.task_name == NOTIFY)
    seen: list[tuple[str, str]] = []

    async def note() -> None:
        table = await run_cli("status", chain_id, *app.options)
        as_json = await run_cli("status", chain_id, "--json", *app.options)
        assert table.code == as_json.code == 0, table.stderr + as_json.stderr
        seen.append((_row(table.stdout, "on error"), as_json.json()["on_error_state"]))

    await note()
    await app.fanin.pre_execute(kicked)  # a copy begins: its run guard lets it
    await note()
    done = TaskiqResult(is_err=False, return_value=None, execution_time=0.0)
    await app.fanin.post_execute(kicked, done)
    await note()
    without = await run_cli("status", bare, *app.options)
    without_json = await run_cli("status", bare, "--json", *app.options)

    assert seen == [
        ("pending", "pending"),
        ("running", "running"),
        ("completed", "completed"),
    ]
    assert _row(without.stdout, "state") == "failed"
    assert "on error" not in without.stdout
    assert without_json.json()["on_error_state"] == "none"


async def test_status_of_a_finished_chain_shows_every_step_done(app) -> None:
    chain_id = await app.chain("video-3", done=3)

    run = await run_cli("status", chain_id, *app.options)

    assert run.code == 0, run.stderr
    assert _row(run.stdout, "state") == "done"
    assert _row(run.stdout, "step") == "all 3 done"
    for number, name in enumerate((PROBE, RESIZE, PUBLISH), start=1):
        assert _row(run.stdout, str(number)) == f"{name} done"


async def test_status_of_a_finished_group_or_chain_shows_when_it_finished(
    app,
) -> None:
    group_id = await app.plan(2)  # no continuation: complete once both end
    for index in range(2):
        await app.finish(group_id, index)
    chain_id = await app.chain("video-4", done=3)
    group_found = await group_status(app.fanin, group_id)
    chain_found = await chain_status(app.fanin, chain_id)
    assert group_found.finished is not None
    assert chain_found.finished is not None

    for workflow_id, finished in (
        (group_id, group_found.finished),
        (chain_id, chain_found.finished),
    ):
        table = await run_cli("status", workflow_id, *app.options)
        as_json = await run_cli("status", workflow_id, "--json", *app.options)
        assert table.code == as_json.code == 0, table.stderr + as_json.stderr
        assert _row(table.stdout, "finished") == f"{finished:%Y-%m-%d %H:%M:%S} UTC"
        document = as_json.json()
        assert _iso(document["finished"]) == finished
        started = document.get("created") or document["started"]
        age = (finished - _iso(started)).total_seconds()
        assert document["age_seconds"] == age


async def test_status_shows_the_group_when_a_chain_has_the_same_id(app) -> None:
    # A group and a chain can no longer share an id; one written before that
    # rule is made here by moving a chain's record under the group's id.
    await app.chain("other")
    await group([Signature.of(RESIZE, 0)], group_id="twin").kiq(app.broker)
    await app.redis.rename(
        ChainKeys(app.prefix, "other").record, ChainKeys(app.prefix, "twin").record
    )

    run = await run_cli("status", "twin", "--json", *app.options)

    assert run.code == 0, run.stderr
    assert (run.json()["kind"], run.json()["group_id"]) == ("group", "twin")


async def test_list_shows_every_open_group_and_stuck_only_the_overdue_one(
    app,
) -> None:
    on_time = await app.plan(2)
    late = await app.stuck(3, done=(0,))

    # The Redis URL from $REDIS_URL this time.
    listed = await run_cli(
        "list", "--json", "--prefix", app.prefix, env={"REDIS_URL": app.url}
    )
    stuck = await run_cli("list", "--stuck", "--json", *app.options)

    assert listed.code == stuck.code == 0
    by_id = {group["group_id"]: group for group in listed.json()}
    assert set(by_id) == {on_time, late}
    assert (by_id[late]["overdue"], by_id[on_time]["overdue"]) == (True, False)
    assert (by_id[late]["done"], by_id[late]["pending"]) == (1, 2)
    assert [group["group_id"] for group in stuck.json()] == [late]


async def test_list_chains_counts_the_running_chains_by_version(app) -> None:
    """Chains started by two versions of the code, and one by none: an
    operator sees when no chain runs version 2 any more."""
    await app.chain("v2-a", version="2")
    await app.chain("v3-a", version="3", done=1)
    await app.chain("v3-b", version="3")
    await app.chain("none")
    group_id = await app.plan(2, version="7")

    listed = await run_cli("list", "--chains", *app.options)
    documents = await run_cli("list", "--chains", "--json", *app.options)
    shown = await run_cli("status", "v3-a", "--json", *app.options)
    group_shown = await run_cli("status", group_id, "--json", *app.options)

    assert listed.code == documents.code == 0, listed.stderr
    assert "By version" in listed.stdout
    counted = {
        line.split()[0]: line.split()[1]
        for line in listed.stdout.split("By version", 1)[1].splitlines()
        if line.strip() and line.split()[0] in ("2", "3", "-")
    }
    assert counted == {"2": "1", "3": "2", "-": "1"}
    assert group_id not in listed.stdout  # chains only
    by_id = {chain["chain_id"]: chain["version"] for chain in documents.json()}
    assert by_id == {"v2-a": "2", "v3-a": "3", "v3-b": "3", "none": None}
    assert shown.json()["version"] == "3"
    assert group_shown.json()["version"] == "7"


async def test_a_dry_run_sweep_reports_the_missing_members_and_writes_nothing(
    app,
) -> None:
    group_id = await app.stuck(3, done=(1,))
    keys = GroupKeys(app.prefix, group_id)
    meta_before = await app.redis.hgetall(keys.meta)
    score_before = await app.redis.zscore(index_key(app.prefix), group_id)

    run = await run_cli("sweep", "--json", *app.options)

    assert run.code == 0, run.stderr
    report = run.json()
    assert (report["dry_run"], report["skipped"], report["examined"]) == (
        True,
        False,
        1,
    )
    (finding,) = report["findings"]
    assert finding["group_id"] == group_id
    assert (finding["kind"], finding["action"]) == ("stuck", "report")
    assert finding["applied"] is False
    assert finding["missing"] == [0, 2]
    assert (finding["done"], finding["total"]) == (1, 3)
    assert await app.redis.hgetall(keys.meta) == meta_before
    assert await app.redis.zscore(index_key(app.prefix), group_id) == score_before
    assert not await app.redis.exists(sweep_lock_key(app.prefix))


async def test_sweep_redrive_through_the_broker_kicks_exactly_the_missing_members(
    app,
) -> None:
    group_id = await app.stuck(4, done=(0, 2))
    stream = f"{app.prefix}:stream"
    kicked_before = await app.redis.xlen(stream)
    deadline_before = (await group_status(app.fanin, group_id)).deadline

    # The installed script: it must find tests.cli_app from the current directory.
    run = await run_cli(
        "sweep",
        "--redrive",
        "--broker",
        "tests.cli_app:broker",
        "--json",
        via="script",
        env={"REDIS_URL": app.url, "FANIN_PREFIX": app.prefix, "FANIN_QUEUE": stream},
    )

    assert run.code == 0, run.stderr
    (finding,) = run.json()["findings"]
    assert (finding["action"], finding["applied"]) == ("redrive", True)
    assert finding["missing"] == [1, 3]
    entries = await app.redis.xrange(stream)
    assert len(entries) == kicked_before + 2
    rekicked = [json.loads(fields[b"data"]) for _, fields in entries[kicked_before:]]
    assert sorted(m["task_id"] for m in rekicked) == [f"{group_id}~1", f"{group_id}~3"]
    assert {m["task_name"] for m in rekicked} == {RESIZE}
    status = await group_status(app.fanin, group_id)
    assert status.redrives == 1
    assert status.deadline > deadline_before  # a new deadline for the re-kicked


async def test_fail_on_stuck_exits_3_when_a_group_is_stuck_and_0_otherwise(
    app,
) -> None:
    await app.plan(2)
    calm = await run_cli("sweep", "--fail-on-stuck", *app.options)
    await app.stuck(2)
    alarmed = await run_cli("sweep", "--fail-on-stuck", *app.options)

    assert calm.code == 0, calm.stderr
    assert alarmed.code == 3, alarmed.stderr
    assert "1 stuck" in alarmed.stdout


async def test_an_acting_sweep_says_so_when_another_sweep_holds_the_lock(
    app,
) -> None:
    await app.stuck(2)
    await app.redis.set(sweep_lock_key(app.prefix), "someone-else", px=30_000)
    env = {
        "REDIS_URL": app.url,
        "FANIN_PREFIX": app.prefix,
        "FANIN_QUEUE": f"{app.prefix}:stream",
    }
    acting = ("sweep", "--redrive", "--broker", "tests.cli_app:broker")

    table = await run_cli(*acting, "--fail-on-stuck", env=env)
    as_json = await run_cli(*acting, "--json", env=env)
    dry = await run_cli("sweep", "--json", *app.options)  # takes no lock

    assert table.code == 0, table.stderr  # nothing was examined, so nothing stuck
    assert "Another sweep holds the lock" in table.stdout
    assert (as_json.json()["skipped"], as_json.json()["findings"]) == (True, [])
    assert (dry.json()["skipped"], len(dry.json()["findings"])) == (False, 1)


async def test_tables_name_the_group_through_the_installed_script(app) -> None:
    group_id = await app.stuck(2, done=(1,))

    status, listed, swept = [
        await run_cli(command, *extra, *app.options, via="script")
        for command, *extra in (["status", group_id], ["list"], ["sweep"])
    ]

    assert status.code == listed.code == swept.code == 0
    for run in (status, listed, swept):
        assert group_id in run.stdout, run.stdout
        assert run.stderr == ""
    assert "pending" in status.stdout
    assert "would" in swept.stdout
    assert "Dry run, nothing written" in swept.stdout


async def test_taskiq_own_cli_runs_the_fanin_commands(app) -> None:
    group_id = await app.plan(2)

    run = await run_cli("status", group_id, "--json", *app.options, via="taskiq")

    assert run.code == 0, run.stderr
    assert (run.json()["group_id"], run.json()["total"]) == (group_id, 2)


async def test_no_redis_url_is_a_usage_error_in_one_line() -> None:
    run = await run_cli("list", env={"REDIS_URL": None, "TASKIQ_FANIN_REDIS_URL": None})

    assert run.code == 2
    assert run.stdout == ""
    assert "--redis-url" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


async def test_an_id_too_long_for_a_group_is_refused_as_a_group_refuses_it(app) -> None:
    """One length for every id a caller gives, wherever: LONGEST_ID."""
    too_long = "g" * (LONGEST_ID + 1)
    with pytest.raises(InvalidGroupIdError) as planning:
        group_handle(app.broker, too_long)

    run = await run_cli("status", too_long, *app.options)

    assert run.code == 2
    assert f"1 to {LONGEST_ID} letters" in run.stderr
    assert f"1 to {LONGEST_ID} letters" in str(planning.value)


async def test_an_acting_sweep_without_a_broker_is_a_usage_error() -> None:
    run = await run_cli("sweep", "--redrive", "--redis-url", "redis://127.0.0.1:1")

    assert run.code == 2
    assert "--broker" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


async def test_an_unreachable_redis_is_reported_in_one_line_without_a_traceback() -> (
    None
):
    url = f"redis://127.0.0.1:{free_port()}"

    run = await run_cli("status", "some-group", "--redis-url", url)

    assert run.code == 4
    assert "Traceback" not in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1
    assert "Redis" in run.stderr


async def test_global_options_work_before_and_after_the_command(app) -> None:
    group_id = await app.plan(2)
    chain_id = await app.chain("video-4")
    url, prefix = ("--redis-url", app.url), ("--prefix", app.prefix)

    runs = [
        await run_cli(*command, via=via)
        for command, via in (
            (("--json", *url, *prefix, "list"), "module"),
            (("--json", *url, "status", group_id, *prefix), "script"),
            ((*prefix, "status", chain_id, "--json", *url), "module"),
            (("--json", *url, *prefix, "status", chain_id), "taskiq"),
        )
    ]

    for run in runs:
        assert run.code == 0, run.stderr
    listed, group_doc, chain_doc, through_taskiq = (run.json() for run in runs)
    assert [
        (found["kind"], found.get("group_id", found.get("chain_id")))
        for found in listed
    ] == [("group", group_id), ("chain", chain_id)]
    assert group_doc["group_id"] == group_id
    assert chain_doc["chain_id"] == through_taskiq["chain_id"] == chain_id


async def test_a_global_option_after_the_command_wins_over_one_before(app) -> None:
    group_id = await app.plan(2)

    run = await run_cli(
        "--prefix", "not-this-one", "status", group_id, "--json", *app.options
    )

    assert run.code == 0, run.stderr
    assert run.json()["group_id"] == group_id


async def test_an_unknown_option_is_a_usage_error_wherever_it_goes() -> None:
    before = await run_cli("--colour", "list")
    after = await run_cli("list", "--colour")

    for run in (before, after):
        assert run.code == 2
        assert run.stdout == ""
        assert "--colour" in run.stderr
        assert len(run.stderr.strip().splitlines()) == 1


async def test_help_says_where_the_options_go_and_lists_each_exit_code() -> None:
    run = await run_cli("--help")

    assert run.code == 0
    assert "go before or after the command" in run.stdout
    listed = run.stdout.split("exit codes:\n", 1)[1].splitlines()
    assert [line.split(maxsplit=1) for line in listed] == [
        [str(code.value), meaning] for code, meaning in EXIT_MEANINGS.items()
    ]
    assert [code.value for code in ExitCode] == [0, 1, 2, 3, 4, 130]


def test_the_cli_doc_names_every_option_of_every_command() -> None:
    """What ``--help`` of each command offers, docs/cli.md says."""
    from taskiq_fanin.cli.parser import build_parser

    doc = (ROOT / "docs" / "cli.md").read_text()
    parser = build_parser()
    (commands,) = [
        action for action in parser._actions if action.choices and action.dest
    ]
    parsers = [parser, *commands.choices.values()]
    flags = {
        flag
        for each in parsers
        for action in each._actions
        for flag in action.option_strings
        if flag.startswith("--") and flag != "--help"
    }
    assert flags
    said = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", doc))
    assert flags - said == set()


def test_the_cli_doc_lists_the_exit_codes_the_command_returns() -> None:
    doc = (ROOT / "docs" / "cli.md").read_text()
    section = doc.split("\n## Exit codes\n", 1)[1].split("\n## ", 1)[0]
    rows = [
        line.split("|")[1].strip()
        for line in section.splitlines()
        if line.startswith("| ") and line.split("|")[1].strip().isdigit()
    ]

    assert rows == [str(code.value) for code in ExitCode]


def _iso(text: str) -> datetime:
    """A JSON time (pydantic writes UTC as ``Z``, which Python 3.10 cannot read)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _row(table: str, first: str) -> str:
    """The rest of the table row that starts with ``first``, spaces squeezed."""
    name = first.split()
    for line in table.splitlines():
        words = line.split()
        if words[: len(name)] == name:
            return " ".join(words[len(name) :])
    raise AssertionError(f"no row {first!r} in:\n{table}")


async def stuck_chain(app: App, chain_id: str) -> None:
    """A chain probe -> resize -> publish stuck at its last step (0.3 s deadline).

    Planned through a broker of the test's that knows every step; cli_app's
    broker, which the CLI sweeps with, does not know ``publish``.
    """
    broker, fanin = stream_broker(app.url, app.prefix, app.sent, deadline=0.3)
    for name in (PROBE, RESIZE, PUBLISH):
        broker.register_task(_noop, task_name=name)
    await broker.startup()
    try:
        steps = [Signature.of(name).immutable() for name in (PROBE, RESIZE, PUBLISH)]
        await chain(*steps, chain_id=chain_id).kiq(broker)
        for index in range(2):
            (message,) = (
                m for m in app.sent.sent if m.task_id == step_id(chain_id, index)
            )
            ok = TaskiqResult(is_err=False, return_value="ok", execution_time=0.0)
            await fanin.post_execute(message, ok)

        async def overdue() -> bool:
            return (await chain_status(fanin, chain_id)).overdue()

        await eventually(overdue, timeout=5, what=f"chain {chain_id} overdue")
    finally:
        await broker.shutdown()


async def _noop() -> None: ...


async def test_list_stuck_shows_a_stuck_chain_as_sweep_fail_on_stuck_counts_it(
    app,
) -> None:
    await app.plan(2)  # on time: neither lists it as stuck
    calm_list = await run_cli("list", "--stuck", *app.options)
    calm_sweep = await run_cli("sweep", "--fail-on-stuck", *app.options)
    await stuck_chain(app, "release-7")

    listed = await run_cli("list", "--stuck", "--json", *app.options)
    table = await run_cli("list", "--stuck", *app.options)
    alarmed = await run_cli("sweep", "--fail-on-stuck", "--json", *app.options)

    assert calm_list.code == calm_sweep.code == 0, calm_sweep.stdout
    assert calm_list.stdout.startswith("No stuck groups or chains under")
    assert listed.code == table.code == 0, listed.stderr
    (found,) = listed.json()
    assert (found["kind"], found["chain_id"], found["state"]) == (
        "chain",
        "release-7",
        "running",
    )
    assert found["step"] == 2  # the JSON keeps Python's index
    assert "3 of 3 (cli_app.publish)" in _row(table.stdout, "release-7")
    assert alarmed.code == 3
    stuck = [f["group_id"] for f in alarmed.json()["findings"]]
    assert stuck == [found["chain_id"]]


async def test_sweep_redrive_names_a_chain_step_no_worker_knows_and_kicks_nothing(
    app,
) -> None:
    await stuck_chain(app, "release-8")
    stream = f"{app.prefix}:stream"
    kicked_before = await app.redis.xlen(stream)
    env = {"REDIS_URL": app.url, "FANIN_PREFIX": app.prefix, "FANIN_QUEUE": stream}
    broker = ("--broker", "tests.cli_app:broker")

    table = await run_cli("sweep", "--redrive", *broker, env=env)
    as_json = await run_cli("sweep", "--redrive", "--json", *broker, env=env)

    assert table.code == as_json.code == 0, table.stderr
    row = _row(table.stdout, "release-8")
    assert "at step 3 of 3 (cli_app.publish)" in row
    assert "task 'cli_app.publish' unknown to this broker" in row
    (finding,) = as_json.json()["findings"]
    assert (finding["kind"], finding["applied"]) == ("chain_stuck", False)
    assert finding["unknown_tasks"] == [PUBLISH]
    assert as_json.json()["tasks_checked"] is True
    assert await app.redis.xlen(stream) == kicked_before  # nothing kicked
    assert (await chain_status(app.fanin, "release-8")).state.value == "running"


async def test_a_sweep_with_only_a_redis_url_says_it_cannot_tell_unknown_tasks(
    app,
) -> None:
    await stuck_chain(app, "release-9")

    run = await run_cli("sweep", *app.options)
    as_json = await run_cli("sweep", "--json", *app.options)

    assert run.code == 0, run.stderr
    assert "could not be told" in run.stdout
    assert as_json.json()["tasks_checked"] is False
    (finding,) = as_json.json()["findings"]
    assert finding["unknown_tasks"] == []
