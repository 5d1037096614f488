"""Who may act: nobody unless the page was started with ``--allow-actions``.

Then each request must carry the token, as ``Authorization: Bearer <token>`` or as
the form's ``token`` field (typed by the user: the page never holds it).
"""

import hmac
from urllib.parse import parse_qs

from starlette.requests import Request

#: The form field a page's action form asks the token in.
TOKEN_FIELD = "token"
#: The largest form read (bytes): a token and a button, no more.
MOST_FORM_BYTES = 4096


class ActionRefusedError(Exception):
    """An action refused: the HTTP status and why."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def _bearer(request: Request) -> str | None:
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


async def _form_token(request: Request) -> str | None:
    """The form's token, as a page's form posts it (URL-encoded).

    Read here, so that no multipart parser is needed.
    """
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        return None
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MOST_FORM_BYTES:
            raise ActionRefusedError(413, "the form is too large")
    values = parse_qs(body.decode("utf-8", "replace")).get(TOKEN_FIELD, [])
    return values[0] if values and values[0] else None


async def check(request: Request, *, allow_actions: bool, token: str | None) -> None:
    """Refuse the request unless actions are on and it carries the token.

    Off: 403. No token sent: 401. A wrong one: 403.
    """
    if not allow_actions or not token:
        raise ActionRefusedError(
            403, "actions are off: the page was started without --allow-actions"
        )
    sent = _bearer(request)
    if sent is None:
        sent = await _form_token(request)
    if sent is None:
        raise ActionRefusedError(401, "this action needs the token")
    if not hmac.compare_digest(sent.encode(), token.encode()):
        raise ActionRefusedError(403, "wrong token")
