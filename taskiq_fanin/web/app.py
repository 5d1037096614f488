"""The web page's routes.

The listing, a group's and a chain's pages, their events, and the two actions
(cancel, re-drive).
"""

import logging
from dataclasses import dataclass, field

from redis.exceptions import RedisError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.responses import StreamingResponse as Streaming
from starlette.routing import Route
from taskiq import AsyncBroker

from taskiq_fanin.api.broker import context_of
from taskiq_fanin.api.control import Kind as IdKind
from taskiq_fanin.api.control import cancel, chain_status, group_status, resolve
from taskiq_fanin.api.groups import group_handle
from taskiq_fanin.domain.exceptions import FanInError, InvalidOptionError
from taskiq_fanin.domain.ids import validate_lookup_id
from taskiq_fanin.domain.results import ChainState, GroupState, SweepPolicy
from taskiq_fanin.sweep.run import sweep_group
from taskiq_fanin.web import queries
from taskiq_fanin.web.auth import ActionRefusedError, check
from taskiq_fanin.web.render import (
    chain_page,
    group_href,
    index_page,
    message_page,
)
from taskiq_fanin.web.render_group import GroupView, group_page
from taskiq_fanin.web.sse import chain_events, group_events
from taskiq_fanin.worker.middleware import FanInMiddleware

logger = logging.getLogger("taskiq_fanin.web")

#: What an SSE response says it is (and that no proxy should buffer it).
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


@dataclass
class Settings:
    """What the app serves, and whether (and with what token) it may act."""

    fanin: FanInMiddleware
    allow_actions: bool = False
    token: str | None = None
    #: The user's broker (``--broker``): re-driving kicks tasks through it.
    broker: AsyncBroker | None = None
    seen: queries.Seen = field(default_factory=queries.Seen)


def _number(request: Request, name: str, default: int, most: int) -> int:
    raw = request.query_params.get(name, "")
    value = int(raw) if raw.isascii() and raw.isdigit() else default
    return min(value, most)


def _html(body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code=status)


def _settings(request: Request) -> Settings:
    settings = request.app.state.settings
    assert isinstance(settings, Settings)
    return settings


async def index(request: Request) -> Response:
    """``/``: the open groups and chains, a page of each, and those finished."""
    settings = _settings(request)
    fanin = settings.fanin
    limit = _number(request, "limit", queries.PAGE, queries.MOST) or 1
    now = await queries.now_of(fanin)
    groups = await queries.group_page(
        fanin, _number(request, "groups_offset", 0, 10**9), limit, now
    )
    chains = await queries.chain_page(
        fanin, _number(request, "chains_offset", 0, 10**9), limit, now
    )
    open_groups = [g.group_id for g in groups.rows if g.state not in queries.GROUP_OVER]
    open_chains = [c.chain_id for c in chains.rows if c.finished is None]
    queries.Seen.note(settings.seen.groups, open_groups)
    queries.Seen.note(settings.seen.chains, open_chains)
    listed = {*open_groups, *open_chains}
    finished = await queries.finished_since(fanin, settings.seen, listed)
    prefix = context_of(fanin).config.prefix
    return _html(index_page(groups, chains, finished, now, prefix))


async def group(request: Request) -> Response:
    """A group's page (a chain's id is sent to the chain's page)."""
    settings = _settings(request)
    fanin = settings.fanin
    group_id = request.path_params["group_id"]
    status = await group_status(fanin, group_id)
    if status.state is GroupState.MISSING:
        if await resolve(context_of(fanin), group_id) is IdKind.CHAIN:
            return RedirectResponse(f"/chains/{group_id}", status_code=303)
        return _html(message_page("Not found", f"No group {group_id!r}."), 404)
    limit = _number(request, "limit", queries.PAGE, queries.MOST) or 1
    offset = _number(request, "offset", 0, max(status.total - 1, 0))
    after = request.query_params.get("after") or None
    cursor = _number(request, "failures", 0, 2**63)
    failures, next_cursor = await queries.failures(
        fanin, group_id, cursor, queries.PAGE
    )
    view = GroupView(
        members=await queries.members(fanin, group_id, offset, limit, status.total),
        offset=offset,
        limit=limit,
        failures=failures,
        failures_cursor=next_cursor,
        outcomes=await queries.outcomes(fanin, group_id, after, limit),
        after=after,
        actions=settings.allow_actions,
        broker=settings.broker is not None,
    )
    progress = await group_handle(fanin, group_id).progress()
    now = status.read_at or await queries.now_of(fanin)
    return _html(group_page(status, progress, now, view))


async def chain(request: Request) -> Response:
    """A chain's page."""
    settings = _settings(request)
    fanin = settings.fanin
    chain_id = request.path_params["chain_id"]
    status = await chain_status(fanin, chain_id)
    if status.state is ChainState.MISSING:
        return _html(message_page("Not found", f"No chain {chain_id!r}."), 404)
    compensations = await queries.compensations(fanin, chain_id)
    now = status.read_at or await queries.now_of(fanin)
    return _html(chain_page(status, now, compensations))


async def events_of_group(request: Request) -> Response:
    """The group's progress as server-sent events."""
    settings = _settings(request)
    fanin = settings.fanin
    # A bad id is refused (404) before the stream starts: not inside it.
    group_id = validate_lookup_id(request.path_params["group_id"])
    stream = group_events(fanin, group_id)
    return Streaming(stream, media_type="text/event-stream", headers=SSE_HEADERS)


async def events_of_chain(request: Request) -> Response:
    """The chain's step as server-sent events."""
    settings = _settings(request)
    fanin = settings.fanin
    stream = chain_events(fanin, validate_lookup_id(request.path_params["chain_id"]))
    return Streaming(stream, media_type="text/event-stream", headers=SSE_HEADERS)


async def cancel_group(request: Request) -> Response:
    """Cancel the group (actions on, with the token)."""
    settings = _settings(request)
    fanin = settings.fanin
    await check(request, allow_actions=settings.allow_actions, token=settings.token)
    group_id = request.path_params["group_id"]
    status = await group_status(fanin, group_id)
    if status.state is GroupState.MISSING:
        return _html(message_page("Not found", f"No group {group_id!r}."), 404)
    cancelled = await cancel(fanin, group_id)
    logger.warning("Web: cancel of group %s: %s", group_id, cancelled)
    return RedirectResponse(group_href(group_id), status_code=303)


async def redrive_group(request: Request) -> Response:
    """Kick a stuck group's missing members again (needs ``--broker``)."""
    settings = _settings(request)
    fanin = settings.fanin
    await check(request, allow_actions=settings.allow_actions, token=settings.token)
    group_id = request.path_params["group_id"]
    if settings.broker is None:
        text = "Re-driving kicks tasks: start the page with --broker."
        return _html(message_page("Needs --broker", text), 409)
    status = await group_status(fanin, group_id)
    if not status.overdue():
        text = f"Group {group_id!r} is not stuck ({status.state.value})."
        return _html(message_page("Not stuck", text), 409)
    ctx = context_of(fanin)
    report = await sweep_group(ctx, group_id, sweep_policy=SweepPolicy.REDRIVE)
    if report.skipped:
        text = "Another sweep is acting now: try again in a moment."
        return _html(message_page("Busy", text), 409)
    logger.warning("Web: re-drive of group %s", group_id)
    return RedirectResponse(group_href(group_id), status_code=303)


async def refused(request: Request, exc: Exception) -> Response:
    """401 (with ``WWW-Authenticate``) or 403, and why."""
    assert isinstance(exc, ActionRefusedError)
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    response = _html(message_page("Refused", exc.reason), exc.status)
    response.headers.update(headers or {})
    return response


async def bad_id(request: Request, exc: Exception) -> Response:
    """An id that cannot be one: 404."""
    return _html(message_page("Not found", str(exc)), 404)


async def bad_request(request: Request, exc: Exception) -> Response:
    """A query the page cannot read (a cursor no outcome gave): 400."""
    return _html(message_page("Bad request", str(exc)), 400)


async def redis_away(request: Request, exc: Exception) -> Response:
    """Redis did not answer: 503."""
    return _html(message_page("Redis", f"Redis: {exc}"), 503)


def build_app(settings: Settings) -> Starlette:
    """The ASGI app of ``taskiq-fanin web``."""
    app = Starlette(
        routes=[
            Route("/", index),
            Route("/groups/{group_id}", group),
            Route("/groups/{group_id}/events", events_of_group),
            Route("/groups/{group_id}/cancel", cancel_group, methods=["POST"]),
            Route("/groups/{group_id}/redrive", redrive_group, methods=["POST"]),
            Route("/chains/{chain_id}", chain),
            Route("/chains/{chain_id}/events", events_of_chain),
        ],
        exception_handlers={
            ActionRefusedError: refused,
            InvalidOptionError: bad_request,
            FanInError: bad_id,
            RedisError: redis_away,
        },
    )
    app.state.settings = settings
    return app
