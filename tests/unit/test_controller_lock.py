"""The controller's lock covers pyproject.toml: a dependency changed without `make lock` fails."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    pytest.skip("tomllib needs Python 3.11", allow_module_level=True)

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}")


def locked(name: str) -> dict[str, Version]:
    out: dict[str, Version] = {}
    for line in (REPO / "requirements" / name).read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        assert HASH.search(line), f"{name}: {line.split()[0]} has no hash"
        pin = line.split()[0]
        package, _, version = pin.partition("==")
        out[canonicalize_name(package.split("[")[0])] = Version(version)
    return out


def test_every_dependency_of_pyproject_is_locked_at_an_allowed_version() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    lock = locked("controller.lock")
    for text in wanted:
        req = Requirement(text)
        name = canonicalize_name(req.name)
        assert name in lock, f"{req.name} is in pyproject.toml but not in the lock: run `make lock`"
        assert req.specifier.contains(lock[name], prereleases=True), (
            f"{req.name}: locked {lock[name]} is outside {req.specifier}: run `make lock`"
        )


def test_the_installed_environment_is_the_locked_one() -> None:
    """What this test run imports is what the lock says (the lock was installed, not floated)."""
    from importlib.metadata import version

    lock = locked("controller.lock")
    for name in ("typer", "pydantic", "ansible-core", "ray", "boto3"):
        assert Version(version(name)) == lock[canonicalize_name(name)], name


def test_side_locks_are_hash_pinned() -> None:
    assert "verl" in locked("verl-config.lock")
    assert "checkov" in locked("checkov.lock")
