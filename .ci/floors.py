"""Print ``name==floor`` for every direct dependency of pyproject.toml (runtime and dev) with a floor.

``make setup`` installs omray with these as pip constraints, so the tests run on the lowest
versions pyproject.toml allows: a floor is always a version the tests have run.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(.*)$")


def floors(pyproject: Path) -> list[str]:
    """``name==version`` lines, in the order pyproject.toml lists the dependencies."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    requirements = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        requirements.extend(extra)
    lines: list[str] = []
    for requirement in requirements:
        match = REQUIREMENT.match(requirement.split(";")[0])
        if match is None:
            raise SystemExit(f"cannot read requirement {requirement!r}")
        name, specifiers = match.groups()
        floor = [part.strip()[2:] for part in specifiers.split(",") if part.strip().startswith(">=")]
        if floor:
            lines.append(f"{name}=={floor[0]}")
    return lines


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent
    print("\n".join(floors(root / "pyproject.toml")))
