"""How a client reaches the queue actor: every call has a deadline, and a restarted runtime is rejoined.

Ray allows one cluster connection per process, for the life of the process: a driver whose
cluster was stopped cannot join the restarted one (its next GCS call fails with
``WrongClusterID``, and ``ray.shutdown()`` then exits the whole process because its raylet is
gone). So an agent's client does not make its own process a Ray driver. :class:`ChildLink` runs a
small driver process (``python -m cluster.runtime_connection``) and talks to it over pipes; when a
call fails on the Ray side or does not answer within its deadline, the child is stopped (by its
pid, it is ours) and the next call starts a fresh one, which joins whatever cluster now serves the
address.

:class:`InProcessLink` is for processes that are Ray drivers already (the CLI, tests, benchmarks,
actors): the same deadlines, no reconnection.

The errors a link raises tell its callers what happened (not running, refused, a method the
runtime lacks); :class:`cluster.outbox.Outbox` decides its retries by them.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any, Protocol

import ray

from cluster.data_node import DATA_METHODS
from cluster.naming import RuntimeNames, omray_home
from protocol.errors import (
    InvalidPayloadError,
    OmrayError,
    RuntimeNotRunningError,
)

logger = logging.getLogger("omray.link")

QUEUE_METHODS = frozenset(
    {
        "dispatch",
        "dispatch_many",
        "status",
        "job_counts",
        "runtime_events",
        "is_idle",
        "ping",
        "retry_failed",
        "place_database",
    }
)
"""The documented queue-actor methods a link forwards (it also serves
:data:`cluster.data_node.DATA_METHODS`, which reach a memory database's own node)."""


class RuntimeUnavailableError(RuntimeNotRunningError):
    """The runtime did not answer within the call's deadline (stopped, restarting or overloaded)."""


class RuntimeAuthError(RuntimeNotRunningError):
    """The Ray cluster rejected this process's authentication token."""


class RuntimeRejectedError(OmrayError):
    """The runtime answered, but refused the call: it has no such method
    (:class:`RuntimeMethodMissingError`), or the call failed there with an error that has no type of
    its own on this side of the link (an omray error with arguments of its own, or a bug there).

    Unlike :class:`RuntimeNotRunningError`, the runtime is up: sending the same call again the same
    way does not help.
    """


class RuntimeMethodMissingError(RuntimeRejectedError):
    """The running queue has no such method: it is older than this client."""


def _rejection_types() -> dict[str, type[OmrayError]]:
    """Every omray error class this process knows, by name, but the "not running" family (which
    says no runtime answered): a refusal crosses the child link with its type."""
    found: dict[str, type[OmrayError]] = {}
    waiting: list[type[OmrayError]] = [OmrayError]
    while waiting:
        cls = waiting.pop()
        if not issubclass(cls, RuntimeNotRunningError) and "(" not in cls.__name__:  # not RayTaskError(X)
            found.setdefault(cls.__name__, cls)
        waiting.extend(cls.__subclasses__())
    return found


HOOK_TIMEOUT_S = 5.0
"""Deadline of ``after_turn_commit`` and ``session_started``: they return by then, accepted or not."""
CALL_TIMEOUT_S = 30.0
"""Deadline of every other call into the runtime (dispatch, status, job counts, events)."""

_TOKEN_FIX = (
    "fix: run this where `omray up` ran (it reads ~/.ray/auth_token), or export RAY_AUTH_MODE=token "
    "with the cluster's token in ~/.ray/auth_token or RAY_AUTH_TOKEN (print it with `ray get-auth-token` "
    "on the head node)"
)


def resolve_address(address: str | None = None) -> str:
    """The Ray address to join: ``address``, else ``RAY_ADDRESS``, else the one ``omray up`` recorded.

    With none of them, :class:`RuntimeNotRunningError`: no omray runtime is known, and guessing
    would join whatever cluster this machine started last (somebody else's, or a stale one that
    never answers). Ray's ``"auto"`` is used only when asked for (``address="auto"``, or recorded
    by ``omray up --address auto``), and then only after ``RAY_ADDRESS`` and the record.
    """
    if address and address != "auto":
        return address
    from_env = os.environ.get("RAY_ADDRESS", "").strip()
    if from_env and from_env != "auto":
        return from_env
    recorded = _recorded_runtime().get("address")
    if isinstance(recorded, str) and recorded and recorded != "auto":
        return recorded
    if address == "auto" or from_env == "auto" or recorded == "auto":
        return "auto"
    raise RuntimeNotRunningError(
        f"no omray runtime is recorded in {omray_home()}; start one with `omray up` "
        "(or give its Ray address: --address, or RAY_ADDRESS)"
    )


def _recorded_runtime() -> dict[str, Any]:
    try:
        data = json.loads((omray_home() / "runtime.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def prepare_auth() -> str:
    """Set ``RAY_AUTH_MODE`` the way ``omray up`` started the cluster, unless the user set it.

    Ray turns token authentication on by itself only for ``address="auto"``; with an explicit address
    (or ``RAY_ADDRESS``) it does not, and every call is then rejected. omray uses the mode its
    ``omray up`` recorded, else ``token`` when a token is available. Returns the mode in effect.
    """
    current = os.environ.get("RAY_AUTH_MODE")
    if current:
        return current.lower()
    recorded = _recorded_runtime().get("auth")
    if recorded in ("token", "disabled"):
        mode = str(recorded)
    elif _token_available():
        mode = "token"
    else:
        return "disabled"
    if mode == "token" and not _token_available():
        # Ray aborts the whole process (a failed C++ check, no exception) when token authentication
        # is on and it finds no token: say so while it can still be said.
        raise RuntimeAuthError(
            f"the runtime uses token authentication, but this process finds no token (HOME={Path.home()}); "
            f"{_TOKEN_FIX}"
        )
    os.environ["RAY_AUTH_MODE"] = mode
    from ray._raylet import Config  # type: ignore[attr-defined]  # what Ray's own token setup calls

    Config.initialize("")  # Ray caches its config at import: make it read the mode just set
    return mode


def _token_available() -> bool:
    """Whether Ray will find a token: ``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return True
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    return Path(path).is_file() if path else (Path.home() / ".ray" / "auth_token").is_file()


def probe_gcs(address: str, timeout_s: float = 2.0) -> None:
    """Fail at once when nothing listens at ``address`` or the cluster rejects this process's token.

    Without it ``ray.init`` retries a refused connection or a rejected token for 20-40 s and then
    reports an unreachable cluster.
    """
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return  # not host:port (e.g. ray://); ray.init reports it
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError:
        raise RuntimeNotRunningError(
            f"no Ray cluster reachable at {address!r}; start one with `omray up`"
        ) from None
    from ray._raylet import GcsClient  # type: ignore[attr-defined]  # private, stable since 2.x

    try:
        GcsClient(address=address)
    except ray.exceptions.AuthenticationError:
        mode = os.environ.get("RAY_AUTH_MODE", "unset")
        raise RuntimeAuthError(
            f"the Ray cluster at {address!r} rejected this process's authentication token "
            f"(RAY_AUTH_MODE={mode}); {_TOKEN_FIX}"
        ) from None
    except Exception:  # anything else: let ray.init give its own answer
        return


def init_ray(address: str | None = "auto", namespace: str = "omray") -> None:
    """Connect this process to a running Ray cluster (no-op when already connected).

    Never starts a cluster: a missing runtime is a :class:`RuntimeNotRunningError`, so no job is
    ever run inline in the caller. The address comes from :func:`resolve_address`, the
    authentication mode from :func:`prepare_auth`; a rejected token is a :class:`RuntimeAuthError`
    at once, with the fix.
    """
    if ray.is_initialized():
        return
    target = resolve_address(address)
    prepare_auth()
    if target != "auto":
        probe_gcs(target)
    try:
        ray.init(address=target, namespace=namespace, logging_level=logging.WARNING, log_to_driver=False)
    except ray.exceptions.AuthenticationError:
        raise RuntimeAuthError(
            f"the Ray cluster at {target!r} rejected this process's authentication token; {_TOKEN_FIX}"
        ) from None
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise RuntimeNotRunningError(
            f"no Ray cluster reachable at {target!r} ({type(exc).__name__}); start one with `omray up`"
        ) from None


class Link(Protocol):
    """Calls one documented method of the queue actor and returns its JSON-able answer."""

    def call(self, method: str, args: tuple[Any, ...], timeout_s: float) -> Any:
        """The answer, or :class:`RuntimeNotRunningError` (a subclass) by the deadline."""
        ...

    def close(self) -> None:
        """Release what the link holds (a child process)."""
        ...


def _wire_envelope(envelope: Any, index: int | None = None) -> Any:
    """An envelope as JSON for the child; one that does not validate raises, as the queue would."""
    from protocol.jobs import JobEnvelope

    if not isinstance(envelope, JobEnvelope):
        try:
            envelope = JobEnvelope.model_validate(envelope)
        except Exception as exc:
            where = "" if index is None else f" at index {index}"
            rest = "" if index is None else "; no job accepted"
            raise InvalidPayloadError(f"invalid job envelope{where} ({type(exc).__name__}){rest}") from None
    return envelope.model_dump(mode="json")


def _wire_args(method: str, args: tuple[Any, ...]) -> list[Any]:
    if method == "dispatch":
        return [_wire_envelope(args[0])]
    if method == "dispatch_many":
        envelopes = args[0]
        if isinstance(envelopes, str | bytes | Mapping) or not isinstance(envelopes, list | tuple):
            raise InvalidPayloadError(
                f"dispatch_many takes a list of job envelopes, not {type(envelopes).__name__}"
            )
        return [[_wire_envelope(envelope, index) for index, envelope in enumerate(envelopes)]]
    return list(args)


class InProcessLink:
    """Ray calls from this process (already a Ray driver), each bounded by its deadline."""

    def __init__(self, queue_name: str, namespace: str) -> None:
        self.queue_name = queue_name
        self.namespace = namespace

    def call(self, method: str, args: tuple[Any, ...], timeout_s: float) -> Any:
        if not ray.is_initialized():
            raise RuntimeNotRunningError("not connected to Ray; call cluster.connect() after `omray up`")
        if method in DATA_METHODS:
            from cluster.data_node import data_call

            names = RuntimeNames(self.queue_name.removesuffix(".queue"), self.namespace)
            return data_call(names, method, args, timeout_s)
        try:
            handle = ray.get_actor(self.queue_name, namespace=self.namespace)
        except ValueError:
            raise RuntimeNotRunningError(
                f"no omray queue actor {self.queue_name!r} in namespace {self.namespace!r}; run `omray up`"
            ) from None
        try:
            bound = getattr(handle, method)
        except AttributeError:
            raise RuntimeMethodMissingError(
                f"the running omray queue has no method {method!r}: it is older than this client "
                "(restart it with `omray down` and `omray up`)"
            ) from None
        reference = bound.remote(*args)
        try:
            return ray.get(reference, timeout=max(timeout_s, 0.001))
        except ray.exceptions.GetTimeoutError:
            ray.cancel(reference)
            raise RuntimeUnavailableError(
                f"the omray queue did not answer {method!r} within {timeout_s:g} s"
            ) from None

    def close(self) -> None:
        """Nothing to release: this process's Ray connection is not the link's."""


class _Child:
    """One driver process and the answers it sent, by request id."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process
        self.answers: dict[int, dict[str, Any]] = {}
        self.changed = threading.Condition()
        self.gone = False
        self.reader = threading.Thread(target=self._read, name="omray-link-reader", daemon=True)
        self.reader.start()

    def _read(self) -> None:
        stream = self.process.stdout
        assert stream is not None
        for line in stream:
            try:
                answer = json.loads(line)
            except ValueError:
                continue  # not ours (the child sends Ray's own prints to stderr; this is a guard)
            with self.changed:
                self.answers[int(answer.get("id", -1))] = answer
                self.changed.notify_all()
        with self.changed:
            self.gone = True
            self.changed.notify_all()

    def wait(self, request_id: int, deadline: float) -> dict[str, Any] | None:
        with self.changed:
            while request_id not in self.answers and not self.gone:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self.changed.wait(remaining)
            return self.answers.pop(request_id, None)

    def send(self, request: Mapping[str, Any]) -> None:
        stream = self.process.stdin
        assert stream is not None
        stream.write(json.dumps(request).encode("utf-8") + b"\n")
        stream.flush()

    def stop(self) -> None:
        """Close its input (it exits), then terminate and kill it by pid if it lingers."""
        for stream in (self.process.stdin,):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        try:
            self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.process.terminate()
            try:
                self.process.wait(timeout=3)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)


class ChildLink:
    """Queue calls through a driver child process that is replaced whenever its cluster goes away."""

    def __init__(self, address: str, queue_name: str, namespace: str) -> None:
        self.address = address
        self.queue_name = queue_name
        self.namespace = namespace
        self._lock = threading.Lock()
        self._child: _Child | None = None
        self._next_id = 1
        self.children_started = 0
        atexit.register(self.close)

    def _spawn(self) -> _Child:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cluster.runtime_connection",
                self.address,
                self.namespace,
                self.queue_name,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "RAY_USAGE_STATS_ENABLED": os.environ.get("RAY_USAGE_STATS_ENABLED", "0")},
        )
        self.children_started += 1
        return _Child(process)

    def _drop(self, child: _Child) -> None:
        if self._child is child:
            self._child = None
        child.stop()

    def call(self, method: str, args: tuple[Any, ...], timeout_s: float) -> Any:
        deadline = time.monotonic() + timeout_s
        if not self._lock.acquire(timeout=max(timeout_s, 0.0)):
            raise RuntimeUnavailableError(
                f"the omray client is busy; {method!r} not sent within {timeout_s:g} s"
            )
        try:
            return self._call_locked(method, args, deadline, timeout_s)
        finally:
            self._lock.release()

    def _call_locked(self, method: str, args: tuple[Any, ...], deadline: float, timeout_s: float) -> Any:
        child = self._child
        if child is None or child.gone:
            child = self._child = self._spawn()
        # Request 0 is the child's "connected" answer; it stays until read, so a slow start can
        # finish in the background and serve the next call.
        if 0 not in child.answers or child.answers[0].get("ok") != "ready":
            ready = child.wait(0, deadline)
            if ready is None:
                if child.gone:
                    self._drop(child)
                    raise RuntimeNotRunningError("the omray client's Ray connection ended; retrying later")
                raise RuntimeUnavailableError(
                    f"no connection to the Ray cluster at {self.address!r} within {timeout_s:g} s"
                )
            if "error" in ready:
                self._drop(child)
                raise _error_from(ready)
            child.answers[0] = ready  # keep the marker: this child is connected
        request_id, self._next_id = self._next_id, self._next_id + 1
        try:
            child.send({"id": request_id, "method": method, "args": _wire_args(method, args)})
        except OSError:
            self._drop(child)
            raise RuntimeUnavailableError("the omray client's Ray connection ended") from None
        answer = child.wait(request_id, deadline)
        if answer is None:
            # No answer in time: the connection is suspect (a stopped or restarted cluster). A fresh
            # child is cheap next to an agent hanging; a redelivered job id is accepted once.
            self._drop(child)
            raise RuntimeUnavailableError(f"the omray queue did not answer {method!r} within {timeout_s:g} s")
        if "error" in answer:
            if answer.get("reconnect"):
                self._drop(child)
            raise _error_from(answer)
        return answer.get("ok")

    def close(self) -> None:
        with self._lock:
            if self._child is not None:
                self._drop(self._child)


def _error_from(answer: Mapping[str, Any]) -> OmrayError:
    """The typed error of a child's error answer (see :func:`_classify`)."""
    message = str(answer.get("message") or answer.get("error"))
    if answer.get("kind") == "rejected":
        # The runtime is up and refused the call: the same type as in-process, never "not running".
        error = _rejection_types().get(str(answer.get("error_class")), RuntimeRejectedError)
        try:
            return error(message)
        except TypeError:  # an error class with arguments of its own (EventsFileError): keep the kind
            return RuntimeRejectedError(message)
    kind = {"auth": RuntimeAuthError, "timeout": RuntimeUnavailableError}.get(
        str(answer.get("kind")), RuntimeNotRunningError
    )
    return kind(message)


def _classify(exc: BaseException) -> dict[str, Any]:
    """Error answer: a stable kind, a message without payload text, and whether to reconnect."""
    if isinstance(exc, RuntimeAuthError):
        return {"kind": "auth", "message": str(exc), "reconnect": True}
    if isinstance(exc, RuntimeNotRunningError):
        return {
            "kind": "not_running",
            "message": str(exc),
            "reconnect": isinstance(exc, RuntimeUnavailableError),
        }
    # A Ray task error (``RayTaskError(X)``: the queue answered, and its method raised X) carries
    # X as its cause; the parent raises X's type. The message is X's own (omray's errors carry no
    # payload text), never the remote traceback.
    task_error = isinstance(exc, ray.exceptions.RayTaskError)
    cause = getattr(exc, "cause", None) if task_error else exc
    if isinstance(cause, OmrayError):
        return {
            "kind": "rejected",
            "error_class": type(cause).__name__,
            "message": str(cause),
            "reconnect": False,
        }
    if task_error:  # an error of another kind in the queue (a bug there): it is up, keep the connection
        return {
            "kind": "rejected",
            "error_class": RuntimeRejectedError.__name__,
            "message": f"the omray queue failed the call ({type(cause).__name__})",
            "reconnect": False,
        }
    # Ray-side failures (WrongClusterID after a restart, a dead raylet, lost actors): this driver's
    # connection is done for; the parent starts a new child.
    return {"kind": "ray", "message": f"Ray call failed ({type(exc).__name__})", "reconnect": True}


def _serve(address: str, namespace: str, queue_name: str, answers: IO[str]) -> int:
    def reply(answer: Mapping[str, Any]) -> None:
        answers.write(json.dumps(answer, default=str) + "\n")
        answers.flush()

    try:
        init_ray(address, namespace)
    except Exception as exc:  # report why, then exit: the parent decides when to try again
        reply({"id": 0, "error": type(exc).__name__, **_classify(exc)})
        return 1
    reply({"id": 0, "ok": "ready"})
    link = InProcessLink(queue_name, namespace)
    for line in sys.stdin:
        request = json.loads(line)
        request_id = int(request["id"])
        method = str(request["method"])
        if method not in QUEUE_METHODS and method not in DATA_METHODS:
            reply(
                {
                    "id": request_id,
                    "error": "unknown_method",
                    "kind": "rejected",
                    "error_class": RuntimeRejectedError.__name__,
                    "message": f"the omray client link does not forward {method!r}",
                }
            )
            continue
        try:
            value = link.call(method, tuple(request.get("args", [])), 3600.0)
        except Exception as exc:
            answer = _classify(exc)
            reply({"id": request_id, "error": type(exc).__name__, **answer})
            if answer["reconnect"]:
                return 1  # this connection is stale; do not touch ray.shutdown() (it can exit hard)
            continue
        reply({"id": request_id, "ok": value})
    return 0


def main() -> None:
    """``python -m cluster.runtime_connection ADDRESS NAMESPACE QUEUE``: serve queue calls for the
    parent process."""
    address, namespace, queue_name = sys.argv[1:4]
    # Answers go to the original stdout; everything else this process prints (Ray notices) goes to
    # stderr, so the pipe carries only JSON lines.
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    code = _serve(address, namespace, queue_name, answers)
    answers.close()
    os._exit(code)  # skip Ray's atexit shutdown, which can hang on a cluster that went away


if __name__ == "__main__":
    main()
