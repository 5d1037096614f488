"""The typed records: a group's meta and a chain's record, and who knows their fields.

``storage/records/`` is the only package (the Lua scripts aside) that knows the
names of the hash fields. How it is kept so: every module of ``taskiq_fanin/``
outside it is parsed (``ast``) and walked; a string constant equal to a stored
field name (``records.STORED_FIELDS``, read from the records package itself, so
the check and the records cannot drift) fails the test where it is used as a
key: a subscript (``found["span"]``), the key of ``.get``/``.pop``, the left
side of ``in``, an argument of a Redis hash command (``hget``, ``hmget``, ...),
or the ``failure:`` prefix given to ``startswith``/``removeprefix``. Lookups
through a variable holding the name are not seen: the direct forms are what
creeps back.

Old records read: hashes written by today's scripts (run for real) and a hash in
the layout the scripts write, bytes and all, read through the classes.
"""

import ast
import dataclasses
import json
import re
from pathlib import Path

import pytest
from redis.asyncio import Redis

from taskiq_fanin.domain.config import DEFAULT_OUTCOME_STREAM_MAX as STREAM_MAX
from taskiq_fanin.domain.config import FanInConfig, ms
from taskiq_fanin.domain.options import GroupOptions
from taskiq_fanin.domain.results import (
    ChainState,
    FailurePolicy,
    GroupState,
    SweepPolicy,
)
from taskiq_fanin.domain.signature import Signature
from taskiq_fanin.storage import chain_scripts, records
from taskiq_fanin.storage.chain_scripts import ChainScripts
from taskiq_fanin.storage.group_scripts import GroupScripts
from taskiq_fanin.storage.keys import ChainKeys, GroupKeys
from taskiq_fanin.storage.records import ChainRecord, GroupMeta, meta_options
from taskiq_fanin.storage.replies import Outcome
from taskiq_fanin.storage.scripts import _source, packaged
from taskiq_fanin.transport.pipeline import PipelineBatcher

RECORDS = Path(records.__file__).parent
PACKAGE = RECORDS.parents[1]
#: Redis commands on a hash whose arguments name its fields.
HASH_COMMANDS = {"hget", "hmget", "hset", "hincrby", "hexists", "hdel", "hsetnx"}
#: Uses of a stored name as a key that are not a record's field: (module, name).
#: Each must still be there (a stale entry fails too).
NOT_A_RECORD = {
    # The keys given to a ChainSpec's validator: its own ``steps`` option.
    ("domain/spec.py", "steps"),
}


def _stored_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        name = node.value
        if name in records.STORED_FIELDS or name.startswith(records.FAILURE_PREFIX):
            return name
    return None


def _keys_of(node: ast.AST) -> list[ast.expr]:
    """What ``node`` looks up by name, if it is a lookup."""
    if isinstance(node, ast.Subscript):
        return [node.slice]
    if isinstance(node, ast.Compare):
        membership = any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops)
        return [node.left] if membership else []
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return []
    if node.func.attr in ("get", "pop", "setdefault", "startswith", "removeprefix"):
        return node.args[:1]
    if node.func.attr not in HASH_COMMANDS:
        return []
    keys: list[ast.expr] = []
    for arg in node.args:
        keys += arg.elts if isinstance(arg, (ast.List, ast.Tuple)) else [arg]
    return keys


def raw_lookups(source: str) -> list[tuple[int, str]]:
    """Where ``source`` uses a stored field name as a key: (line, name)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        for key in _keys_of(node):
            name = _stored_name(key)
            if name is not None:
                found.append((getattr(node, "lineno", 0), name))
    return found


def modules_outside_records() -> list[Path]:
    """Every module of the package outside the records (the Lua is not Python)."""
    return [
        path
        for path in sorted(PACKAGE.rglob("*.py"))
        if not path.is_relative_to(RECORDS)
    ]


def test_no_module_but_the_records_reads_a_stored_field_by_name() -> None:
    found, allowed = [], set()
    for path in modules_outside_records():
        module = path.relative_to(PACKAGE).as_posix()
        for line, name in raw_lookups(path.read_text()):
            if (module, name) in NOT_A_RECORD:
                allowed.add((module, name))
            else:
                found.append(f"{module}:{line} {name!r}")
    assert found == [], "read these through GroupMeta / ChainRecord instead"
    assert allowed == NOT_A_RECORD, "an entry of NOT_A_RECORD is stale"


def test_the_check_sees_every_form_of_raw_lookup() -> None:
    source = """
found["span"]
found.get("state")
fields.pop("token", None)
"error" in found
"failed_step" not in found
redis.hget(key, "token")
redis.hmget(key, ["token", "state"])
name.startswith("failure:")
"""
    assert [name for _, name in raw_lookups(source)] == [
        "span",
        "state",
        "token",
        "error",
        "failed_step",
        "token",
        "token",
        "state",
        "failure:",
    ]
    assert raw_lookups('labels["schedule"]\nx.get("pong")\nlog("state")') == []


#: A value of each kind of field, as the hash would hold it.
SAMPLES = {
    "state": "running",
    "failure_policy": "fail",
    "sweep_policy": "redrive",
    "step_names": '["a", "b"]',
    "planned": "1",
    "cancellable": "1",
    "open": "1",
}


@pytest.mark.parametrize("record", [GroupMeta, ChainRecord])
def test_every_attribute_is_read_from_the_field_it_is_stored_under(
    record: type[GroupMeta] | type[ChainRecord],
) -> None:
    attributes = {f.name for f in dataclasses.fields(record)}
    assert set(record.STORED) == attributes - {"failure_entries"}
    blank = record.from_hash({})
    for attribute, stored in record.STORED.items():
        read = record.from_hash({stored: SAMPLES.get(attribute, "7")})
        assert getattr(read, attribute) != getattr(blank, attribute), attribute


#: A hash-touching call on a script's first key (a group's meta, a chain's
#: record), or a state move (whose first three strings are no field).
_CALL = re.compile(
    r"redis\.call\('(?:HSET|HMGET|HGET|HINCRBY)', KEYS\[1\]|move\(KEYS\[1\]"
)


def _fields_the_script_names(source: str) -> set[str]:
    names: set[str] = set()
    for match in _CALL.finditer(source):
        depth, end = 1, source.index("(", match.start()) + 1
        while depth:
            depth += {"(": 1, ")": -1}.get(source[end], 0)
            end += 1
        quoted = re.findall(r"'([a-z_:]+)'", source[match.end() : end])
        if match.group().startswith("move"):
            quoted = quoted[3:]
        names.update(name for name in quoted if not name.startswith("_"))
    return names


STATES = {state.value for state in (*GroupState, *ChainState)}


def test_every_field_a_script_names_is_a_field_of_its_record() -> None:
    group, chain = set(GroupMeta.STORED.values()), set(ChainRecord.STORED.values())
    chain.add(records.FAILURE_PREFIX)
    seen: set[str] = set()
    # A chain's scripts are those its wrapper calls by name; an index's or a
    # lock's key is no record.
    wrapper = Path(chain_scripts.__file__).read_text()
    for script in packaged().values():
        if script.name in {"scheduleSweep", "listDue", "releaseLock"}:
            continue
        filename = script.filename
        expected = chain if f'"{script.name}"' in wrapper else group
        # A state written as a value ('state', 'open') is no field name.
        named = _fields_the_script_names(_source(filename)) - (STATES - expected)
        assert named <= expected, (filename, named - expected)
        seen |= named
    assert {"token", "state", "span", "done_count", "names", "failure:"} <= seen


def test_the_options_a_meta_keeps_are_fields_of_the_meta() -> None:
    written = meta_options(GroupOptions().with_defaults(FanInConfig()), depth=2)
    assert set(written) <= set(GroupMeta.STORED.values())
    assert written["depth"] == 2


async def test_a_meta_written_by_today_s_create_group_reads(
    redis_client: Redis, key_prefix: str
) -> None:
    keys = GroupKeys(key_prefix, "g")
    scripts = GroupScripts(redis_client, PipelineBatcher(redis_client))
    then = Signature(task_name="tasks:collect")
    options = GroupOptions(
        then=then,
        failure_policy=FailurePolicy.FAIL,
        sweep_policy=SweepPolicy.GIVE_UP,
        cancellable=True,
    ).with_defaults(FanInConfig())
    await scripts.create_group(
        keys,
        token="tok",
        options=meta_options(options, depth=3),
        members=["m0", "m1"],
        planner_lease_ms=30_000,
        claimant="c",
    )
    await scripts.record_outcome(
        keys,
        token="tok",
        index=0,
        outcome=Outcome.DONE,
        payload="1",
        lease_ms=1_000,
        claimant="c",
        delivery="d",
        stream_max=STREAM_MAX,
    )
    raw = await redis_client.hgetall(keys.meta)
    assert all(isinstance(name, bytes) for name in raw)  # as redis-py hands it
    meta = GroupMeta.from_hash(raw)
    assert (meta.token, meta.state, meta.total, meta.done) == (
        "tok",
        GroupState.OPEN,
        2,
        1,
    )
    assert meta.then == then
    assert meta.on_error is None
    assert meta.failure_policy is FailurePolicy.FAIL
    assert meta.sweep_policy is SweepPolicy.GIVE_UP
    assert meta.deadline_ms == ms(options.deadline)
    assert meta.ttl_ms == ms(options.ttl)
    assert meta.cancellable
    assert meta.depth == 3
    assert not meta.planned
    assert meta.created_at is not None
    assert meta.due_at == (meta.created_at + meta.deadline_ms)
    inspected = await scripts.inspect_group(keys)
    assert inspected is not None
    assert inspected.meta == meta
    assert await scripts.missing_members(keys, 0, meta.total) == {1: "m1"}


async def test_a_record_written_by_today_s_start_chain_reads(
    redis_client: Redis, key_prefix: str
) -> None:
    keys = ChainKeys(key_prefix, "c")
    scripts = ChainScripts(redis_client, PipelineBatcher(redis_client))
    member = f"{key_prefix}-g/0/tok"
    await scripts.start(
        keys,
        token="tok",
        names=json.dumps(["fetch", "store"]),
        steps=2,
        ttl_ms=60_000,
        pending='{"kick": 1}',
        deadline_ms=5_000,
        member=member,
    )
    found = await scripts.read(keys)
    assert (found.token, found.state, found.step, found.steps) == (
        "tok",
        ChainState.RUNNING,
        0,
        2,
    )
    assert found.step_names == ("fetch", "store")
    assert found.deadline_ms == 5_000
    assert found.pending == '{"kick": 1}'
    assert found.member == member
    assert found.error is None
    assert found.failures == {}
    assert found.started_at is not None
    assert found.updated_at == found.started_at
    inspected = await scripts.inspect(keys)
    assert inspected is not None
    assert inspected[0] == found
    assert await scripts.read(ChainKeys(key_prefix, "gone")) == ChainRecord()


def test_a_record_in_today_s_layout_reads_with_its_failures() -> None:
    error = {"type": "ValueError", "message": "bad", "members": {}, "lost": [3]}
    raw = {
        b"token": b"tok",
        b"state": b"failed",
        b"step": b"2",
        b"steps": b"3",
        b"names": b'["a","b","c"]',
        b"started": b"1000",
        b"updated": b"4000",
        b"finished": b"4000",
        b"span": b"60000",
        b"pending": b"",
        b"error": json.dumps(error).encode(),
        b"failed_step": b"1",
        b"failure:0": b'{"type": "KeyError", "message": "k"}',
        b"redrives": b"1",
    }
    found = ChainRecord.from_hash(raw)
    assert found.state is ChainState.FAILED
    assert found.failed_step == 1
    assert found.error is not None
    assert found.error.lost == [3]
    assert found.failures[0].type == "KeyError"
    assert (found.finished_at, found.deadline_ms, found.redrives) == (4000, 60000, 1)
    assert found.run_step is None
    assert found.member == ""


def test_a_meta_written_before_later_fields_reads_with_defaults() -> None:
    meta = GroupMeta.from_hash({"state": "open", "total": "4", "policy": "continue"})
    assert meta.failure_policy is FailurePolicy.CONTINUE
    assert (meta.sweep_policy, meta.depth, meta.redrives, meta.lost) == (
        None,
        1,
        0,
        0,
    )
    assert GroupMeta.from_hash({}).state is GroupState.MISSING
