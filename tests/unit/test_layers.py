"""The driver's layer contract (pyproject.toml's [tool.importlinter]), run with import-linter.

The contract holds for the tree as it is, and breaks on each kind of import it forbids when that
import is planted in a copy of the packages: a lower layer importing a higher one (also behind
TYPE_CHECKING or inside a function), two modules importing each other, and the node package
importing the driver, a cloud's profile section or the cloud registry importing what sits above
the profile (the profile reads the registry's list of sections).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.paths import REPO

LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint(cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_the_tree_keeps_every_contract() -> None:
    done = _lint(REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Contracts: 5 kept, 0 broken." in done.stdout


@pytest.fixture()
def copy(tmp_path: Path) -> Path:
    """The two packages and the contract, copied: imports planted here reach no real file."""
    for package in ("rlinfra", "rlinfra_node"):
        shutil.copytree(
            REPO / "driver" / package,
            tmp_path / "src" / package,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _plant(copy: Path, module: str, text: str) -> None:
    path = copy / "src" / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = path.with_suffix("") / "__init__.py"
    path.write_text(path.read_text() + "\n" + text + "\n")


def _broken(copy: Path) -> str:
    done = _lint(copy, copy / "src")
    assert done.returncode == 1, done.stdout + done.stderr
    return done.stdout


def test_the_copy_keeps_every_contract_before_anything_is_planted(copy: Path) -> None:
    done = _lint(copy, copy / "src")
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_lower_layer_importing_a_higher_one_breaks_the_layers(copy: Path) -> None:
    _plant(copy, "rlinfra.plan", "from rlinfra.cli import app  # noqa")
    out = _broken(copy)
    assert "rlinfra's layers" in out and "BROKEN" in out
    assert "rlinfra.plan -> rlinfra.cli" in out


def test_an_upward_import_behind_type_checking_or_in_a_function_counts(copy: Path) -> None:
    _plant(
        copy,
        "rlinfra.record",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from rlinfra.plan import Plan",
    )
    _plant(copy, "rlinfra.profile", "def _late():\n    from rlinfra.ops import up\n    return up")
    out = _broken(copy)
    assert "rlinfra.record -> rlinfra.plan" in out
    assert "rlinfra.profile -> rlinfra.ops.up" in out


def test_two_modules_importing_each_other_break_the_cycle_contract(copy: Path) -> None:
    # errors and ui share the bottom layer, which the layers contract lets import each other.
    _plant(copy, "rlinfra.errors", "from rlinfra import ui  # noqa")
    _plant(copy, "rlinfra.ui", "from rlinfra import errors  # noqa")
    out = _broken(copy)
    assert "no import cycles between the modules of any package BROKEN" in out
    assert "rlinfra's layers: cli, operations" in out and "record KEPT" in out


def test_the_node_package_importing_the_driver_breaks_its_contract(copy: Path) -> None:
    _plant(copy, "rlinfra_node.progress", "from rlinfra import errors  # noqa")
    out = _broken(copy)
    assert "the node package runs on nodes without the driver BROKEN" in out
    assert "rlinfra_node.progress -> rlinfra.errors" in out


def test_a_new_module_outside_every_layer_is_refused(copy: Path) -> None:
    (copy / "src" / "rlinfra" / "newcomer.py").write_text('"""Not in any layer yet."""\n')
    out = _broken(copy)
    assert "newcomer" in out


def test_a_profile_section_importing_above_the_profile_breaks_its_contract(copy: Path) -> None:
    _plant(copy, "rlinfra.clouds.gcp.section", "from rlinfra.profile import Profile  # noqa")
    out = _broken(copy)
    assert "the clouds' profile sections sit below the profile BROKEN" in out
    assert "rlinfra.clouds.gcp.section -> rlinfra.profile" in out


def test_the_registry_importing_planning_breaks_its_contract(copy: Path) -> None:
    _plant(copy, "rlinfra.clouds", "from rlinfra.plan import Plan  # noqa")
    out = _broken(copy)
    assert "the cloud registry imports nothing above the profile's layers BROKEN" in out
    assert "rlinfra.clouds -> rlinfra.plan" in out


def test_loading_the_profile_model_loads_no_cloud_beyond_its_section() -> None:
    """At run time too: the profile model is made with the registry's sections and nothing of
    the clouds' machinery (a cloud class, a catalog, the plan) is imported for it."""
    code = (
        "import json, sys, rlinfra.profile\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('rlinfra.'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = set(json.loads(done.stdout))
    assert {"rlinfra.clouds", "rlinfra.clouds.ssh.section", "rlinfra.clouds.gcp.section"} <= loaded
    heavy = {m for m in loaded if m.endswith((".cloud", ".catalog", ".preflight", ".base"))}
    assert not heavy and "rlinfra.plan" not in loaded, sorted(loaded)
