"""Print the requirements pyproject.toml declares, one per line, for pip: the one dependency list of the project.

    python tools/requirements.py build            # [build-system] requires (+ the build tools the Makefile runs)
    python tools/requirements.py grid train test  # the project's dependencies and these extras, self-references
                                                  # such as "ace-hybrid[grid,report]" expanded

Used by the Makefile so that no list of packages is written twice.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    try:
        import tomli as tomllib
    except ModuleNotFoundError:
        sys.exit("tools/requirements.py needs Python 3.11+ or the tomli package (pip install tomli)")

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
#: Run by the Makefile itself (make dev, make test-cpp), not by the wheel build: scikit-build-core brings its own.
BUILD_TOOLS = ["ninja", "cmake"]


def requirements(names: list[str]) -> list[str]:
    data = tomllib.loads(PYPROJECT.read_text())
    project = data["project"]
    if names == ["build"]:
        return [*data["build-system"]["requires"], *BUILD_TOOLS]
    extras = project.get("optional-dependencies", {})
    out: list[str] = list(project.get("dependencies", []))
    todo, seen = list(names), set()
    while todo:
        name = todo.pop(0)
        if name in seen:
            continue
        if name not in extras:
            sys.exit(f"unknown extra {name!r}; pyproject.toml declares: {', '.join(sorted(extras))}")
        seen.add(name)
        for req in extras[name]:
            own = re.fullmatch(rf"{re.escape(project['name'])}\[(.+)\]", req.replace(" ", ""))
            if own:
                todo.extend(own.group(1).split(","))
            elif req not in out:
                out.append(req)
    return out


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    print("\n".join(requirements(sys.argv[1:])))
