"""``cluster.servers.web_auth``: the token file, the pure Host/Origin/token decision, and the ASGI guard
(driven by Starlette's test client; the real server and the real MCP client are in
tests/integration/test_mcp_auth.py)."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from cluster.servers.web_auth import (
    COOKIE_NAME,
    GuardPolicy,
    RequestFacts,
    TokenFileError,
    WebGuard,
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


def test_query_token_becomes_a_cookie_and_a_redirect_without_it() -> None:
    decision = decide(_facts(HOST, method="GET", path="/sessions", query=f"a=1&token={TOKEN}&b=2"), UI)
    assert (decision.kind, decision.status) == ("redirect", 303)
    headers = dict(decision.headers)
    assert headers["location"] == "/sessions?a=1&b=2"
    cookie = headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE_NAME}={session_cookie_value(TOKEN)};")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and TOKEN not in cookie
    assert headers["referrer-policy"] == "no-referrer"
    with_cookie = _facts(HOST, ("cookie", f"x=1; {COOKIE_NAME}={session_cookie_value(TOKEN)}"), method="GET")
    assert decide(with_cookie, UI).kind == "pass"
    # a wrong query token, a POST, or the MCP policy: no cookie
    assert decide(_facts(HOST, method="GET", query="token=wrong"), UI).status == 401
    assert decide(_facts(HOST, method="POST", query=f"token={TOKEN}"), UI).status == 401
    assert decide(_facts(HOST, method="GET", query=f"token={TOKEN}"), MCP).status == 401
    assert decide(_facts(HOST, ("cookie", f"{COOKIE_NAME}={TOKEN}"), method="GET"), UI).status == 401


def test_the_redirect_never_leaves_the_server() -> None:
    decision = decide(_facts(HOST, method="GET", path="//evil.example/x", query=f"token={TOKEN}"), UI)
    assert dict(decision.headers)["location"] == "/evil.example/x"


def test_url_with_token() -> None:
    assert url_with_token(f"{BASE}/", TOKEN) == f"{BASE}/?token={TOKEN}"
    assert url_with_token(f"{BASE}/?a=1", TOKEN) == f"{BASE}/?a=1&token={TOKEN}"


# ---------------------------------------------------------------------------------- middleware


def _app(policy: GuardPolicy) -> TestClient:
    async def hello(request: Request) -> PlainTextResponse:
        return PlainTextResponse("memory")

    inner = Starlette(routes=[Route("/", hello, methods=["GET", "POST"]), Route("/x", hello)])
    return TestClient(WebGuard(inner, policy), base_url=BASE, follow_redirects=False)


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
    client = _app(UI)
    assert client.get("/x").status_code == 401
    first = client.get(f"/x?token={TOKEN}")
    assert first.status_code == 303 and first.headers["location"] == "/x"
    assert TOKEN not in first.headers["location"]
    assert client.cookies.get(COOKIE_NAME) == session_cookie_value(TOKEN)
    assert client.get("/x").text == "memory"  # the cookie alone now


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
