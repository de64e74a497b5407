"""rlinfra's CLI in the tests: in-process (fast, for usage errors and renders) or as the
installed program (for what a user's shell sees: exit codes, signals, the environment)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers.paths import BIN, RLINFRA, cache_root


@dataclass
class CliResult:
    code: int
    out: str
    err: str


CliRunner = Callable[..., CliResult]


def run_in_process(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *argv: str
) -> CliResult:
    """``rlinfra ARGV`` through its entry point in this process, its output captured."""
    from rlinfra import cli as cli_module

    monkeypatch.setattr(sys, "argv", ["rlinfra", *argv])
    capsys.readouterr()
    try:
        cli_module.main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    captured = capsys.readouterr()
    return CliResult(code, captured.out, captured.err)


def usage_line(result: CliResult) -> str:
    """The one `Error: ` line of a usage error (exit 2); fails on anything else."""
    assert result.code == 2, (result.code, result.out, result.err)
    lines = [line for line in result.err.splitlines() if line.startswith("Error: ")]
    assert len(lines) == 1, result.err
    return lines[0]


def files_under(folder: Path) -> list[str]:
    if not folder.exists():
        return []
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def write_yaml(folder: Path, data: dict[str, object], name: str = "p.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(data))
    return path


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment rlinfra runs with as a program in these tests: its own home, the shared
    package cache, the venv's programs first, no machine-wide Terraform CLI config."""
    env = dict(os.environ)
    env.update(
        RLINFRA_HOME=str(home),
        RLINFRA_CACHE=str(cache_root()),
        RLINFRA_QUIET="0",
        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    env.pop("TF_CLI_CONFIG_FILE", None)
    env.update(extra)
    return env


@dataclass
class Rlinfra:
    """The installed ``rlinfra`` with a fixed environment."""

    env: dict[str, str]

    def run(
        self,
        *argv: str,
        check: bool = True,
        timeout: float = 900,
        env: dict[str, str] | None = None,
        explain: Callable[[str], str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [RLINFRA, *argv],
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if check and result.returncode != 0:
            more = explain(result.stderr) if explain else ""
            raise AssertionError(
                f"rlinfra {' '.join(argv)} exited {result.returncode}\n{result.stdout}\n"
                f"{result.stderr}{more}"
            )
        return result

    def json(self, *argv: str, env: dict[str, str] | None = None) -> Any:
        return json.loads(self.run(*argv, "--json", env=env).stdout)
