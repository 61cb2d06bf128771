"""Who may talk to omray's local web servers (``omray mcp --transport http``, ``omray ui``).

A local TCP port is open to every user of the machine and, through DNS rebinding, to any web page
the user's browser visits; a 0600 database in a 0700 folder is not. So each local web server
checks, in this order, before its application sees a request:

1. **Host** (DNS-rebinding guard): the ``Host`` header must name the address the server is bound
   to (``127.0.0.1:<port>``, ``localhost:<port>``), exactly; anything else is ``421``.
2. **Origin**: when a browser sends one, it must be one of the server's own origins
   (``http://127.0.0.1:<port>``, ``http://localhost:<port>``), exactly; anything else (another
   port, ``null``) is ``403``. Clients that are not browsers send no ``Origin``.
3. **Token**: ``Authorization: Bearer <token>``, or (where the server allows it) the session
   cookie, compared in constant time; anything else is ``401``. The token is a random secret in a
   0600 file under ``$OMRAY_HOME/auth`` (0700), created on first use; only its owner can read it.

For a browser (``omray ui``) the server prints a one-time link (``?token=<link ticket>``; the
ticket is a fresh random value, never the token): the first request with it gets the session cookie
(``HttpOnly``, ``SameSite=Strict``, the token's HMAC rather than the token) and a redirect to the
same URL without the ticket, so it stays out of history, bookmarks and ``Referer``. The ticket is
then spent: the same link again is refused with a page saying so (or, in the browser that holds the
cookie, just redirected). ``POST /auth/link`` with the bearer token (``omray ui --new-link``) issues
another one-time link to the running viewer; the cookie alone never can.

The decision is a pure function (:func:`decide`) of the request's facts and a :class:`GuardPolicy`;
:class:`WebGuard` is the ASGI middleware that applies it. Neither logs anything.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import secrets
import stat
import threading
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qsl, quote, urlencode

from protocol.errors import OmrayError

TOKEN_DIR = "auth"
"""Folder under ``$OMRAY_HOME`` holding the tokens (0700)."""
TOKEN_FILE = "web.token"
"""File name of the token shared by omray's local web servers (0600)."""
TOKEN_BYTES = 32
"""Random bytes in a token (it is their URL-safe base64, 43 characters)."""
TOKEN_RE = re.compile(r"[A-Za-z0-9_-]{32,256}\Z")
"""What a token file may hold (after stripping the final newline)."""
COOKIE_NAME = "omray_session"
"""Name of the session cookie a browser gets in exchange for the token."""
QUERY_PARAM = "token"
"""Query parameter carrying the one-time link ticket in the URL printed for a browser."""
LINK_PATH = "/auth/link"
"""``POST`` here with the bearer token: a new one-time link (browser UIs only)."""
MAX_OPEN_LINKS = 64
"""Most one-time links waiting for their first use; issuing more drops the oldest."""
DIRECTORY_MODE = 0o700
FILE_MODE = 0o600

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class TokenFileError(OmrayError):
    """The token file cannot be created or read safely (wrong owner, mode, kind or content)."""


# ----------------------------------------------------------------------------------- the token file


def default_token_path(home: Path | None = None) -> Path:
    """``$OMRAY_HOME/auth/web.token`` (or under ``home``)."""
    from cluster.naming import omray_home

    return (home if home is not None else omray_home()) / TOKEN_DIR / TOKEN_FILE


def _private_directory(path: Path, tighten: bool = True) -> None:
    """Create ``path`` (and missing parents) 0700; refuse one another user owns. An existing one that
    others may enter is tightened to 0700 only when ``tighten`` (omray's own folder): the folder of a
    token file the user named (their home, a project) is theirs, and its mode is left alone."""
    existed = path.is_dir()
    try:
        path.mkdir(mode=DIRECTORY_MODE, parents=True, exist_ok=True)
        info = path.lstat()
    except OSError as exc:
        raise TokenFileError(f"cannot create {str(path)!r} ({type(exc).__name__})") from None
    if not stat.S_ISDIR(info.st_mode):
        raise TokenFileError(f"{str(path)!r} is not a folder (a symlink or a file); remove it")
    if info.st_uid != os.getuid():
        raise TokenFileError(f"{str(path)!r} belongs to another user; remove it")
    if info.st_mode & 0o077 and (tighten or not existed):
        os.chmod(path, DIRECTORY_MODE)  # ours: tighten it (an older omray, a umask of 022)


def read_token(path: Path) -> str:
    """The token in ``path``; it must be a regular file of this user, 0600 (no symlink)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise TokenFileError(f"cannot read the token file {str(path)!r} ({type(exc).__name__})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise TokenFileError(f"the token file {str(path)!r} is not a regular file; remove it")
        if info.st_uid != os.getuid():
            raise TokenFileError(f"the token file {str(path)!r} belongs to another user; remove it")
        if info.st_mode & 0o077:
            raise TokenFileError(
                f"the token file {str(path)!r} can be read by other users; remove it (a new one is made)"
            )
        data = os.read(fd, 1024)
    finally:
        os.close(fd)
    token = data.decode("ascii", errors="replace").strip()
    if not TOKEN_RE.match(token):
        raise TokenFileError(
            f"the token file {str(path)!r} does not hold a token; remove it (a new one is made)"
        )
    return token


def load_or_create_token(path: Path | None = None) -> str:
    """The token in ``path`` (default :func:`default_token_path`), created on first use.

    Creation is atomic: the token is written to a private temporary file, then linked into place,
    so two servers starting at once agree on one token and no reader ever sees half of it.
    """
    path = path if path is not None else default_token_path()
    own = path.parent == default_token_path().parent
    try:
        return read_token(path)
    except FileNotFoundError:
        pass
    _private_directory(path.parent, tighten=own)
    token = secrets.token_urlsafe(TOKEN_BYTES)
    temporary = path.parent / f".{path.name}.{secrets.token_hex(8)}"
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
        try:
            os.fchmod(fd, FILE_MODE)
            os.write(fd, (token + "\n").encode("ascii"))
            os.fsync(fd)
        finally:
            os.close(fd)
        with contextlib.suppress(FileExistsError):  # another process made it first: its token wins
            os.link(temporary, path)
    except OSError as exc:
        raise TokenFileError(f"cannot create the token file {str(path)!r} ({type(exc).__name__})") from None
    finally:
        temporary.unlink(missing_ok=True)
    return read_token(path)


# ---------------------------------------------------------------------------------------- policy


def loopback_hosts(host: str, port: int) -> tuple[str, ...]:
    """The ``Host`` values naming a server bound to ``host:port``, lower case (a loopback address
    also as ``localhost``; ``localhost`` also as ``127.0.0.1``)."""
    if host in ("127.0.0.1", "localhost"):
        return (f"127.0.0.1:{port}", f"localhost:{port}")
    if host in ("::1", "[::1]"):
        return (f"[::1]:{port}", f"localhost:{port}")
    bound = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return (f"{bound.lower()}:{port}",)


def session_cookie_value(token: str) -> str:
    """The cookie value for ``token``: an HMAC of it, so the cookie jar never holds the token."""
    return hmac.new(token.encode("ascii"), b"omray web session v1", hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class GuardPolicy:
    """What a local web server accepts."""

    allowed_hosts: tuple[str, ...]
    """Exact ``Host`` values (lower case, with port)."""
    allowed_origins: tuple[str, ...]
    """Exact ``Origin`` values a browser may send (``http://host:port``); none for no browser."""
    token: str | None
    """The bearer token; ``None`` serves without authentication (``--no-auth``)."""
    accept_cookie: bool = False
    """Whether the session cookie authenticates (browser UIs)."""
    accept_query_token: bool = False
    """Whether ``GET ...?token=`` is exchanged for the cookie and a redirect (browser UIs)."""
    cookie_name: str = COOKIE_NAME
    """The session cookie's name."""

    @classmethod
    def for_bind(
        cls,
        host: str,
        port: int,
        token: str | None,
        *,
        browser: bool = False,
    ) -> GuardPolicy:
        """The policy of a server bound to ``host:port``: its own host names; its own origins and the
        cookie flow when ``browser`` (a UI), no origin at all otherwise (an API such as MCP)."""
        hosts = loopback_hosts(host, port)
        origins = tuple(f"http://{name}" for name in hosts) if browser else ()
        return cls(hosts, origins, token, accept_cookie=browser, accept_query_token=browser)


@dataclass(frozen=True)
class RequestFacts:
    """What the guard looks at in one request."""

    method: str
    path: str
    query: str
    """The raw query string (decoded as latin-1, as ASGI gives bytes)."""
    headers: Sequence[tuple[str, str]]
    """Header names lower case, values as sent."""

    def header(self, name: str) -> list[str]:
        """Every value of header ``name``."""
        return [value for key, value in self.headers if key == name]


@dataclass(frozen=True)
class Decision:
    """The guard's answer: let the request through, or answer it here."""

    kind: Literal["pass", "refuse", "redirect", "redeem", "issue_link"]
    """``redeem``: spend ``ticket`` (:class:`LinkTickets`), then answer :func:`after_redeem`;
    ``issue_link``: answer a new one-time link."""
    status: int = 200
    error: str = ""
    """Error code of a refusal (``bad_host``, ``bad_origin``, ``unauthorized``, ``link_used``)."""
    message: str = ""
    headers: tuple[tuple[str, str], ...] = field(default=())
    ticket: str = ""
    """The link ticket a ``redeem`` decision spends."""
    page: str = ""
    """An HTML body for a browser (a refused link), instead of the JSON error body."""


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), expected.encode("ascii"))


def _bearer(facts: RequestFacts) -> str | None:
    values = facts.header("authorization")
    if len(values) != 1:
        return None
    scheme, _, credentials = values[0].strip().partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" and credentials.strip() else None


def _cookie(facts: RequestFacts, name: str) -> list[str]:
    from http.cookies import CookieError, SimpleCookie

    found = []
    for raw in facts.header("cookie"):
        jar: SimpleCookie = SimpleCookie()
        try:
            jar.load(raw)
        except CookieError:
            continue
        if name in jar:
            found.append(jar[name].value)
    return found


def _same_site_path(path: str) -> str:
    """``path`` as a redirect target on this server (never ``//host``: no open redirect)."""
    return "/" + quote(path.lstrip("/\\"), safe="/:@!$&'()*+,;=-._~")


def _refuse(status: int, error: str, message: str, *headers: tuple[str, str]) -> Decision:
    return Decision("refuse", status, error, message, headers)


def decide(facts: RequestFacts, policy: GuardPolicy) -> Decision:
    """Whether ``facts`` may pass ``policy``: Host, then Origin, then the token (pure)."""
    hosts = facts.header("host")
    if len(hosts) != 1 or hosts[0].strip().lower() not in policy.allowed_hosts:
        return _refuse(421, "bad_host", "this server answers only to its own address (Host header)")
    origins = facts.header("origin")
    if origins and (len(origins) != 1 or origins[0].strip().lower() not in policy.allowed_origins):
        return _refuse(403, "bad_origin", "requests from this origin are refused (Origin header)")
    if policy.token is None:
        return Decision("pass")
    bearer = _bearer(facts)
    has_token = bearer is not None and _same(bearer, policy.token)
    if policy.accept_query_token and facts.path == LINK_PATH:
        if facts.method == "POST" and has_token:
            return Decision("issue_link")
        return _unauthorized()  # a cookie never mints links: only the token file's owner does
    if has_token:
        return Decision("pass")
    if policy.accept_query_token and facts.method in ("GET", "HEAD"):
        given = [value for key, value in parse_qsl(facts.query, keep_blank_values=True) if key == QUERY_PARAM]
        if len(given) == 1:
            return Decision("redeem", ticket=given[0])
    if _has_session_cookie(facts, policy):
        return Decision("pass")
    return _unauthorized()


def _unauthorized() -> Decision:
    return _refuse(
        401,
        "unauthorized",
        "a bearer token is required (the token file under $OMRAY_HOME/auth; `omray integrate` wires it in)",
        ("www-authenticate", 'Bearer realm="omray"'),
    )


def _has_session_cookie(facts: RequestFacts, policy: GuardPolicy) -> bool:
    if not policy.accept_cookie or policy.token is None:
        return False
    expected = session_cookie_value(policy.token)
    return any(_same(value, expected) for value in _cookie(facts, policy.cookie_name))


TicketState = Literal["fresh", "used", "unknown"]
"""What redeeming a link ticket found: first use, already spent, or never issued here."""

_LINK_USED_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>omray: link already used</title></head>
<body><h1>This viewer link was already used</h1>
<p>Each link <code>omray ui</code> prints opens the viewer once, in one browser, which then keeps
a session cookie: in that browser, open <a href="/">the viewer</a> without the link.</p>
<p>For another browser, get a new link: <code>omray ui --new-link</code> (with the viewer's
<code>--port</code>).</p></body></html>
"""
_LINK_UNKNOWN_PAGE = _LINK_USED_PAGE.replace("was already used", "is not valid here").replace(
    "link already used", "link not valid"
)


def after_redeem(facts: RequestFacts, policy: GuardPolicy, state: TicketState) -> Decision:
    """The answer to a ``redeem`` decision once its ticket was spent (pure): a fresh ticket gets the
    cookie and a redirect without it; a spent or unknown one is refused with a page saying so,
    unless the request already holds the session cookie (then only the redirect)."""
    pairs = parse_qsl(facts.query, keep_blank_values=True)
    rest = urlencode([(key, value) for key, value in pairs if key != QUERY_PARAM])
    location = _same_site_path(facts.path) + (f"?{rest}" if rest else "")
    clean = (("location", location), ("cache-control", "no-store"), ("referrer-policy", "no-referrer"))
    if state == "fresh" and policy.token is not None:
        cookie = (
            f"{policy.cookie_name}={session_cookie_value(policy.token)}; HttpOnly; SameSite=Strict; Path=/"
        )
        return Decision("redirect", 303, headers=(*clean, ("set-cookie", cookie)))
    if _has_session_cookie(facts, policy):
        return Decision("redirect", 303, headers=clean)
    used = state == "used"
    return Decision(
        "refuse",
        410 if used else 401,
        "link_used" if used else "unauthorized",
        "this one-time viewer link was already used; `omray ui --new-link` prints a new one"
        if used
        else "this viewer link is not valid; `omray ui --new-link` prints a new one",
        headers=(("cache-control", "no-store"), ("referrer-policy", "no-referrer")),
        page=_LINK_USED_PAGE if used else _LINK_UNKNOWN_PAGE,
    )


class LinkTickets:
    """The one-time link tickets of one browser UI server: each issued ticket redeems ``fresh``
    exactly once, then ``used``; anything never issued is ``unknown``.

    Thread-safe (issue and redeem are atomic under one lock), so two requests racing with one link
    never both get the cookie. Only SHA-256 digests of tickets are kept. At most
    :data:`MAX_OPEN_LINKS` unspent tickets wait; issuing more forgets the oldest.
    """

    def __init__(self, new_ticket: Callable[[], str] | None = None) -> None:
        self._new_ticket = new_ticket or (lambda: secrets.token_urlsafe(TOKEN_BYTES))
        self._open: dict[bytes, None] = {}  # insertion-ordered: the oldest first
        self._spent: set[bytes] = set()
        self._lock = threading.Lock()

    def issue(self) -> str:
        """A new ticket, valid for one use."""
        ticket = self._new_ticket()
        with self._lock:
            self._open[_digest(ticket)] = None
            while len(self._open) > MAX_OPEN_LINKS:
                del self._open[next(iter(self._open))]
        return ticket

    def redeem(self, ticket: str) -> TicketState:
        """Spend ``ticket``: ``fresh`` the first time, ``used`` after, ``unknown`` if never issued."""
        digest = _digest(ticket)
        with self._lock:
            if digest in self._open:
                del self._open[digest]
                self._spent.add(digest)
                return "fresh"
            return "used" if digest in self._spent else "unknown"


def _digest(ticket: str) -> bytes:
    return hashlib.sha256(ticket.encode("utf-8", "surrogateescape")).digest()


# --------------------------------------------------------------------------------- the middleware


class WebGuard:
    """ASGI middleware applying :func:`decide` to every HTTP and WebSocket request of ``app``.

    Lifespan events pass untouched. A refused HTTP request gets a small JSON body
    (``{"error", "message"}``); a refused WebSocket is closed (1008) before it is accepted.
    """

    def __init__(self, app: ASGIApp, policy: GuardPolicy, links: LinkTickets | None = None) -> None:
        self.app = app
        self.policy = policy
        self.links = links if links is not None else LinkTickets()
        """The one-time link tickets this server redeems and issues (browser policies)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        facts = RequestFacts(
            method=str(scope.get("method", "GET")).upper(),
            path=str(scope.get("path", "/")),
            query=bytes(scope.get("query_string", b"")).decode("latin-1"),
            headers=[
                (bytes(name).decode("latin-1").lower(), bytes(value).decode("latin-1"))
                for name, value in scope.get("headers", [])
            ],
        )
        decision = decide(facts, self.policy)
        if decision.kind == "redeem":
            decision = after_redeem(facts, self.policy, self.links.redeem(decision.ticket))
        if decision.kind == "issue_link" and scope["type"] == "http":
            url = url_with_token(f"http://{self.policy.allowed_hosts[0]}/", self.links.issue())
            await _respond_json(send, 200, {"url": url})
        elif decision.kind == "pass":
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
        else:
            await _respond(send, decision)


async def _respond(send: Send, decision: Decision) -> None:
    body = b""
    headers: list[tuple[bytes, bytes]] = [
        (k.encode("latin-1"), v.encode("latin-1")) for k, v in decision.headers
    ]
    if decision.kind == "refuse" and decision.page:
        body = decision.page.encode("utf-8")
        headers.append((b"content-type", b"text/html; charset=utf-8"))
    elif decision.kind == "refuse":
        body = json.dumps({"error": decision.error, "message": decision.message}).encode("utf-8")
        headers.append((b"content-type", b"application/json"))
    headers.append((b"content-length", str(len(body)).encode("ascii")))
    await send({"type": "http.response.start", "status": decision.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _respond_json(send: Send, status: int, data: Any) -> None:
    body = json.dumps(data).encode("utf-8")
    headers = [
        (b"content-type", b"application/json"),
        (b"cache-control", b"no-store"),
        (b"content-length", str(len(body)).encode("ascii")),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def url_with_token(base_url: str, token: str) -> str:
    """``base_url`` with ``token`` (a one-time link ticket) as its query: the URL a UI prints."""
    separator = "&" if "?" in base_url else "?"
    return f"{base_url}{separator}{urlencode({QUERY_PARAM: token})}"
