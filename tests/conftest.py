"""Fixtures of every layer: an isolated RLINFRA_HOME, the CLI run in-process, the API emulators
(one of each per test process, shared by every file that needs it), and the rule that a green
run in CI skipped nothing but the GPU-only tests.

Shared code lives in tests/helpers (imported as ``helpers``); each layer's conftest.py holds
that layer's fixtures; no test module imports another.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.cli import CliRunner, run_in_process
from helpers.emulators import AwsEmulator, aws_emulator, aws_emulator_missing, gcs_emulator


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "rlinfra-home"
    monkeypatch.setenv("RLINFRA_HOME", str(folder))
    monkeypatch.delenv("RLINFRA_PROFILE_PATH", raising=False)
    monkeypatch.setenv("RLINFRA_QUIET", "1")
    # No test asks an instance metadata service for AWS credentials.
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return folder


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    """``cli("validate", "-p", path)`` runs rlinfra in this process: a CliResult."""
    return lambda *argv: run_in_process(capsys, monkeypatch, *argv)


@pytest.fixture(scope="session")
def aws_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AwsEmulator]:
    """The AWS API emulator (moto on loopback) of this test process. Tests name what they make
    uniquely and leave the server's settings as they found them."""
    missing = aws_emulator_missing()
    if missing:
        pytest.skip(missing)
    with aws_emulator(tmp_path_factory.mktemp("aws-emulator")) as emulator:
        yield emulator


@pytest.fixture(scope="session")
def storage_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The GCS JSON API emulator (in memory, on loopback) of this test process: its URL."""
    with gcs_emulator(tmp_path_factory.mktemp("gcs-emulator")) as url:
        yield url


# ---- each test process its own temporary root -------------------------------------------------
# pytest numbers its default roots per user (/tmp/pytest-of-root/pytest-N) and removes old ones
# at start: two processes at once would share the numbering and remove each other's folders.
_own_basetemp: Path | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _own_basetemp
    if config.option.basetemp is None:
        _own_basetemp = Path(tempfile.mkdtemp(prefix="rlinfra-pytest-"))
        config.option.basetemp = str(_own_basetemp)


# ---- no silent skips in CI -----------------------------------------------------------------
# With RLINFRA_FORBID_SKIPS=1 (.ci/run sets it) a skipped test fails the run, unless it is one of
# the GPU-only tests (their skip reason says so): a green run elsewhere must prove as much here.
GPU_ONLY_REASON = "needs an NVIDIA GPU"
_unexpected_skips: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and os.environ.get("RLINFRA_FORBID_SKIPS") == "1":
        reason = str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else ""
        if GPU_ONLY_REASON not in reason:
            _unexpected_skips.append(f"{report.nodeid}: {reason}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _unexpected_skips:
        lines = "\n  ".join(_unexpected_skips)
        sys.stderr.write(f"\nRLINFRA_FORBID_SKIPS: tests skipped that must run here:\n  {lines}\n")
        session.exitstatus = 1
    # A passing run's temporary root goes; a failing one's stays for a look.
    if _own_basetemp is not None:
        if session.exitstatus == 0:
            shutil.rmtree(_own_basetemp, ignore_errors=True)
        else:
            sys.stderr.write(f"\ntemporary files of this run: {_own_basetemp}\n")
