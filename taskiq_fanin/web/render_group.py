"""The group's page: live progress, its failures, a page of its members, actions."""

import json
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import quote

from taskiq_fanin.domain.readable import duration, moment
from taskiq_fanin.domain.results import GroupState, GroupStatus, MemberError
from taskiq_fanin.domain.watching import GroupProgress, MemberOutcome
from taskiq_fanin.web.queries import Member
from taskiq_fanin.web.render import (
    error_text,
    esc,
    group_href,
    page,
    pager,
    progress_doc,
)

GROUP_SCRIPT = """
window.faninLoadedAt = Date.now();
const source = new EventSource(location.pathname + "/events");
source.addEventListener("progress", (event) => {
  const p = JSON.parse(event.data);
  const bar = document.getElementById("bar");
  bar.max = Math.max(p.total, 1); bar.value = p.ended;
  document.getElementById("count").textContent = p.ended + "/" + p.total;
  document.getElementById("percent").textContent = p.percent.toFixed(1) + "%";
  document.getElementById("state").textContent = p.state;
  document.getElementById("pace").textContent = p.pace;
  for (const k of ["done", "failed", "skipped", "lost"]) {
    document.getElementById("n-" + k).textContent = p[k];
  }
  if (p.over) { source.close(); }
});
"""


@dataclass
class GroupView:
    """What a group's page shows besides its progress, each part a page."""

    #: Members by index (``offset``, ``limit``), from the group's sets.
    members: list[Member]
    offset: int
    limit: int
    #: Failed members from a step of ``SSCAN``, and its cursor (0: all seen).
    failures: list[Member]
    failures_cursor: int
    #: Outcomes in the order recorded (the outcome stream), after ``after``.
    outcomes: list[MemberOutcome]
    after: str | None
    #: Actions on (``--allow-actions``), and a broker to re-drive through.
    actions: bool = False
    broker: bool = False


def _detail(state: str, result: object, error: MemberError | None) -> str:
    if state == "done":
        return esc(json.dumps(result, default=str)[:200])
    return esc(error_text(error)) if error else ""


def _members_table(items: list[Member]) -> str:
    rows = "".join(
        f"<tr><td>{m.index}</td><td>{esc(m.state)}</td>"
        f"<td>{_detail(m.state, m.result, m.error)}</td></tr>"
        for m in items
    )
    head = "<tr><th>member</th><th>outcome</th><th>result or error</th></tr>"
    return f'<table id="members">{head}{rows}</table>'


def _outcomes(status: GroupStatus, view: GroupView) -> str:
    href = group_href(status.group_id)
    rows = "".join(
        f"<tr><td>{moment(o.at)}</td><td>{o.index}</td><td>{esc(o.state)}</td>"
        f"<td>{_detail(o.state, o.result, o.error)}</td></tr>"
        for o in view.outcomes
    )
    head = "<tr><th>recorded</th><th>member</th><th>outcome</th><th>detail</th></tr>"
    links = [f'<a href="{href}#outcomes">from the first</a>'] if view.after else []
    if len(view.outcomes) >= view.limit:
        after = quote(view.outcomes[-1].cursor, safe="")
        links.append(
            f'<a href="{href}?after={after}&amp;limit={view.limit}#outcomes">'
            "next &rarr;</a>"
        )
    return (
        '<h2 id="outcomes">Outcomes as recorded</h2><p class=muted>From the '
        "group's outcome stream (its latest outcomes, kept as long as the group's "
        "record, after it ended too).</p>"
        f'<table id="outcome-list">{head}{rows}</table><p>{" | ".join(links)}</p>'
    )


def _actions(status: GroupStatus, now: datetime, actions: bool, broker: bool) -> str:
    if not actions:
        return ""
    href = group_href(status.group_id)
    field = (
        '<label>token <input type="password" name="token" '
        'autocomplete="off" required></label> '
    )
    parts = []
    if status.state not in (GroupState.COMPLETED, GroupState.CANCELLED):
        parts.append(
            f'<form method="post" action="{href}/cancel">{field}'
            '<button type="submit">Cancel the group</button></form>'
        )
    if status.overdue(now):
        if broker:
            parts.append(
                f'<form method="post" action="{href}/redrive">{field}'
                '<button type="submit">Re-drive its missing members</button></form>'
            )
        else:
            parts.append(
                "<p>Stuck: re-driving kicks tasks, so it needs the page started "
                "with <code>--broker MODULE:VARIABLE</code>.</p>"
            )
    return f"<h2>Actions</h2>{'<br>'.join(parts)}" if parts else ""


def group_page(
    status: GroupStatus, progress: GroupProgress, now: datetime, view: GroupView
) -> str:
    """A group: live progress, actions, failures, outcomes, members by index."""
    doc = progress_doc(progress)
    stuck = ' <span class="stuck">stuck</span>' if status.overdue(now) else ""
    counts = ", ".join(
        f'{name} <span id="n-{name}">{value}</span>'
        for name, value in (
            ("done", doc.done),
            ("failed", doc.failed),
            ("skipped", doc.skipped),
            ("lost", doc.lost),
        )
    )
    href = group_href(status.group_id)
    body = [
        f'<p><progress id="bar" max="{max(doc.total, 1)}" value="{doc.ended}">'
        f'</progress> <span id="count">{doc.ended}/{doc.total}</span> '
        f'(<span id="percent">{doc.percent:.1f}%</span>) '
        f'<span id="pace">{esc(doc.pace)}</span></p>',
        f"<p>{counts}</p>",
        f'<p>State <span id="state">{esc(doc.state)}</span>{stuck}; created '
        f"{moment(status.created)}, deadline {moment(status.deadline)}, finished "
        f"{moment(status.finished)}, age {duration(status.age_seconds(now))}.</p>",
        _actions(status, now, view.actions, view.broker),
    ]
    rows = "".join(
        f"<tr><td>{m.index}</td><td>{esc(error_text(m.error))}</td></tr>"
        for m in view.failures
    )
    more = (
        f'<p><a href="{href}?failures={view.failures_cursor}">more &rarr;</a></p>'
        if view.failures_cursor
        else ""
    )
    over = status.state in (GroupState.COMPLETED, GroupState.CANCELLED)
    gone = "<p class=muted>Over: see them among the outcomes below.</p>"
    body.append(
        f"<h2>Failures ({status.failed})</h2>"
        f'<table id="failures"><tr><th>member</th><th>error</th></tr>{rows}</table>'
        f"{more}{gone if over and not rows else ''}"
    )
    body.append(_outcomes(status, view))
    last = min(view.offset + view.limit, status.total)
    body.append(
        f"<h2>Members {view.offset}-{max(last - 1, view.offset)} of "
        f"{status.total}, by index</h2>"
        + (
            "<p class=muted>Over: a group keeps its members' outcomes by index "
            "until it ends.</p>"
            if over
            else _members_table(view.members)
            + pager(href, view.offset, view.limit, status.total, "offset")
        )
    )
    return page(f"Group {status.group_id}", "".join(body), GROUP_SCRIPT)
