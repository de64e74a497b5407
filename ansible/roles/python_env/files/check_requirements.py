#!/usr/bin/env python3
"""Print which lines of a requirements file the running interpreter's environment misses.

Usage: python check_requirements.py REQUIREMENTS_FILE
Output (stdout, one JSON document): {"unsatisfied": ["<requirement>: <why>", ...]}

Run it with the venv's interpreter. It reads installed distributions with importlib.metadata
and, when the `packaging` library is importable in that venv, checks version specifiers and
markers too; without it, it checks names and exact `==` pins only. It never uses the network.
"""

from __future__ import annotations

import json
import re
import sys
from importlib import metadata

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _installed() -> dict[str, str]:
    versions = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            versions[_normalize(name)] = dist.version
    return versions


def _check(line: str, installed: dict[str, str]) -> str | None:
    """Return why `line` is not satisfied, or None when it is."""
    try:
        from packaging.requirements import Requirement
    except ImportError:
        Requirement = None
    if Requirement is not None:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate():
            return None
        version = installed.get(_normalize(req.name))
        if version is None:
            return "not installed"
        if req.url:
            return None
        if req.specifier and not req.specifier.contains(version, prereleases=True):
            return f"installed {version} does not match {req.specifier}"
        return None
    match = _NAME.match(line)
    if not match:
        return "cannot parse"
    version = installed.get(_normalize(match.group(1)))
    if version is None:
        return "not installed"
    pin = re.search(r"(?<![=!<>~])==\s*([^\s,;]+)", line)
    if pin and "*" not in pin.group(1):
        wanted = pin.group(1)
        have = version if "+" in wanted else version.split("+")[0]
        if have != wanted:
            return f"installed {version}, wanted {wanted}"
    return None


def main() -> int:
    installed = _installed()
    unsatisfied = []
    with open(sys.argv[1], encoding="utf-8") as handle:
        for raw in handle:
            # A lock line carries its hashes inline: "name==1.0 --hash=sha256:...".
            line = raw.split(" #")[0].split(" --hash")[0].strip()
            if not line or line.startswith(("#", "-")):
                continue
            why = _check(line, installed)
            if why:
                unsatisfied.append(f"{line}: {why}")
    print(json.dumps({"unsatisfied": unsatisfied}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
