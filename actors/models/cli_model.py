"""What the agent CLIs' chat models share (``claude -p``, ``codex exec``): one run of the installed CLI
per request, in a fresh private scratch directory, with a deadline, every failure a
:class:`~actors.models.chat.ModelCallError` with a category.

:class:`CliChatModel` runs the request; a subclass says how its CLI is called
(:meth:`~CliChatModel.environment`, :meth:`~CliChatModel.invocation`) and how its output reads
(:meth:`~CliChatModel.answer`). The CLI's output can quote the prompt or the model's answer: it is
read to classify a failure and never logged.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass
from typing import ClassVar, Protocol

from actors.models.chat import ChatRequest, ChatResponse, ModelCallError
from actors.models.cli_prompt import answer_round, render_prompt


@dataclass(frozen=True)
class CliRun:
    """What one CLI process gave back."""

    returncode: int
    """Exit status."""
    stdout: str
    """Standard output (the JSON result); read, never logged."""


class CliRunner(Protocol):
    """Runs a CLI; raises ``FileNotFoundError`` when it is missing, ``subprocess.TimeoutExpired`` past
    ``timeout_s``."""

    def __call__(
        self, argv: list[str], *, stdin: str, cwd: str, env: Mapping[str, str], timeout_s: float
    ) -> CliRun:
        """Run ``argv`` to its end."""
        ...


def subprocess_runner(
    argv: list[str], *, stdin: str, cwd: str, env: Mapping[str, str], timeout_s: float
) -> CliRun:
    """Run ``argv`` in a session of its own, killing its whole process group at the timeout.

    Standard error is discarded: it can carry the prompt or the model's words, and the JSON result
    on standard output says what failed.
    """
    with subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=cwd,
        env=dict(env),
        text=True,
        encoding="utf-8",
        errors="replace",
        start_new_session=True,
    ) as process:
        try:
            stdout, _ = process.communicate(stdin, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except OSError:
                process.kill()
            process.communicate()
            raise
        return CliRun(process.returncode, stdout or "")


@dataclass(eq=False, repr=False)
class CliChatModel:
    """A model reached through an installed agent CLI on the user's login; one run per request.

    Thread-safe: every request runs in its own scratch directory. A subclass adds the fields its CLI
    needs after ``timeout_s`` (its constructor keeps ``runner`` and ``environ`` keyword-only).
    """

    label: ClassVar[str]
    """The CLI's name in logs and in the scratch directory's name (``claude``, ``codex``)."""
    log: ClassVar[logging.Logger]
    """Where the runs log: categories, status codes and return codes only."""

    command: str
    """The CLI's command: a name looked up on the run's ``PATH``, or a path."""
    timeout_s: float
    """Longest a run may take (a request with a shorter deadline gets its own)."""
    _: KW_ONLY
    runner: CliRunner = subprocess_runner
    """Runs the process (tests pass a fake)."""
    environ: Mapping[str, str] | None = None
    """The environment runs start from (``None``: ``os.environ`` at each request)."""

    def close(self) -> None:
        """Nothing to release (a run's process ends with it)."""

    def environment(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The environment a run starts with, from ``environ``."""
        raise NotImplementedError

    def invocation(
        self, executable: str, request: ChatRequest, scratch: str, system_prompt: str, prompt: str
    ) -> tuple[list[str], str]:
        """The command line and the standard input of one run (files it needs go in ``scratch``)."""
        raise NotImplementedError

    def answer(self, run: CliRun, round_no: int) -> ChatResponse:
        """The model's answer in a run's output, or the :class:`ModelCallError` its failure stands for."""
        raise NotImplementedError

    def complete(self, request: ChatRequest) -> ChatResponse:
        """One headless run answering ``request``."""
        label, log = self.label, self.log
        env = self.environment(os.environ if self.environ is None else self.environ)
        executable = shutil.which(self.command, path=env.get("PATH"))
        if executable is None:
            log.warning("%s CLI not found: category=cli_missing", label)
            raise ModelCallError("cli_missing")
        system_prompt, prompt = render_prompt(request.messages, request.tools)
        round_no = answer_round(request.messages)
        timeout_s = max(0.001, min(request.timeout_s, self.timeout_s))
        with tempfile.TemporaryDirectory(prefix=f"omray-{label}-") as scratch:
            argv, stdin = self.invocation(executable, request, scratch, system_prompt, prompt)
            try:
                run = self.runner(argv, stdin=stdin, cwd=scratch, env=env, timeout_s=timeout_s)
            except FileNotFoundError:
                log.warning("%s CLI not found: category=cli_missing", label)
                raise ModelCallError("cli_missing") from None
            except subprocess.TimeoutExpired:
                log.warning("%s CLI run timed out: category=cli_timeout", label)
                raise ModelCallError("cli_timeout") from None
            except OSError as exc:
                log.warning("%s CLI did not start: category=cli_failed class=%s", label, type(exc).__name__)
                raise ModelCallError("cli_failed") from None
        try:
            response = self.answer(run, round_no)
        except ModelCallError as exc:
            log.warning(
                "%s CLI run failed: category=%s status=%s returncode=%d",
                label,
                exc.category,
                exc.status_code,
                run.returncode,
            )
            raise
        log.debug("%s CLI run answered: calls=%d", label, len(response.tool_calls))
        return response
