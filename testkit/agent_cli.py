"""Where the tests and benchmarks find an installed agent CLI (``claude``, ``codex``).

Looked up in its environment variable (``OMRAY_CLAUDE_CLI``, ``OMRAY_CODEX_CLI``), then in
``~/.cache/omray-cli`` (where ``.ci/run`` and ``npm install --prefix ~/.cache/omray-cli <package>``
put it), then on ``PATH``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

CLI_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "omray-cli"
"""The npm prefix the CLIs are installed under for the tests and benchmarks."""


class AgentCliMissing(RuntimeError):
    """No such CLI here; the message says how to install one."""


def find_agent_cli(program: str, env_var: str, package: str) -> str:
    """The ``program`` executable, or :class:`AgentCliMissing` saying how to get it."""
    cached = str(CLI_CACHE / "node_modules" / ".bin" / program)
    for candidate in (os.environ.get(env_var, ""), cached):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(program)
    if found:
        return found
    npm = "npm is installed" if shutil.which("npm") else "npm is not installed either"
    raise AgentCliMissing(
        f"the {program} CLI is not installed ({npm}): run `npm install --prefix {CLI_CACHE} {package}` "
        f"or set {env_var}"
    )
