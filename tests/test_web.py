"""``taskiq-fanin web`` in a real headless Chromium, on a real redis-server with
a real Receiver: a group's progress reaching 100% live without a reload, a
chain's current step moving, a cancel refused without the token (and
accepted with it), and a stuck group's re-drive likewise.

Members wait on an event the test sets, so the page is seen before, between
and after their outcomes; every wait is a condition with a deadline.
"""

import asyncio

import pytest
from playwright.async_api import Page

from taskiq_fanin import GroupResult, Signature, chain, group
from taskiq_fanin.inspection import chain_status, group_status
from taskiq_fanin.models import ChainState, GroupState
from taskiq_fanin.web import Settings
from tests.harness import (
    SentMessages,
    drained,
    eventually,
    lossy_stream_broker,
    overdue,
    stream_broker,
    worker,
)
from tests.web_harness import chromium, web_server

#: Milliseconds the browser waits for a condition on the page.
WAIT_MS = 20_000
TOKEN = "s3cret-token"
#: Seconds: a deadline short enough to pass within a test.
SHORT = 0.3


async def _mark(page: Page) -> None:
    """Set a marker that a reload (or a navigation) would wipe."""
    await page.evaluate("window.testMarker = 'loaded once'")


async def _still_marked(page: Page) -> bool:
    return bool(await page.evaluate("window.testMarker") == "loaded once")


async def test_a_groups_progress_reaches_100_percent_live_without_a_reload(
    redis_url: str, key_prefix: str
) -> None:
    broker, fanin = stream_broker(redis_url, key_prefix)
    gates = [asyncio.Event(), asyncio.Event()]

    @broker.task
    async def part(number: int) -> int:
        await asyncio.wait_for(gates[number % 2].wait(), timeout=30)
        if number == 2:
            raise ValueError("part 2 is broken")
        return number

    @broker.task
    async def then(result: GroupResult) -> None:
        pass

    members = [Signature.of(part, n) for n in range(10)]
    async with worker(broker, max_async_tasks=12):
        await group(members, then=then, group_id="album").kiq(broker)
        try:
            async with web_server(Settings(fanin)) as url, chromium() as browser:
                page = await browser.new_page()
                await page.goto(f"{url}/groups/album")
                assert await page.text_content("#count") == "0/10"
                await _mark(page)

                gates[0].set()  # the even members end: half the group
                await page.wait_for_function(
                    "document.getElementById('count').textContent === '5/10'",
                    timeout=WAIT_MS,
                )
                assert await page.text_content("#percent") == "50.0%"
                assert await page.text_content("#n-failed") == "1"
                # Another tab, while the group is open: the failure, with its error
                # (a group's outcomes are kept until it ends), and the members.
                other = await browser.new_page()
                await other.goto(f"{url}/groups/album")
                failures = await other.text_content("#failures")
                assert failures is not None
                assert "ValueError: part 2 is broken" in failures
                rows = other.locator("#members tr")
                assert await rows.count() == 11  # a header and 10 members
                assert "pending" in (await rows.nth(2).text_content() or "")  # member 1
                assert "done" in (await rows.nth(5).text_content() or "")  # member 4

                gates[1].set()  # the odd ones
                await page.wait_for_function(
                    "document.getElementById('percent').textContent === '100.0%'",
                    timeout=WAIT_MS,
                )
                bar = page.locator("progress#bar")
                assert await bar.evaluate("b => [b.value, b.max]") == [10, 10]
                assert await page.text_content("#n-failed") == "1"
                assert await _still_marked(page)  # updated in place, never reloaded
                await page.wait_for_function(  # and on to its end, the stream closed
                    "document.getElementById('state').textContent === 'completed'",
                    timeout=WAIT_MS,
                )
                assert await _still_marked(page)

                # Ended, its outcomes are still read from its outcome stream,
                # a page at a time, each page after the last one's cursor.
                await page.goto(f"{url}/groups/album?limit=4")
                seen: list[str] = []
                for _ in range(3):
                    rows = page.locator("#outcome-list tr")
                    seen += [
                        (await rows.nth(i).text_content()) or ""
                        for i in range(1, await rows.count())
                    ]
                    if len(seen) >= 10:
                        break
                    await page.click("#outcomes ~ p >> text=next")
                assert len(seen) == 10  # 4, 4 and 2
                assert sum("part 2 is broken" in row for row in seen) == 1
        finally:
            for gate in gates:  # the members end before the worker stops
                gate.set()


async def test_a_chains_current_step_moves_on_the_page(
    redis_url: str, key_prefix: str
) -> None:
    broker, fanin = stream_broker(redis_url, key_prefix)
    gates = {name: asyncio.Event() for name in ("fetch", "resize", "publish")}

    @broker.task
    async def step(previous: object, name: str) -> str:
        await asyncio.wait_for(gates[name].wait(), timeout=30)
        return name

    @broker.task
    async def first(name: str) -> str:
        await asyncio.wait_for(gates[name].wait(), timeout=30)
        return name

    @broker.task
    async def undo(name: str) -> None:
        pass

    current = "document.querySelector('#steps li[aria-current=step]')"

    def at_step(number: int) -> str:  # counted from 1
        return f"{current} === document.querySelectorAll('#steps li')[{number - 1}]"

    async with worker(broker, max_async_tasks=4):
        await chain(
            Signature.of(first, "fetch").with_compensation(Signature.of(undo, "f")),
            Signature.of(step, "resize"),
            Signature.of(step, "publish"),
            chain_id="video",
        ).kiq(broker)
        try:
            async with web_server(Settings(fanin)) as url, chromium() as browser:
                page = await browser.new_page()
                await page.goto(f"{url}/chains/video")
                await page.wait_for_function(at_step(1), timeout=WAIT_MS)
                await _mark(page)

                gates["fetch"].set()
                await page.wait_for_function(at_step(2), timeout=WAIT_MS)
                assert await page.locator("#steps li[aria-current=step]").count() == 1
                other = await browser.new_page()  # the compensation kept for step 1
                await other.goto(f"{url}/chains/video")
                compensations = await other.text_content("#compensations")
                assert compensations is not None
                assert "undo" in compensations
                gates["resize"].set()
                await page.wait_for_function(at_step(3), timeout=WAIT_MS)
                gates["publish"].set()
                await page.wait_for_function(
                    f"{current} === null && "
                    "document.getElementById('state').textContent === 'done'",
                    timeout=WAIT_MS,
                )
                assert await _still_marked(page)
                assert (await chain_status(fanin, "video")).state is ChainState.DONE
        finally:
            for gate in gates.values():
                gate.set()


async def test_a_cancel_is_refused_without_the_token_and_done_with_it(
    redis_url: str, key_prefix: str
) -> None:
    broker, fanin = stream_broker(redis_url, key_prefix)
    gate = asyncio.Event()

    @broker.task
    async def slow(number: int) -> int:
        await asyncio.wait_for(gate.wait(), timeout=30)
        return number

    @broker.task
    async def then(result: GroupResult) -> None:
        pass

    members = [Signature.of(slow, n) for n in range(3)]
    acting = Settings(fanin, allow_actions=True, token=TOKEN)
    async with worker(broker, max_async_tasks=4) as receiver:
        await group(members, then=then, group_id="doomed").kiq(broker)
        try:
            async with (
                web_server(Settings(fanin)) as read_only,
                web_server(acting) as url,
                chromium() as browser,
            ):
                page = await browser.new_page()
                cancel = f"{url}/groups/doomed/cancel"
                # Read-only: no button, and a post is refused, token or not.
                await page.goto(f"{read_only}/groups/doomed")
                assert await page.locator("form[action$='/cancel']").count() == 0
                refused = await page.request.post(
                    f"{read_only}/groups/doomed/cancel", form={"token": TOKEN}
                )
                assert refused.status == 403

                await page.goto(f"{url}/groups/doomed")
                assert TOKEN not in await page.content()  # never in the page
                no_token = await page.request.post(cancel)
                assert no_token.status == 401
                await page.fill("form[action$='/cancel'] input[name=token]", "wrong")
                async with page.expect_navigation() as wrong:
                    await page.click("form[action$='/cancel'] button")
                assert (await wrong.value).status == 403
                assert (await group_status(fanin, "doomed")).state is GroupState.OPEN

                await page.goto(f"{url}/groups/doomed")
                await page.fill("form[action$='/cancel'] input[name=token]", TOKEN)
                async with page.expect_navigation() as right:
                    await page.click("form[action$='/cancel'] button")
                assert (await right.value).ok

                async def cancelled() -> bool:
                    found = await group_status(fanin, "doomed")
                    return found.state is GroupState.CANCELLED

                await eventually(cancelled, what="the group cancelled")
                await page.wait_for_function(
                    "document.getElementById('state').textContent === 'cancelled'",
                    timeout=WAIT_MS,
                )
        finally:
            gate.set()  # the members end (cancelled or not) before the worker
        await drained(broker, receiver)


async def test_a_stuck_groups_redrive_needs_the_token_and_kicks_only_the_lost(
    redis_url: str, key_prefix: str
) -> None:
    """A member whose message was lost leaves its group stuck past its
    deadline: the page offers a re-drive only with ``--allow-actions`` (and a
    broker to kick through), refuses it without the token, and with it kicks
    exactly the lost member again, once; the continuation then runs once."""
    sent = SentMessages()
    broker, fanin = lossy_stream_broker(redis_url, key_prefix, sent)
    runs: list[int] = []

    @broker.task
    async def member(index: int) -> int:
        runs.append(index)
        return index

    @broker.task
    async def then(result: GroupResult) -> None:
        pass

    broker.drop = {"stuck~2"}  # its kick is lost: nothing runs it
    acting = Settings(fanin, allow_actions=True, token=TOKEN, broker=broker)
    async with worker(broker, max_async_tasks=5) as receiver:
        members = [Signature.of(member, i) for i in range(4)]
        await group(members, then=then, group_id="stuck", deadline=SHORT).kiq(broker)

        async def three_done() -> bool:
            return (await group_status(fanin, "stuck")).done == 3

        await eventually(three_done, what="three members")
        await eventually(lambda: overdue(fanin, "stuck"), what="the deadline")
        async with (
            web_server(Settings(fanin)) as read_only,
            web_server(acting) as url,
            chromium() as browser,
        ):
            page = await browser.new_page()
            await page.goto(f"{read_only}/groups/stuck")
            assert await page.locator("form[action$='/redrive']").count() == 0

            await page.goto(f"{url}/groups/stuck")
            assert TOKEN not in await page.content()
            refused = await page.request.post(f"{url}/groups/stuck/redrive")
            assert refused.status == 401
            assert (await group_status(fanin, "stuck")).redrives == 0

            await page.fill("form[action$='/redrive'] input[name=token]", TOKEN)
            async with page.expect_navigation() as redriven:
                await page.click("form[action$='/redrive'] button")
            assert (await redriven.value).ok

            async def completed() -> bool:
                found = await group_status(fanin, "stuck")
                return found.state is GroupState.COMPLETED

            await eventually(completed, what="the group completed")
            await eventually(
                lambda: sent.executions_of(then.task_name) == 1, what="continuation"
            )
        await drained(broker, receiver)
        redrives = (await group_status(fanin, "stuck")).redrives

    assert sorted(runs) == [0, 1, 2, 3]  # only the lost member ran again
    assert sent.executions_of(then.task_name) == 1
    assert redrives == 1


async def test_a_group_gone_bad_ids_bad_cursors_and_an_empty_group(
    redis_url: str, key_prefix: str
) -> None:
    """A group gone from Redis (expired) while its page is open ends the page's
    stream: the page stops asking, not reconnecting every second. A bad id's
    stream is a 404 before it starts; a cursor no outcome gave is a 400; an
    empty group that ended is 100%, as ``progress()`` and ``watch`` say."""
    broker, fanin = stream_broker(redis_url, key_prefix)

    @broker.task
    async def member(number: int) -> int:
        return number

    @broker.task
    async def then(result: GroupResult) -> None:
        pass

    await broker.startup()  # no worker: the group stays open
    try:
        await group([Signature.of(member, 1)], then=then, group_id="gone").kiq(broker)
        await group([], then=then, group_id="empty").kiq(broker)
        async with web_server(Settings(fanin)) as url, chromium() as browser:
            page = await browser.new_page()
            await page.goto(f"{url}/groups/gone")
            await page.wait_for_function("source.readyState === 1", timeout=WAIT_MS)
            await fanin.context.redis.delete(f"{key_prefix}:{{gone}}:meta")
            await page.wait_for_function(
                "document.getElementById('state').textContent === 'missing'",
                timeout=WAIT_MS,
            )
            # Closed by the page itself (a stream that just ended would be
            # CONNECTING again, 0): EventSource.CLOSED.
            await page.wait_for_function("source.readyState === 2", timeout=WAIT_MS)

            bad_id = await page.request.get(f"{url}/groups/bad%20id/events")
            assert bad_id.status == 404
            bad_cursor = await page.request.get(
                f"{url}/groups/empty?after=99999999999999999999-0"
            )
            assert bad_cursor.status == 400
            assert "after" in await bad_cursor.text()

            await page.goto(f"{url}/groups/empty")
            assert await page.text_content("#count") == "0/0"
            assert await page.text_content("#percent") == "100.0%"
    finally:
        await broker.shutdown()


@pytest.mark.parametrize("header", ["Bearer wrong", "Basic czNjcmV0"])
async def test_an_action_with_a_bad_authorization_header_is_refused(
    redis_url: str, key_prefix: str, header: str
) -> None:
    """A header that is not ``Bearer <token>`` is refused; the token passes."""
    _, fanin = stream_broker(redis_url, key_prefix)
    await fanin.startup()
    try:
        acting = Settings(fanin, allow_actions=True, token=TOKEN)
        async with web_server(acting) as url, chromium() as browser:
            page = await browser.new_page()
            response = await page.request.post(
                f"{url}/groups/nothing/cancel", headers={"Authorization": header}
            )
            assert response.status in (401, 403)
            ok = await page.request.post(
                f"{url}/groups/nothing/cancel",
                headers={"Authorization": f"Bearer {TOKEN}"},
            )
            assert ok.status == 404  # the token passes; there is no such group
    finally:
        await fanin.shutdown()
