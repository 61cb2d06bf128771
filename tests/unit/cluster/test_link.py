"""The client's side of issue 19 without a cluster: hook deadlines, the outbox, address and token choice."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from cluster.client import OmrayClient
from cluster.outbox import Outbox
from cluster.runtime_connection import (
    InProcessLink,
    RuntimeAuthError,
    RuntimeMethodMissingError,
    RuntimeRejectedError,
    RuntimeUnavailableError,
    prepare_auth,
    probe_gcs,
    resolve_address,
)
from protocol.errors import InvalidPayloadError, OmrayError, RuntimeNotRunningError, StorageError
from protocol.events import AfterTurnCommit, EventSummary

DEADLINE_S = 0.3
MARGIN_S = 5.0  # generous bound around the deadline on a loaded machine


class FlakyLink:
    """A queue that refuses (or hangs on) the first ``failures`` calls, then accepts."""

    def __init__(self, failures: int, hang_s: float = 0.0) -> None:
        self.failures = failures
        self.hang_s = hang_s
        self.accepted: list[str] = []
        self.lock = threading.Lock()

    def call(self, method: str, args: tuple[Any, ...], timeout_s: float) -> Any:
        if method == "locate_database":  # a runtime of one node, from before placements
            raise RuntimeMethodMissingError("no such method")
        with self.lock:
            failing = self.failures > 0
            self.failures -= 1
        if failing:
            time.sleep(min(self.hang_s, timeout_s))
            raise RuntimeUnavailableError("no answer")
        if method == "dispatch_many":
            job_ids = [str(envelope.job_id) for envelope in args[0]]
            self.accepted.extend(job_ids)
            return job_ids
        job_id = str(args[0].job_id)
        self.accepted.append(job_id)
        return job_id

    def close(self) -> None:
        pass


def turn(seq: int) -> AfterTurnCommit:
    return AfterTurnCommit(
        session_id="s1",
        turn_no=seq,
        status="completed",
        events=(EventSummary(seq=seq, type="agent_end", payload={"reason": "completed"}),),
    )


def client_with(link: FlakyLink, tmp_path: Path) -> OmrayClient:
    return OmrayClient(
        settings={"model": "builtin/extractive"},
        cwd=tmp_path,
        link=link,
        hook_timeout_s=DEADLINE_S,
        call_timeout_s=DEADLINE_S,
    )


def test_hook_returns_by_its_deadline_and_the_job_is_sent_once_the_runtime_answers(tmp_path: Path) -> None:
    link = FlakyLink(failures=4, hang_s=10.0)
    client = client_with(link, tmp_path)
    started = time.monotonic()
    assert client.after_turn_commit(turn(3)) is None  # not accepted yet, and no exception
    assert time.monotonic() - started <= DEADLINE_S + MARGIN_S
    assert client.outbox.wait_empty(30)
    assert len(link.accepted) == 1


def test_hook_returns_the_job_id_when_the_runtime_accepts_in_time(tmp_path: Path) -> None:
    link = FlakyLink(failures=0)
    client = client_with(link, tmp_path)
    job_id = client.after_turn_commit(turn(3))
    assert job_id is not None and link.accepted == [job_id]


def test_pending_hook_jobs_are_sent_in_the_order_of_the_turns(tmp_path: Path) -> None:
    link = FlakyLink(failures=3)
    client = client_with(link, tmp_path)
    for seq in (3, 5, 8):
        client.after_turn_commit(turn(seq))
    assert client.outbox.wait_empty(30)
    expected = [client.observe_envelope("s1", seq).job_id for seq in (3, 5, 8)]
    assert link.accepted == expected


def test_a_direct_dispatch_raises_a_typed_error_at_its_deadline(tmp_path: Path) -> None:
    client = client_with(FlakyLink(failures=1, hang_s=10.0), tmp_path)
    started = time.monotonic()
    with pytest.raises(RuntimeUnavailableError):
        client.observe("s1", 3)
    assert time.monotonic() - started <= DEADLINE_S + MARGIN_S


def test_outbox_drops_the_oldest_job_past_its_limit() -> None:
    sent: list[str] = []
    gate = threading.Event()

    def send(envelope: Any, timeout_s: float) -> str:
        if not gate.is_set():
            raise RuntimeUnavailableError("down")
        sent.append(envelope)
        return str(envelope)

    outbox = Outbox(send, call_timeout_s=0.1, limit=2)
    for name in ("a", "b", "c"):
        assert outbox.submit(name, name, 0.01) is None
    gate.set()
    assert outbox.wait_empty(30)
    assert sent == ["b", "c"]


def test_address_comes_from_the_argument_then_ray_address_then_the_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMRAY_HOME", str(tmp_path))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(RuntimeNotRunningError, match="no omray runtime is recorded"):
        resolve_address(None)  # nothing known: never a guess at some cluster of the machine
    assert resolve_address("auto") == "auto"  # Ray's own guess, when asked for
    (tmp_path / "runtime.json").write_text(json.dumps({"address": "127.0.0.1:6380", "auth": "token"}))
    assert resolve_address("auto") == "127.0.0.1:6380"
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")
    assert resolve_address(None) == "10.0.0.5:6379"
    assert resolve_address("10.0.0.9:1") == "10.0.0.9:1"


def test_token_mode_follows_what_omray_up_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMRAY_HOME", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path / "nobody"))
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    assert prepare_auth() == "disabled"  # no record, no token: Ray's own default applies
    (tmp_path / "runtime.json").write_text(json.dumps({"address": "127.0.0.1:6380", "auth": "token"}))
    # Token mode with no token anywhere: Ray would abort the process; omray says why instead.
    with pytest.raises(RuntimeAuthError, match="no token"):
        prepare_auth()
    monkeypatch.setenv("RAY_AUTH_TOKEN", "t" * 32)
    assert prepare_auth() == "token"
    monkeypatch.delenv("RAY_AUTH_TOKEN")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    assert prepare_auth() == "disabled"  # the user's explicit choice wins


def test_a_token_file_turns_token_mode_on_for_an_explicit_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMRAY_HOME", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("t" * 32)
    assert prepare_auth() == "token"


def test_nothing_listening_is_reported_at_once_not_after_retries() -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(RuntimeNotRunningError, match="omray up"):
        probe_gcs(f"127.0.0.1:{port}")
    assert time.monotonic() - started <= 5.0


def test_outbox_sends_sessions_side_by_side_and_each_session_in_order() -> None:
    import threading
    from types import SimpleNamespace

    started: list[str] = []
    lock, release = threading.Lock(), threading.Event()

    def send(envelope: Any, timeout_s: float) -> str:
        with lock:
            started.append(envelope.job_id)
        if envelope.job_id == "a1":
            release.wait(5)  # session A's first job is slow to be accepted
        return str(envelope.job_id)

    def job(job_id: str, session: str) -> Any:
        return SimpleNamespace(job_id=job_id, payload=SimpleNamespace(db_path="/d", session_id=session))

    outbox = Outbox(send, call_timeout_s=5.0)
    assert outbox.submit("a1", job("a1", "A"), 0.05) is None  # still waiting on the slow send
    assert outbox.submit("a2", job("a2", "A"), 0.05) is None  # behind a1: same session
    assert outbox.submit("b1", job("b1", "B"), 2.0) == "b1"  # another session is not held back
    assert started == ["a1", "b1"]
    release.set()
    assert outbox.wait_empty(5.0)
    assert started == ["a1", "b1", "a2"]


def test_wire_form_of_a_batch_is_json_envelopes() -> None:
    from cluster.runtime_connection import _wire_args

    payload = {"kind": "semantic_index", "run_id": "s1", "db_path": "/d"}
    envelopes = [{"job_id": f"j{n}", "correlation_id": "s1", "payload": payload} for n in (1, 2)]
    wire = _wire_args("dispatch_many", (envelopes,))
    assert [item["job_id"] for item in wire[0]] == ["j1", "j2"]
    assert json.loads(json.dumps(wire)) == wire


def _through_the_child(exc: BaseException) -> OmrayError:
    """The error the parent raises for ``exc`` raised in the child (its answer goes as JSON)."""
    from cluster.runtime_connection import _classify, _error_from

    answer = json.loads(json.dumps({"id": 1, "error": type(exc).__name__, **_classify(exc)}))
    if isinstance(getattr(exc, "cause", exc), OmrayError | KeyError) and not isinstance(
        exc, RuntimeNotRunningError
    ):
        assert answer["reconnect"] is False  # the runtime answered: keep this connection
    return _error_from(answer)


class _TaskError(RuntimeError):
    """Shaped like Ray's ``RayTaskError(X)``: an instance of the remote error's class as well, its
    text the remote traceback, the remote error itself as ``cause``."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"Traceback (most recent call last): ... {cause}")
        self.cause = cause


def test_the_child_link_keeps_the_type_of_a_rejection() -> None:
    from unittest import mock

    from persistence.writers.store import NotFoundError
    from protocol.errors import EventsFileError, MigrationError

    invalid = type("RayTaskError(InvalidPayloadError)", (_TaskError, InvalidPayloadError), {})
    cases: list[tuple[BaseException, type[OmrayError]]] = [
        (InvalidPayloadError("invalid job envelope at index 1"), InvalidPayloadError),
        (invalid(InvalidPayloadError("at most 256 jobs per dispatch_many, got 257")), InvalidPayloadError),
        (StorageError("the queue store did not confirm the job in time"), StorageError),
        (MigrationError("schema too new"), MigrationError),  # the most derived class, not StorageError
        (NotFoundError("no job with seq 3"), NotFoundError),
        (RuntimeMethodMissingError("no method 'dispatch_many'"), RuntimeMethodMissingError),
        (EventsFileError("/p/events.jsonl", 3, "bad json"), RuntimeRejectedError),  # own arguments
        (_TaskError(KeyError("job")), RuntimeRejectedError),  # a bug in the queue: it still answered
        (RuntimeNotRunningError("no queue actor"), RuntimeNotRunningError),
        (RuntimeAuthError("bad token"), RuntimeAuthError),
        (RuntimeError("WrongClusterID"), RuntimeNotRunningError),  # a Ray failure: reconnect
    ]
    with mock.patch("cluster.runtime_connection.ray.exceptions.RayTaskError", _TaskError):
        for raised, expected in cases:
            got = _through_the_child(raised)
            assert type(got) is expected, (raised, got)
            assert "Traceback" not in str(got)  # the error's own message crosses, never the remote trace
        # A refused call is never "not running": the outbox must not retry a rejected batch forever.
        assert not isinstance(_through_the_child(InvalidPayloadError("x")), RuntimeNotRunningError)


def test_in_process_link_reports_a_method_the_running_queue_lacks() -> None:
    from types import SimpleNamespace
    from unittest import mock

    old_queue = SimpleNamespace(dispatch=SimpleNamespace(remote=lambda *a: None))  # no dispatch_many
    with (
        mock.patch("cluster.runtime_connection.ray.is_initialized", return_value=True),
        mock.patch("cluster.runtime_connection.ray.get_actor", return_value=old_queue),
        pytest.raises(RuntimeMethodMissingError, match=r"dispatch_many.*older than this client"),
    ):
        InProcessLink("omray.queue", "omray").call("dispatch_many", ([],), 1.0)


def test_a_direct_dispatch_of_a_bad_envelope_is_a_typed_error_without_its_values(tmp_path: Path) -> None:
    link = FlakyLink(failures=0)
    client = client_with(link, tmp_path)
    secret = "SECRET MEMORY TEXT"
    with pytest.raises(InvalidPayloadError) as caught:
        client.dispatch({"job_id": "j", "correlation_id": "s", "payload": {"kind": "nope", "text": secret}})
    assert secret not in str(caught.value) and link.accepted == []  # nothing sent
