"""``omray ui`` in a real headless Chromium, over a project two sessions of which a real runtime observed.

The runtime runs on the shared Ray cluster (the offline ``builtin/extractive`` model, hybrid search
with the offline embedder); the viewer is the real app behind the real web guard, served by uvicorn
on a free port; the browser is Debian's Chromium driven through ChromeDriver. With
``OMRAY_UI_SCREENSHOT=1`` the session timeline's screenshot is written to ``docs/ui-timeline.png``
(the README shows it).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster.client import OmrayClient
from cluster.commands.demo_session import commit_turn, demo_session
from cluster.commands.ui_cli import QueuePoller
from cluster.named_actors import DEFAULT_HANDLERS, ensure_runtime
from cluster.naming import RuntimeNames
from cluster.servers.ui_server import UiBackend, guarded_app, load_project
from cluster.servers.web_auth import LinkTickets, url_with_token
from tests.integration.conftest import ClusterInfo, assert_eventually, free_port

pytestmark = pytest.mark.integration

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "ui-timeline.png"
TOKEN = "t" * 43
SESSIONS = ("s-invoices", "s-short")
QUERY = "parse_date"
SETTINGS = {
    "model": "builtin/extractive",
    "storage": {"database": "om.sqlite"},
    # As in `omray demo`: low thresholds, so the Reflector and the Dropper run on a small session.
    "reflector": {"reflect_after_observation_tokens": 200},
    "pools": {"observations_max_tokens": 200},
    "semantic": {"embedding_api": {"model_id": "builtin/all-minilm-l6-v2"}},
}


@dataclass
class Viewer:
    """The running viewer over the observed project."""

    url: str
    project: Path
    client: OmrayClient
    links: LinkTickets

    def link(self) -> str:
        """A new one-time link to the viewer's first page."""
        return url_with_token(f"{self.url}/", self.links.issue())


def _observe(client: OmrayClient, project: Path) -> None:
    """Session one: the whole demo session; session two: its first two turns."""
    for session, turns in (
        (SESSIONS[0], demo_session(SESSIONS[0])),
        (SESSIONS[1], demo_session(SESSIONS[1])[:2]),
    ):
        events = client.events_path(session)
        client.session_started(session)
        for number, turn in enumerate(turns, start=1):
            context = commit_turn(events, turn, session_end=number == len(turns))
            assert client.after_turn_commit(context, events_path=events) is not None


@pytest.fixture(scope="module")
def viewer(ray_cluster: ClusterInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Viewer]:
    import uvicorn

    from cluster.named_actors import remove_runtime

    project = tmp_path_factory.mktemp("ui-project")
    (project / "omray.yaml").write_text(yaml.safe_dump({"observational_memory": SETTINGS}), encoding="utf-8")
    names = RuntimeNames(prefix=f"tui{os.getpid() % 100000}")
    ensure_runtime(names, queue_db=str(project / "queue.sqlite"), handler_paths=DEFAULT_HANDLERS)
    settings_file = project / "omray.yaml"
    client = OmrayClient(
        names,
        settings={**SETTINGS, "storage": {"database": str(project / "om.sqlite")}},
        cwd=project,
        settings_file=settings_file,
    )
    poller = QueuePoller(client.link, interval_s=0.25).start()
    server: uvicorn.Server | None = None
    thread: threading.Thread | None = None
    try:
        _observe(client, project)
        assert client.wait_idle(timeout_s=180)
        backend = UiBackend({"ui-project": load_project(project, "ui-project", client)}, poller)
        port = free_port()
        links = LinkTickets()
        app = guarded_app(backend, "127.0.0.1", port, TOKEN, links)
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        assert_eventually(lambda: server is not None and server.started, timeout_s=30)
        yield Viewer(f"http://127.0.0.1:{port}", project, client, links)
    finally:
        if server is not None:
            server.should_exit = True
        if thread is not None:
            thread.join(timeout=10)
        poller.stop()
        remove_runtime(names)


def _request(
    url: str, headers: dict[str, str] | None = None, body: dict[str, Any] | None = None
) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers=headers or {})
    if body is not None:
        request.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def test_requests_without_the_token_or_from_a_foreign_origin_are_refused(viewer: Viewer) -> None:
    bearer = {"authorization": f"Bearer {TOKEN}"}
    assert _request(f"{viewer.url}/api/projects")[0] == 401
    assert _request(f"{viewer.url}/api/projects", {"authorization": "Bearer wrong"})[0] == 401
    search = {"query": QUERY, "mode": "exact"}
    assert _request(f"{viewer.url}/api/search", body=search)[0] == 401
    status, answer = _request(f"{viewer.url}/api/search", {**bearer, "origin": "http://evil.example"}, search)
    assert status == 403 and answer["error"] == "bad_origin"
    status, answer = _request(f"{viewer.url}/api/projects", bearer)
    assert status == 200
    assert {s["session_id"] for s in answer["projects"][0]["sessions"]} == set(SESSIONS)


def _browser(profile: Path) -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--window-size=1500,1100",
    ):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)


def test_the_page_lists_sessions_opens_one_searches_and_recalls(viewer: Viewer, tmp_path: Path) -> None:
    if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
        pytest.skip("needs Debian's chromium and chromium-driver (`.ci/run` installs them)")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    driver = _browser(tmp_path / "chromium-profile")
    try:
        driver.set_page_load_timeout(60)
        # The URL carries the token once; the page lands without it, on a cookie.
        driver.get(viewer.link())
        assert "token" not in driver.current_url
        links = assert_eventually(
            lambda: driver.find_elements(By.CSS_SELECTOR, "a.session-link"), timeout_s=30, interval_s=0.2
        )
        assert sorted(link.text for link in links) == sorted(SESSIONS)
        # The live queue line refreshes by itself.
        assert_eventually(lambda: "queue depth" in driver.find_element(By.ID, "queue").text, timeout_s=30)

        next(link for link in links if link.text == SESSIONS[0]).click()
        projection = assert_eventually(
            lambda: [e for e in driver.find_elements(By.ID, "projection") if e.text.strip()], timeout_s=30
        )[0]
        assert projection.text.strip() == viewer.client.project(SESSIONS[0]).strip()
        observations = driver.find_elements(By.CSS_SELECTOR, ".part .observation")
        assert observations, "the timeline shows no observation"
        assert driver.find_elements(By.CSS_SELECTOR, ".part .events li")
        body = driver.find_element(By.TAG_NAME, "body").text
        assert "Compaction text" in body
        assert driver.find_elements(By.CSS_SELECTOR, ".generation .badge.active")
        assert driver.find_elements(By.CSS_SELECTOR, ".generation .reflection")
        time.sleep(0.3)  # let the layout settle for the screenshot
        driver.save_screenshot(str(tmp_path / "timeline.png"))
        if os.environ.get("OMRAY_UI_SCREENSHOT") == "1":
            shutil.copyfile(tmp_path / "timeline.png", SCREENSHOT)

        driver.get(f"{viewer.url}/#/search")
        field = assert_eventually(lambda: driver.find_elements(By.ID, "search-input"), timeout_s=30)[0]
        for mode in ("hybrid", "exact"):
            field.clear()
            field.send_keys(QUERY)
            Select(driver.find_element(By.ID, "search-mode")).select_by_value(mode)
            driver.find_element(By.ID, "search-button").click()
            assert_eventually(
                lambda selector=f"#result-count[data-mode='{mode}']": driver.find_elements(
                    By.CSS_SELECTOR, selector
                ),
                timeout_s=30,
            )
            results = driver.find_elements(By.CSS_SELECTOR, "#results .result")
            assert results, mode
            excerpts = driver.find_elements(By.CSS_SELECTOR, "#results .result .excerpt")
            assert excerpts and all(e.text.startswith("events ") for e in excerpts)
        expected = viewer.client.memory_search({"query": QUERY, "mode": "exact"})
        shown = [r.get_attribute("data-id") for r in results]
        assert shown == [r["id"] for r in expected["results"]]
        observation = next(r for r in results if r.get_attribute("data-kind") == "observation")
        memory_id = observation.get_attribute("data-id")
        observation.find_element(By.CSS_SELECTOR, "a.recall-link").click()
        events = assert_eventually(
            lambda: driver.find_elements(By.CSS_SELECTOR, "#recall-events .recall-event"), timeout_s=30
        )
        session = next(r["session_id"] for r in expected["results"] if r["id"] == memory_id)
        recalled = viewer.client.recall(session, {"id": memory_id})
        assert [int(e.get_attribute("data-seq")) for e in events] == [e["seq"] for e in recalled["events"]]
    finally:
        driver.quit()


def test_reobserve_goes_through_the_runtime(viewer: Viewer) -> None:
    bearer = {"authorization": f"Bearer {TOKEN}"}
    status, answer = _request(f"{viewer.url}/api/observe", bearer, {"session_id": SESSIONS[1], "end_seq": 3})
    assert status == 200 and answer["ok"] is True and len(answer["job_id"]) == 64
    assert viewer.client.wait_idle(timeout_s=60)
    status, answer = _request(f"{viewer.url}/api/observe", bearer, {"session_id": "../x", "end_seq": 3})
    assert status == 400 and answer["error"] == "invalid_session_id"


def test_forget_from_the_page_removes_it_from_search_and_the_projection(
    viewer: Viewer, tmp_path: Path
) -> None:
    if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
        pytest.skip("needs Debian's chromium and chromium-driver (`.ci/run` installs them)")
    from selenium.webdriver.common.by import By

    before = viewer.client.memory_search({"query": QUERY, "mode": "exact", "scope": [SESSIONS[1]]})
    target = next(r for r in before["results"] if r["kind"] == "observation")
    assert target["display_id"] in viewer.client.project(SESSIONS[1])
    driver = _browser(tmp_path / "chromium-profile")
    try:
        driver.get(viewer.link())
        driver.get(f"{viewer.url}/#/search")
        field = assert_eventually(lambda: driver.find_elements(By.ID, "search-input"), timeout_s=30)[0]
        field.send_keys(QUERY)
        driver.find_element(By.ID, "search-session").send_keys(SESSIONS[1])
        driver.find_element(By.ID, "search-button").click()
        hit = assert_eventually(
            lambda: driver.find_elements(By.CSS_SELECTOR, f"#results .result[data-id='{target['id']}']"),
            timeout_s=30,
        )[0]
        hit.find_element(By.CSS_SELECTOR, "button.forget-button").click()
        # A confirm step first: nothing is forgotten until it is answered.
        confirm = assert_eventually(lambda: driver.find_elements(By.ID, "confirm-forget"), timeout_s=10)[0]
        still = viewer.client.memory_search({"query": QUERY, "mode": "exact", "scope": [SESSIONS[1]]})
        assert target["id"] in {r["id"] for r in still["results"]}
        confirm.click()

        def gone() -> bool:
            shown = driver.find_elements(By.CSS_SELECTOR, "#results .result")
            count = driver.find_elements(By.ID, "result-count")
            return bool(count) and all(r.get_attribute("data-id") != target["id"] for r in shown)

        assert_eventually(gone, timeout_s=60, interval_s=0.5, message="the forgotten memory is still listed")
    finally:
        driver.quit()
    for mode in ("exact", "hybrid"):
        after = viewer.client.memory_search({"query": QUERY, "mode": mode})
        assert target["id"] not in {r["id"] for r in after.get("results", [])}
    assert target["display_id"] not in viewer.client.project(SESSIONS[1])


def test_the_command_prints_a_token_url_and_serves_read_only_without_a_runtime(tmp_path: Path) -> None:
    import subprocess
    import sys

    project = tmp_path / "project"
    project.mkdir()
    (project / "omray.yaml").write_text(
        "observational_memory:\n  storage:\n    database: om.sqlite\n  semantic: null\n", encoding="utf-8"
    )
    home = tmp_path / "home"
    port = free_port()
    env = {
        **os.environ,
        "OMRAY_HOME": str(home),
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    }
    env.pop("RAY_ADDRESS", None)
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "omray"), "ui", "--project", str(project), "--port", str(port)],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        env=env,
        text=True,
    )
    try:
        assert process.stderr is not None
        lines = []
        while not any("open http" in line for line in lines):
            line = process.stderr.readline()
            assert line, f"omray ui exited: {lines!r}"
            lines.append(line)
        url = next(line for line in lines if "open http" in line).split("open ", 1)[1].strip()
        ticket = url.split("token=", 1)[1]
        token_file = home / "auth" / "web.token"
        token = token_file.read_text().strip()
        assert ticket != token  # the link carries a one-time ticket, never the long-lived token
        assert token_file.stat().st_mode & 0o777 == 0o600
        assert any("read-only" in line for line in lines)
        bearer = {"authorization": f"Bearer {token}"}
        base = f"http://127.0.0.1:{port}"
        status, answer = assert_eventually(lambda: _poll(f"{base}/api/projects", bearer), timeout_s=30)
        assert status == 200 and answer["runtime"] is False and answer["projects"][0]["sessions"] == []
        assert _request(f"{base}/api/projects")[0] == 401
        status, answer = _request(f"{base}/api/observe", bearer, {"session_id": "s", "end_seq": 1})
        assert status == 503 and answer["error"] == "runtime_not_running"
        # The printed link opens the viewer once; the same link later is refused with a page.
        assert _open_link(url)[0] == 303
        status, page = _open_link(url)
        assert status == 410 and "omray ui --new-link" in page
        # A new link for the running viewer, from the command line, works once too.
        again = subprocess.run(
            [str(Path(sys.executable).parent / "omray"), "ui", "--new-link", "--port", str(port)],
            capture_output=True,
            env=env,
            text=True,
            timeout=60,
        )
        assert again.returncode == 0, again.stderr
        new_url = again.stderr.split("open ", 1)[1].strip()
        assert new_url != url and token not in new_url
        assert [_open_link(new_url)[0], _open_link(new_url)[0]] == [303, 410]
    finally:
        process.terminate()
        process.wait(timeout=30)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _open_link(url: str) -> tuple[int, str]:
    """Open ``url`` as a fresh browser would (no cookie), without following a redirect."""
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(url, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def _poll(url: str, headers: dict[str, str]) -> tuple[int, Any] | None:
    try:
        return _request(url, headers)
    except OSError:
        return None
