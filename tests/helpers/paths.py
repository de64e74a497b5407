"""Where things are: the repository, the venv's programs, the test cache."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
RLINFRA = str(BIN / "rlinfra")
PROFILES = REPO / "profiles"
MODULES = REPO / "terraform" / "modules"


def cache_root() -> Path:
    """The package caches the tests fill (wheelhouse, venvs, schemas); .ci/run removes it."""
    return Path(os.environ.get("RLINFRA_TEST_CACHE", "/var/tmp/rlinfra-test-cache"))
