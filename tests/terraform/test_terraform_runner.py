"""rlinfra's Terraform runner (runners/terraform.py) on a root of Terraform's built-in resources
only: no provider, no cloud, real `terraform` commands."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rlinfra.runners.terraform import INIT_STAMP, Terraform

pytestmark = pytest.mark.skipif(shutil.which("terraform") is None, reason="terraform not on PATH")


def test_init_runs_again_only_when_what_it_reads_changed(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "main.tf").write_text('resource "terraform_data" "this" {\n  input = "a"\n}\n')
    log = tmp_path / "logs" / "terraform-root-init.log"

    Terraform(root, tmp_path / "logs").init()
    assert log.read_text().startswith("$ ")  # terraform init ran
    assert (root / INIT_STAMP).is_file()

    # Nothing init reads changed: a new run (a new `up`, `plan` or `down`) does not init again,
    # and the root still plans and applies.
    again = Terraform(root, tmp_path / "logs")
    again.init()
    assert log.read_text().startswith("# not run")
    assert again.plan() is True
    again.apply()
    assert again.has_state()

    # A changed configuration file (here a new module call) is read by init: it runs again.
    (root / "child").mkdir()
    (root / "child" / "main.tf").write_text('output "x" {\n  value = 1\n}\n')
    (root / "main.tf").write_text(
        (root / "main.tf").read_text() + 'module "child" {\n  source = "./child"\n}\n'
    )
    changed = Terraform(root, tmp_path / "logs")
    changed.init()
    assert log.read_text().startswith("$ ")
    assert changed.plan() is False  # the module only adds an output: nothing to change

    # So do the CLI settings.
    Terraform(root, tmp_path / "logs", "# other settings\n").init()
    assert log.read_text().startswith("$ ")

    # A failed init leaves no stamp behind: the next run tries again.
    (root / "main.tf").write_text('module "gone" {\n  source = "./nowhere"\n}\n')
    with pytest.raises(Exception, match="init"):
        Terraform(root, tmp_path / "logs").init()
    assert not (root / INIT_STAMP).exists()
