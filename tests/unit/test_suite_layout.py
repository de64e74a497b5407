"""The suite's own frame: shared code lives in tests/helpers, fixtures in each layer's
conftest.py, and no test module imports another (so a module can move or run alone)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.paths import REPO

TESTS = REPO / "tests"


def imported_modules(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def offending_imports(root: Path) -> list[str]:
    """Imports of a test module or a conftest, by any file under ``root``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for name in imported_modules(path):
            top = name.split(".")[-1]
            if top.startswith("test_") or top == "conftest" or name.startswith("tests."):
                found.append(f"{path.relative_to(root)}: import {name}")
    return found


def test_no_test_module_or_conftest_is_imported() -> None:
    assert offending_imports(TESTS) == []


def test_the_check_finds_an_import_of_another_test_module(tmp_path: Path) -> None:
    (tmp_path / "test_a.py").write_text("from test_b import helper\nimport conftest\n")
    (tmp_path / "test_b.py").write_text("from helpers.cli import CliResult\n")
    assert offending_imports(tmp_path) == [
        "test_a.py: import test_b",
        "test_a.py: import conftest",
    ]


def test_each_layer_has_its_conftest_and_helpers_are_not_tests() -> None:
    for layer in ("unit", "terraform", "ansible", "e2e", "verl"):
        assert (TESTS / layer).is_dir(), layer
    for layer in ("terraform", "ansible", "verl"):
        assert (TESTS / layer / "conftest.py").is_file(), layer
    assert not list((TESTS / "helpers").glob("test_*.py"))


def test_two_processes_claim_different_subnets_and_a_dead_claim_is_free_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two test processes at once never take the same test /24 (helpers.netbed)."""
    from helpers import netbed

    monkeypatch.setattr(netbed, "CLAIMS", tmp_path / "claims")
    script = (
        "import sys, time; sys.path.insert(0, sys.argv[1]); from pathlib import Path\n"
        "from helpers import netbed\n"
        "netbed.CLAIMS = Path(sys.argv[2])\n"
        "print(netbed.claim_subnet().third, flush=True); time.sleep(3)\n"
    )
    argv = [sys.executable, "-c", script, str(TESTS), str(tmp_path / "claims")]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    thirds = [int(p.stdout.readline()) for p in procs if p.stdout]
    for p in procs:
        p.wait(timeout=30)
    assert len(set(thirds)) == 2, thirds
    # Both processes are gone: their claims no longer hold, and this process may take one.
    mine = netbed.claim_subnet()
    assert mine.third == max(thirds)  # the first free third, as the first of the two took it
    mine.release()
    assert not mine.path.exists()
