"""Usage errors through the installed console script: one line, exit 2, no traceback.

These run `rlinfra` as a subprocess (the entry point pip installed), so whichever Typer/Click
release the environment holds is the one under test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def rlinfra_script() -> str:
    found = Path(sys.executable).parent / "rlinfra"
    if found.exists():
        return str(found)
    which = shutil.which("rlinfra")
    assert which, "the rlinfra console script is not installed"
    return which


def run(home: Path, *argv: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLINFRA_")}
    env.update(RLINFRA_HOME=str(home), RLINFRA_QUIET="1", COLUMNS="200")
    return subprocess.run(
        [rlinfra_script(), *argv],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


CASES = [
    # (argv, what the line must say)
    (["render", "--bogus"], ["No such option: --bogus", "rlinfra render --help"]),
    (["render", "-p", "h100x1"], ["Missing option '--out'", "rlinfra render --help"]),
    (["plan", "-p", "local", "--accelerators"], ["requires an argument", "rlinfra plan --help"]),
    (["up", "--num-nodes", "many"], ["Invalid value for '--num-nodes'", "rlinfra up --help"]),
    (["status", "--endpoint", "web"], ["Invalid value for '--endpoint'", "rlinfra status --help"]),
    (["profiles", "extra"], ["unexpected extra argument", "rlinfra profiles --help"]),
    (["down"], ["Missing argument", "rlinfra down --help"]),
    (["nosuch"], ["No such command 'nosuch'", "rlinfra --help"]),
    (["validate", "--bogus-flag"], ["No such option: --bogus-flag", "rlinfra validate --help"]),
    (["logs", "x", "--job"], ["requires an argument", "rlinfra logs --help"]),
]


@pytest.mark.parametrize(("argv", "fragments"), CASES, ids=[" ".join(c[0]) for c in CASES])
def test_usage_error_is_one_line(tmp_path: Path, argv: list[str], fragments: list[str]) -> None:
    result = run(tmp_path / "home", *argv)
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: "), lines[0]
    assert "Traceback" not in result.stderr + result.stdout
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert not (tmp_path / "home").exists(), "a usage error created the state folder"


def test_end_of_input_at_a_prompt_is_a_clean_refusal(tmp_path: Path) -> None:
    """Ctrl-D at `down`'s question: exit 2, one line, nothing destroyed (no cluster here)."""
    home = tmp_path / "home"
    (home / "clusters" / "gone").mkdir(parents=True)
    (home / "clusters" / "gone" / "record.json").write_text(
        '{"cluster": "gone", "cloud": "local", "stage": "down", "profile": "local"}'
    )
    result = run(home, "down", "gone", stdin="")
    assert "Traceback" not in result.stderr + result.stdout
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert result.stderr.strip().startswith("Error: ")
