"""Shared fixtures: an isolated RLINFRA_HOME, and the CLI run in-process."""

from __future__ import annotations

import os
import sys
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
