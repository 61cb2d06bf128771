"""``cluster.servers.web_auth``: the token file, the pure Host/Origin/token decision, and the ASGI guard
(driven by Starlette's test client; the real server and the real MCP client are in
tests/integration/test_mcp_auth.py)."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from cluster.servers.web_auth import (
    COOKIE_NAME,
    LINK_PATH,
    MAX_OPEN_LINKS,
    TOKEN_RE,
    GuardPolicy,
    LinkTickets,
    RequestFacts,
    TicketState,
    TokenFileError,
    WebGuard,
    after_redeem,
    decide,
    default_token_path,
    load_or_create_token,
    loopback_hosts,
    read_token,
    session_cookie_value,
    url_with_token,
)

TOKEN = "t" * 43
BASE = "http://127.0.0.1:8766"


# ----------------------------------------------------------------------------------- token file


def test_token_file_is_created_once_private_and_reused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = default_token_path(home)
    token = load_or_create_token(path)
    assert path == home / "auth" / "web.token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert len(token) >= 43
    assert load_or_create_token(path) == token  # the same on every later start
    assert read_token(path) == token
    assert [p.name for p in path.parent.iterdir()] == ["web.token"]  # no temporary file left


def test_concurrent_first_starts_agree_on_one_token(tmp_path: Path) -> None:
    path = tmp_path / "auth" / "web.token"
    tokens: list[str] = []
    barrier = threading.Barrier(8)

    def start() -> None:
        barrier.wait()
        tokens.append(load_or_create_token(path))

    threads = [threading.Thread(target=start) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(tokens) == 8 and len(set(tokens)) == 1
    assert read_token(path) == tokens[0]


def test_omrays_own_token_folder_others_may_enter_is_tightened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMRAY_HOME", str(tmp_path))
    folder = tmp_path / "auth"
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    load_or_create_token()
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


@pytest.mark.parametrize("kind", ["readable", "symlink", "fifo", "garbage", "folder"])
def test_an_unsafe_token_file_is_refused_with_a_reason(tmp_path: Path, kind: str) -> None:
    folder = tmp_path / "auth"
    folder.mkdir(mode=0o700)
    path = folder / "web.token"
    if kind == "readable":
        path.write_text(TOKEN + "\n")
        os.chmod(path, 0o644)
    elif kind == "symlink":
        target = tmp_path / "elsewhere"
        target.write_text(TOKEN)
        os.chmod(target, 0o600)
        path.symlink_to(target)
    elif kind == "fifo":
        os.mkfifo(path, 0o600)
    elif kind == "garbage":
        path.write_text("not a token!\n")
        os.chmod(path, 0o600)
    else:
        path.mkdir()
    with pytest.raises(TokenFileError) as raised:
        load_or_create_token(path)
    assert str(path) in str(raised.value)
    if kind == "readable":
        assert TOKEN not in str(raised.value)


# -------------------------------------------------------------------------------------- decide


def _facts(
    *headers: tuple[str, str], method: str = "POST", path: str = "/mcp", query: str = ""
) -> RequestFacts:
    return RequestFacts(method, path, query, list(headers))


MCP = GuardPolicy.for_bind("127.0.0.1", 8766, TOKEN)
UI = GuardPolicy.for_bind("127.0.0.1", 8766, TOKEN, browser=True)
HOST = ("host", "127.0.0.1:8766")
AUTH = ("authorization", f"Bearer {TOKEN}")


def test_loopback_hosts_are_exact_with_their_port() -> None:
    assert loopback_hosts("127.0.0.1", 8766) == ("127.0.0.1:8766", "localhost:8766")
    assert loopback_hosts("::1", 9) == ("[::1]:9", "localhost:9")
    assert loopback_hosts("10.0.0.5", 80) == ("10.0.0.5:80",)


def test_the_right_token_passes_and_anything_else_is_401() -> None:
    assert decide(_facts(HOST, AUTH), MCP).kind == "pass"
    assert (
        decide(_facts(("host", "LOCALHOST:8766"), ("authorization", f"bearer {TOKEN}")), MCP).kind == "pass"
    )
    for headers in [
        (HOST,),
        (HOST, ("authorization", f"Bearer {TOKEN}x")),
        (HOST, ("authorization", f"Basic {TOKEN}")),
        (HOST, ("authorization", TOKEN)),
        (HOST, ("authorization", "Bearer ")),
        (HOST, AUTH, AUTH),  # two Authorization headers: ambiguous
        (HOST, ("cookie", f"{COOKIE_NAME}={session_cookie_value(TOKEN)}")),  # MCP takes no cookie
    ]:
        decision = decide(_facts(*headers), MCP)
        assert (decision.kind, decision.status, decision.error) == ("refuse", 401, "unauthorized"), headers
        assert ("www-authenticate", 'Bearer realm="omray"') in decision.headers
        assert TOKEN not in decision.message


@given(st.text(min_size=1, max_size=80))
def test_no_other_bearer_value_passes(value: str) -> None:
    decision = decide(_facts(HOST, ("authorization", f"Bearer {value}")), MCP)
    assert decision.kind == ("pass" if value.strip() == TOKEN else "refuse")


def test_a_foreign_host_is_421_even_with_the_token() -> None:
    for host in ["evil.example:8766", "127.0.0.1:8767", "127.0.0.1", "localhost", "0.0.0.0:8766", ""]:
        decision = decide(_facts(("host", host), AUTH), MCP)
        assert (decision.status, decision.error) == (421, "bad_host"), host
    assert decide(_facts(AUTH), MCP).status == 421  # no Host at all
    assert decide(_facts(HOST, HOST, AUTH), MCP).status == 421  # two Hosts


def test_origin_is_exact_own_origins_for_a_ui_none_for_mcp() -> None:
    own = ("origin", "http://127.0.0.1:8766")
    assert decide(_facts(HOST, AUTH, own), UI).kind == "pass"
    assert decide(_facts(HOST, AUTH, ("origin", "http://localhost:8766")), UI).kind == "pass"
    for origin in [
        "http://localhost:3000",  # another local port: not the server's own
        "http://127.0.0.1:8767",
        "https://127.0.0.1:8766",
        "http://evil.example",
        "null",
        "",
    ]:
        decision = decide(_facts(HOST, AUTH, ("origin", origin)), UI)
        assert (decision.status, decision.error) == (403, "bad_origin"), origin
    assert decide(_facts(HOST, AUTH, own), MCP).status == 403  # no browser talks to MCP


def test_no_auth_still_checks_host_and_origin() -> None:
    open_policy = GuardPolicy.for_bind("127.0.0.1", 8766, None)
    assert decide(_facts(HOST), open_policy).kind == "pass"
    assert decide(_facts(("host", "evil.example:8766")), open_policy).status == 421
    assert decide(_facts(HOST, ("origin", "http://evil.example")), open_policy).status == 403


def test_a_fresh_link_ticket_becomes_a_cookie_and_a_redirect_without_it() -> None:
    facts = _facts(HOST, method="GET", path="/sessions", query="a=1&token=ticket-1&b=2")
    first = decide(facts, UI)
    assert (first.kind, first.ticket) == ("redeem", "ticket-1")
    decision = after_redeem(facts, UI, "fresh")
    assert (decision.kind, decision.status) == ("redirect", 303)
    headers = dict(decision.headers)
    assert headers["location"] == "/sessions?a=1&b=2"
    cookie = headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE_NAME}={session_cookie_value(TOKEN)};")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and TOKEN not in cookie
    assert headers["referrer-policy"] == "no-referrer"
    with_cookie = _facts(HOST, ("cookie", f"x=1; {COOKIE_NAME}={session_cookie_value(TOKEN)}"), method="GET")
    assert decide(with_cookie, UI).kind == "pass"
    # a POST, or the MCP policy: no link flow
    assert decide(_facts(HOST, method="POST", query=f"token={TOKEN}"), UI).status == 401
    assert decide(_facts(HOST, method="GET", query=f"token={TOKEN}"), MCP).status == 401
    assert decide(_facts(HOST, ("cookie", f"{COOKIE_NAME}={TOKEN}"), method="GET"), UI).status == 401


@pytest.mark.parametrize(
    ("state", "cookie", "status", "error", "sets_cookie"),
    [
        ("fresh", False, 303, "", True),
        ("used", False, 410, "link_used", False),
        ("unknown", False, 401, "unauthorized", False),
        ("used", True, 303, "", False),  # the browser that spent it: only the clean redirect
        ("unknown", True, 303, "", False),
    ],
)
def test_a_spent_or_unknown_link_is_refused_with_a_page(
    state: TicketState, cookie: bool, status: int, error: str, sets_cookie: bool
) -> None:
    headers = [HOST] + ([("cookie", f"{COOKIE_NAME}={session_cookie_value(TOKEN)}")] if cookie else [])
    decision = after_redeem(_facts(*headers, method="GET", path="/", query="token=x"), UI, state)
    assert (decision.status, decision.error) == (status, error)
    assert ("set-cookie" in dict(decision.headers)) == sets_cookie
    if status == 303:
        assert dict(decision.headers)["location"] == "/"
    else:
        assert "omray ui --new-link" in decision.page and TOKEN not in decision.page


def test_only_the_bearer_token_asks_for_a_new_link() -> None:
    assert decide(_facts(HOST, AUTH, path=LINK_PATH), UI).kind == "issue_link"
    cookie = ("cookie", f"{COOKIE_NAME}={session_cookie_value(TOKEN)}")
    assert decide(_facts(HOST, cookie, path=LINK_PATH), UI).status == 401
    assert decide(_facts(HOST, AUTH, method="GET", path=LINK_PATH), UI).status == 401
    assert decide(_facts(HOST, AUTH, path=LINK_PATH), MCP).kind == "pass"  # no links on MCP: its own app


def test_the_redirect_never_leaves_the_server() -> None:
    facts = _facts(HOST, method="GET", path="//evil.example/x", query="token=t1")
    decision = after_redeem(facts, UI, "fresh")
    assert dict(decision.headers)["location"] == "/evil.example/x"


def test_link_tickets_redeem_once() -> None:
    links = LinkTickets()
    first, second = links.issue(), links.issue()
    assert first != second and TOKEN_RE.match(first)
    assert [links.redeem(first), links.redeem(first), links.redeem(second)] == ["fresh", "used", "fresh"]
    assert links.redeem("never-issued") == "unknown"
    crowd = LinkTickets()
    oldest = crowd.issue()
    for _ in range(MAX_OPEN_LINKS):
        crowd.issue()
    assert crowd.redeem(oldest) == "unknown"  # the oldest unspent link was dropped


@settings(deadline=None)  # threads race here: on a loaded machine one example may take a second
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 7)), max_size=40), st.integers(1, 4))
def test_each_issued_link_is_fresh_exactly_once_under_racing_redeems(
    ops: list[tuple[bool, int]], racers: int
) -> None:
    links = LinkTickets()
    issued: list[str] = []
    fresh: list[str] = []
    lock = threading.Lock()
    for issue, pick in ops:
        if issue or not issued:
            issued.append(links.issue())
            continue
        ticket = issued[pick % len(issued)]

        def redeem(ticket: str = ticket) -> None:
            if links.redeem(ticket) == "fresh":
                with lock:
                    fresh.append(ticket)

        threads = [threading.Thread(target=redeem) for _ in range(racers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert len(fresh) == len(set(fresh))  # never two cookies for one link
    assert set(fresh) <= set(issued)
    for ticket in issued:
        assert links.redeem(ticket) == "used" or ticket not in fresh


def test_url_with_token() -> None:
    assert url_with_token(f"{BASE}/", TOKEN) == f"{BASE}/?token={TOKEN}"
    assert url_with_token(f"{BASE}/?a=1", TOKEN) == f"{BASE}/?a=1&token={TOKEN}"


# ---------------------------------------------------------------------------------- middleware


def _app(policy: GuardPolicy, links: LinkTickets | None = None) -> TestClient:
    async def hello(request: Request) -> PlainTextResponse:
        return PlainTextResponse("memory")

    inner = Starlette(routes=[Route("/", hello, methods=["GET", "POST"]), Route("/x", hello)])
    return TestClient(WebGuard(inner, policy, links), base_url=BASE, follow_redirects=False)


def test_middleware_refuses_before_the_app_and_passes_the_right_token() -> None:
    client = _app(MCP)
    refused = client.post("/")
    assert refused.status_code == 401 and refused.json()["error"] == "unauthorized"
    assert "memory" not in refused.text
    assert client.post("/", headers={"authorization": f"Bearer {TOKEN}"}).text == "memory"
    foreign = client.post(
        "/", headers={"authorization": f"Bearer {TOKEN}", "origin": "http://localhost:1234"}
    )
    assert foreign.status_code == 403 and foreign.json()["error"] == "bad_origin"
    rebound = client.post("/", headers={"authorization": f"Bearer {TOKEN}", "host": "evil.example:8766"})
    assert rebound.status_code == 421


def test_middleware_browser_flow_sets_the_cookie_and_drops_the_token() -> None:
    links = LinkTickets()
    client = _app(UI, links)
    assert client.get("/x").status_code == 401
    ticket = links.issue()
    first = client.get(f"/x?token={ticket}")
    assert first.status_code == 303 and first.headers["location"] == "/x"
    assert ticket not in first.headers["location"]
    assert client.cookies.get(COOKIE_NAME) == session_cookie_value(TOKEN)
    assert client.get("/x").text == "memory"  # the cookie alone now


def test_the_link_works_once_and_the_cookie_keeps_working() -> None:
    links = LinkTickets()
    ticket = links.issue()
    browser = _app(UI, links)
    assert browser.get(f"/x?token={ticket}").status_code == 303
    again = _app(UI, links).get(f"/x?token={ticket}")  # another browser, the same link
    assert again.status_code == 410 and "text/html" in again.headers["content-type"]
    assert "already used" in again.text and "omray ui --new-link" in again.text and "memory" not in again.text
    assert "set-cookie" not in again.headers
    assert browser.get(f"/x?token={ticket}").headers["location"] == "/x"  # the cookie holder: redirected
    assert browser.get("/x").text == "memory"
    # the long-lived token itself never opens the viewer from a URL
    stolen = _app(UI, links).get(f"/x?token={TOKEN}")
    assert stolen.status_code == 401 and "set-cookie" not in stolen.headers


def test_a_new_link_is_issued_to_the_bearer_and_works_once() -> None:
    links = LinkTickets()
    client = _app(UI, links)
    assert client.post(LINK_PATH).status_code == 401
    answer = client.post(LINK_PATH, headers={"authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 200 and answer.headers["cache-control"] == "no-store"
    url = answer.json()["url"]
    assert url.startswith(f"{BASE}/?token=") and TOKEN not in url
    path = url.removeprefix(BASE)
    assert _app(UI, links).get(path).status_code == 303
    assert _app(UI, links).get(path).status_code == 410


def test_a_named_token_file_leaves_the_mode_of_its_existing_folder_alone(tmp_path: Path) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    folder.chmod(0o755)
    token = load_or_create_token(folder / "web.token")
    assert token and (folder / "web.token").stat().st_mode & 0o777 == 0o600
    assert folder.stat().st_mode & 0o777 == 0o755
    with pytest.raises(TokenFileError):
        load_or_create_token(folder)  # a folder is no token file, and is not chmod-ed either
    assert folder.stat().st_mode & 0o777 == 0o755
