"""Shared fixtures: an isolated RLINFRA_HOME, and the CLI run in-process."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "rlinfra-home"
    monkeypatch.setenv("RLINFRA_HOME", str(folder))
    monkeypatch.delenv("RLINFRA_PROFILE_PATH", raising=False)
    monkeypatch.setenv("RLINFRA_QUIET", "1")
    # No test asks an instance metadata service for AWS credentials.
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return folder


@dataclass
class CliResult:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    from rlinfra import cli as cli_module

    def run(*argv: str) -> CliResult:
        monkeypatch.setattr(sys, "argv", ["rlinfra", *argv])
        capsys.readouterr()
        try:
            cli_module.main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    yield run


def files_under(folder: Path) -> list[str]:
    if not folder.exists():
        return []
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def is_root() -> bool:
    return os.geteuid() == 0


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


# ---- gcp-storage-emulator (the GCP bucket tests: unit and Ansible) ----------------------


def find_emulator() -> str | None:
    configured = os.environ.get("RLINFRA_GCS_EMULATOR")
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    beside = Path(sys.executable).with_name("gcp-storage-emulator")
    if beside.exists():
        return str(beside)
    return shutil.which("gcp-storage-emulator")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def storage_emulator(tmp_path: Path) -> Iterator[str]:
    """gcp-storage-emulator on a free loopback port (in memory), stopped by pid at the end."""
    executable = find_emulator()
    if executable is None:
        pytest.skip(
            "gcp-storage-emulator not found: set RLINFRA_GCS_EMULATOR to its executable "
            "(pip install gcp-storage-emulator into a venv of its own; it needs google-crc32c)"
        )
    port = free_port()
    log = (tmp_path / "emulator.log").open("w")
    process = subprocess.Popen(
        [executable, "start", "--host", "127.0.0.1", "--port", str(port), "--in-memory"],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(url + "/", timeout=2):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError((tmp_path / "emulator.log").read_text()) from None
                time.sleep(0.1)
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        log.close()
