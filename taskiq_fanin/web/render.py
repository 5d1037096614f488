"""The pages' HTML, written by hand: every value from Redis goes through ``escape``.

Plain HTML with a few lines of JavaScript (``EventSource``) that update the
progress and the chain's current step in place; no template engine.
"""

from dataclasses import dataclass
from datetime import datetime
from html import escape
from urllib.parse import quote

from taskiq_fanin.domain.ids import undo_chain_id
from taskiq_fanin.domain.readable import duration, moment
from taskiq_fanin.domain.results import (
    ChainState,
    ChainStatus,
    GroupState,
    GroupStatus,
    MemberError,
)
from taskiq_fanin.domain.watching import ENDED_GROUP_STATES, GroupProgress
from taskiq_fanin.web.queries import Listing

STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5rem;color:#222}
table{border-collapse:collapse;margin:.5rem 0 1.5rem}
td,th{border-bottom:1px solid #ddd;padding:.25rem .6rem;text-align:left}
.stuck{color:#b00;font-weight:bold} .muted{color:#777}
progress{width:20rem;height:1.2rem} li[aria-current=step]{font-weight:bold}
li[aria-current=step]::after{content:"  \\2190 current"} form{display:inline}
"""


def esc(value: object) -> str:
    """``value`` as HTML text (quotes too)."""
    return escape(str(value), quote=True)


def error_text(error: MemberError | None) -> str:
    """``Type: message`` of a recorded error."""
    if error is None:
        return "-"
    return f"{error.type}: {error.message}" if error.message else error.type


@dataclass(frozen=True)
class Progress:
    """What a group's page shows live: sent by its events, used by its HTML."""

    done: int
    failed: int
    skipped: int
    lost: int
    ended: int
    total: int
    percent: float
    state: str
    over: bool
    #: Of a ``GroupProgress``: outcomes a second lately, and the time left.
    rate: float | None = None
    eta_seconds: float | None = None
    in_flight: int | None = None
    pace: str = ""


def progress_doc(status: GroupStatus | GroupProgress) -> Progress:
    """The group's progress as its page shows it (pace only from a progress)."""
    count = status.done + status.failed + status.skipped + status.lost
    if status.total:
        percent = 100.0 * min(count, status.total) / status.total
    else:  # an empty group: all there is has ended once it did (as progress())
        ended = status.state in ENDED_GROUP_STATES - {GroupState.MISSING}
        percent = 100.0 if ended else 0.0
    rate = eta = in_flight = None
    if isinstance(status, GroupProgress):
        rate, eta, in_flight = status.rate, status.eta_seconds, status.in_flight
    pace = "" if rate is None else f"{rate:.1f}/s"
    if eta is not None:
        pace += f", about {duration(eta)} left"
    return Progress(
        done=status.done,
        failed=status.failed,
        skipped=status.skipped,
        lost=status.lost,
        ended=count,
        total=status.total,
        percent=round(percent, 1),
        state=status.state.value,
        over=status.state in (GroupState.COMPLETED, GroupState.CANCELLED),
        rate=rate,
        eta_seconds=eta,
        in_flight=in_flight,
        pace=pace,
    )


def group_href(group_id: str) -> str:
    """The group's page: its id in the address."""
    return f"/groups/{quote(group_id, safe='')}"


def chain_href(chain_id: str) -> str:
    """The chain's page: its id in the address."""
    return f"/chains/{quote(chain_id, safe='')}"


def page(title: str, body: str, script: str = "") -> str:
    """A whole page."""
    tail = f"<script>{script}</script>" if script else ""
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)} - taskiq-fanin</title><style>{STYLE}</style></head>"
        f'<body><p><a href="/">taskiq-fanin</a></p><h1>{esc(title)}</h1>'
        f"{body}{tail}</body></html>"
    )


def pager(base: str, listing_offset: int, limit: int, total: int, key: str) -> str:
    """Links to the page before and after, by ``?key=offset``."""
    links = []
    if listing_offset > 0:
        back = max(0, listing_offset - limit)
        links.append(f'<a href="{base}?{key}={back}">&larr; previous</a>')
    if listing_offset + limit < total:
        links.append(f'<a href="{base}?{key}={listing_offset + limit}">next &rarr;</a>')
    return f"<p>{' | '.join(links)}</p>" if links else ""


def _group_row(status: GroupStatus, now: datetime) -> str:
    doc = progress_doc(status)
    stuck = ' <span class="stuck">stuck</span>' if status.overdue(now) else ""
    return (
        f'<tr><td><a href="{group_href(status.group_id)}">{esc(status.group_id)}</a>'
        f"</td><td>{doc.ended}/{doc.total} ({doc.percent:.1f}%)</td>"
        f"<td>{esc(status.state.value)}{stuck}</td>"
        f"<td>{duration(status.age_seconds(now))}</td>"
        f"<td>{moment(status.deadline)}</td></tr>"
    )


def _chain_row(status: ChainStatus, now: datetime) -> str:
    stuck = ' <span class="stuck">stuck</span>' if status.overdue(now) else ""
    step = min(status.step + 1, status.steps)
    return (
        f'<tr><td><a href="{chain_href(status.chain_id)}">{esc(status.chain_id)}</a>'
        f"</td><td>step {step} of {status.steps}</td>"
        f"<td>{esc(status.state.value)}{stuck}</td>"
        f"<td>{duration(status.age_seconds(now))}</td>"
        f"<td>{moment(status.due)}</td></tr>"
    )


HEAD = "<tr><th>id</th><th>progress</th><th>state</th><th>age</th><th>{}</th></tr>"


def index_page(
    groups: Listing,
    chains: Listing,
    finished: tuple[list[GroupStatus], list[ChainStatus]],
    now: datetime,
    prefix: str,
) -> str:
    """``/``: the open groups and chains (stuck ones first), and those finished."""
    parts = [f"<p>Prefix <code>{esc(prefix)}</code>, at {moment(now)}.</p>"]
    for name, listing, row, due_name, key in (
        ("Groups", groups, _group_row, "deadline", "groups"),
        ("Chains", chains, _chain_row, "due", "chains"),
    ):
        shown = f"{listing.offset + 1}-{listing.offset + len(listing.rows)}"
        parts.append(
            f'<h2 id="{key}">{name}: {listing.total} indexed, '
            f'<span class="stuck">{listing.due} due</span> (stuck or about to be '
            f"looked at by the sweep){', showing ' + shown if listing.rows else ''}"
            f"</h2>"
        )
        rows = "".join(row(item, now) for item in listing.rows)
        parts.append(f'<table id="{key}-table">{HEAD.format(due_name)}{rows}</table>')
        parts.append(
            pager("/", listing.offset, listing.limit, listing.total, f"{key}_offset")
        )
    done_groups, done_chains = finished
    rows = "".join(_group_row(g, now) for g in done_groups)
    rows += "".join(_chain_row(c, now) for c in done_chains)
    parts.append(
        "<h2>Recently finished</h2><p class=muted>Those this page listed open and "
        "that have finished since (kept in this process's memory only).</p>"
        f'<table id="finished-table">{HEAD.format("due")}{rows}</table>'
    )
    return page("Groups and chains", "".join(parts))


CHAIN_SCRIPT = """
window.faninLoadedAt = Date.now();
const source = new EventSource(location.pathname + "/events");
source.addEventListener("step", (event) => {
  const c = JSON.parse(event.data);
  document.querySelectorAll("#steps li").forEach((li, i) => {
    if (i === c.current) { li.setAttribute("aria-current", "step"); }
    else { li.removeAttribute("aria-current"); }
  });
  document.getElementById("state").textContent = c.state;
  document.getElementById("step").textContent = c.shown;
  if (c.over) { source.close(); }
});
"""


@dataclass(frozen=True)
class StepShown:
    """What a chain's page shows live: the current step (from 0, or None)."""

    current: int | None
    shown: str
    state: str
    over: bool


def chain_doc(status: ChainStatus) -> StepShown:
    """The chain's step as its page shows it."""
    running = status.state in (ChainState.RUNNING, ChainState.FAILING)
    current = status.step if running and status.step < status.steps else None
    shown = min(status.step + 1, status.steps)
    return StepShown(
        current=current,
        shown=f"{shown} of {status.steps}",
        state=status.state.value,
        over=status.finished is not None or not running,
    )


def chain_page(status: ChainStatus, now: datetime, compensations: list[str]) -> str:
    """A chain: its steps, the current one marked, its failure and compensations."""
    doc = chain_doc(status)
    steps = []
    for index, name in enumerate(status.step_names):
        mark = ' aria-current="step"' if index == doc.current else ""
        error = status.failures.get(index)
        if status.failed_step == index:
            error = status.error
        note = f" - failed: {esc(error_text(error))}" if error else ""
        if index == status.step and status.step_group_id:
            link = group_href(status.step_group_id)
            note += f' (<a href="{link}">its group</a>)'
        steps.append(f"<li{mark}>{esc(name)}{note}</li>")
    stuck = ' <span class="stuck">stuck</span>' if status.overdue(now) else ""
    comps = "".join(f"<li>{esc(name)}</li>" for name in compensations)
    undo = undo_chain_id(status.chain_id)
    body = (
        f'<p>State <span id="state">{esc(doc.state)}</span>{stuck}, step '
        f'<span id="step">{doc.shown}</span>; started {moment(status.started)}, '
        f"due {moment(status.due)}, finished {moment(status.finished)}, age "
        f"{duration(status.age_seconds(now))}.</p>"
        f'<h2>Steps</h2><ol id="steps">{"".join(steps)}</ol>'
        f"<h2>Compensations</h2><p class=muted>Of the steps completed so far; on "
        f"a failure or a cancel they run, last first, as the chain "
        f'<a href="{chain_href(undo)}">{esc(undo)}</a>.</p>'
        f'<ol id="compensations">{comps or "<li class=muted>none</li>"}</ol>'
    )
    return page(f"Chain {status.chain_id}", body, CHAIN_SCRIPT)


def message_page(title: str, text: str) -> str:
    """A short page that says one thing (not found, refused, done)."""
    return page(title, f"<p>{esc(text)}</p>")
