"""Who may read the web view and who may act on it (``supervise serve``'s security model).

Three checks, in this order, on every HTTP request (an ASGI middleware, so the event
stream is covered as well as the pages):

1. **Host** (loopback binds only): the ``Host`` header must name a loopback address or
   ``localhost``. A page on another site that makes its own name resolve to 127.0.0.1 (DNS
   rebinding) sends its own name and is refused (400).
2. **Token** (always, except for reads over ``--socket``, whose 0600 socket in the 0700
   state folder only its owner can reach): ``Authorization: Bearer T``, or the cookie
   ``supervise_token_<12 hex of sha256(T)>`` (:func:`cookie_name`) that a first visit with
   ``?token=T`` sets (``HttpOnly``, ``SameSite=Strict``; the redirect drops the token from
   the address bar and history). Browsers keep cookies per host, not per port: a name per
   token keeps two boards on one machine from logging each other out.
   Anything else gets 401. Tokens are compared in constant time.
3. **CSRF** (actions only, :func:`csrf_problem`): a POST must carry ``X-CSRF-Token`` equal
   to a secret made at start and written into the page (a synchronizer token; a page on
   another site can neither read it nor send a custom header without a CORS preflight,
   which this server never answers), and its ``Origin``, when the browser sends one, must
   be this server's own.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from supervisor.views.serve import is_loopback

#: The cookie's name without its token-derived suffix (:func:`cookie_name`).
COOKIE = "supervise_token"
CSRF_HEADER = "x-csrf-token"
_NEED_TOKEN = (
    "token required: open the URL with ?token=... that 'supervise serve' printed, "
    "or send 'Authorization: Bearer T'"
)


@dataclass(frozen=True)
class Access:
    """The access settings of one ``supervise serve``.

    Attributes:
        token: the secret every request needs, or ``None`` (read-only over ``--socket``).
        allow_actions: whether approve, deny, stop and resume are served.
        loopback: whether the server is bound to a loopback address (Host check on).
        csrf: the synchronizer token written into pages (new at each start).
    """

    token: str | None
    allow_actions: bool
    loopback: bool
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(24))


def _headers(scope: dict[str, Any]) -> dict[str, str]:
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", [])}


def host_ok(host_header: str) -> bool:
    """Whether a ``Host`` header (``name[:port]``, ``[v6]:port``) names loopback."""
    host = urlsplit(f"//{host_header}").hostname or ""
    return is_loopback(host)


def cookie_name(token: str) -> str:
    """The cookie that holds ``token``: :data:`COOKIE` plus 12 hex digits of its SHA-256
    (one per server's token; 48 bits of a hash say nothing usable of a 192-bit token)."""
    return f"{COOKIE}_{hashlib.sha256(token.encode()).hexdigest()[:12]}"


def token_of(headers: dict[str, str], name: str = COOKIE) -> str | None:
    """The token a request carries: the bearer token, else the cookie ``name``, else
    ``None``."""
    auth = headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    cookie = SimpleCookie()
    try:
        cookie.load(headers.get("cookie", ""))
    except Exception:  # a malformed Cookie header is no token, never a 500
        return None
    morsel = cookie.get(name)
    return morsel.value if morsel else None


def same(given: str | None, wanted: str) -> bool:
    """Constant-time equality of a presented secret and the wanted one."""
    return given is not None and secrets.compare_digest(given.encode(), wanted.encode())


def csrf_problem(access: Access, headers: dict[str, str]) -> str | None:
    """Why an action request fails the CSRF check (one line), or ``None`` when it passes:
    the ``X-CSRF-Token`` header must equal ``access.csrf`` and an ``Origin`` header, if any,
    must be ``http://`` or ``https://`` (a TLS proxy in front) plus the request's own
    ``Host``."""
    if not same(headers.get(CSRF_HEADER), access.csrf):
        return "missing or wrong X-CSRF-Token header (reload the page)"
    origin = headers.get("origin")
    host = headers.get("host", "")
    if origin is not None and origin not in (f"http://{host}", f"https://{host}"):
        return f"cross-origin request refused (Origin {origin})"
    return None


class AccessMiddleware:
    """The Host and token checks (module docstring, checks 1 and 2) as ASGI middleware."""

    def __init__(self, app: Any, access: Access) -> None:
        self.app = app
        self.access = access

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        if self.access.loopback and not host_ok(headers.get("host", "")):
            await _reply(send, 400, "bad Host header: this server answers only to loopback")
            return
        token = self.access.token
        if token is None:
            await self.app(scope, receive, send)
            return
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"))
        given = [v for k, v in query if k == "token"]
        if given:
            if not same(given[-1], token):
                await _reply(send, 401, "wrong token")
                return
            rest = urlencode([(k, v) for k, v in query if k != "token"])
            location = scope.get("root_path", "") + scope["path"] + (f"?{rest}" if rest else "")
            cookie = f"{cookie_name(token)}={token}; HttpOnly; SameSite=Strict; Path=/"
            await _reply(send, 303, "", [("location", location), ("set-cookie", cookie)])
            return
        if not same(token_of(headers, cookie_name(token)), token):
            await _reply(send, 401, _NEED_TOKEN)
            return
        await self.app(scope, receive, send)


async def _reply(
    send: Any, status: int, text: str, extra: list[tuple[str, str]] | None = None
) -> None:
    body = (text + "\n").encode() if text else b""
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
    ]
    headers += [(k.encode(), v.encode("latin-1")) for k, v in extra or []]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
