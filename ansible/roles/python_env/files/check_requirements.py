#!/usr/bin/env python3
"""Print which lines of a requirements file the running interpreter's environment misses.

Usage: python check_requirements.py REQUIREMENTS_FILE [--fill-marker-dir DIR]
Output (stdout, one JSON document): {"unsatisfied": ["<requirement>: <why>", ...]}

With --fill-marker-dir (a uv cache that several nodes share), the document also holds
"fill_marker": DIR/rlinfra-filled-<digest>, the file an install that filled the cache with this
file's packages leaves behind, and "cache_filled": whether it is there. The digest is the sha256
of the file's requirement and option lines (comments and blank lines left out: the template's
header names the venv, which does not change what goes into the cache).

Run it with the venv's interpreter. It reads installed distributions with importlib.metadata
and, when the `packaging` library is importable in that venv, checks version specifiers and
markers too; without it, it checks names and exact `==` pins only. It never uses the network.
"""

from __future__ import annotations

import hashlib
import json
import os
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


def requirements_digest(lines: list[str]) -> str:
    """sha256 of the requirement and option lines, stripped, in order."""
    kept = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    return hashlib.sha256("\n".join(kept).encode("utf-8")).hexdigest()


def main() -> int:
    args = sys.argv[1:]
    marker_dir = None
    if len(args) == 3 and args[1] == "--fill-marker-dir":
        marker_dir = args[2]
    elif len(args) != 1:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    installed = _installed()
    unsatisfied = []
    with open(args[0], encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    doc: dict[str, object] = {}
    if marker_dir is not None:
        marker = os.path.join(marker_dir, "rlinfra-filled-" + requirements_digest(lines))
        doc = {"fill_marker": marker, "cache_filled": os.path.isfile(marker)}
    for raw in lines:
        # A lock line carries its hashes inline: "name==1.0 --hash=sha256:...".
        line = raw.split(" #")[0].split(" --hash")[0].strip()
        if not line or line.startswith(("#", "-")):
            continue
        why = _check(line, installed)
        if why:
            unsatisfied.append(f"{line}: {why}")
    print(json.dumps({"unsatisfied": unsatisfied, **doc}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
