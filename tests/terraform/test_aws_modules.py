"""The AWS modules and roots, statically: fmt, validate, `terraform test` with a mocked provider,
and a checkov scan. The real hashicorp/aws provider comes from a filesystem mirror on this machine
(found at run time, or from RLINFRA_TF_PLUGIN_MIRROR), else from Terraform's registry.

What the roots make for real (applied through `rlinfra up` against the AWS API emulator, checked
with boto3, converged, taken down): tests/terraform/test_aws_driver.py. The mocked-provider tests
cover what the emulator lacks: placement groups and EFA interfaces.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from helpers.paths import MODULES, REPO
from helpers.terraform import (
    Terraform,
    find_checkov,
    needs_terraform,
    run,
    terraform_env,
    terraform_missing,
)

ROOTS = REPO / "terraform" / "roots" / "aws"
AWS_MODULES = ("aws_network", "aws_cluster", "aws_bucket")
ROOT_MODULES = {"cluster": ("aws_network", "aws_cluster"), "storage": ("aws_bucket",)}


def copy_modules(tmp: Path) -> Path:
    """The AWS modules, side by side (the cluster example uses ../../../aws_network)."""
    target = tmp / "modules"
    for name in AWS_MODULES:
        shutil.copytree(
            MODULES / name,
            target / name,
            ignore=shutil.ignore_patterns(".terraform", "*.tfstate*", ".terraform.lock.hcl"),
        )
    return target


# --- fmt and validate ------------------------------------------------------------------------------


@needs_terraform
def test_fmt_check_of_aws_modules_and_roots() -> None:
    paths = [str(MODULES / name) for name in AWS_MODULES] + [str(ROOTS)]
    result = run(["terraform", "fmt", "-check", "-recursive", "-diff", *paths])
    assert result.returncode == 0, f"terraform fmt -check found changes:\n{result.stdout}"


def _init_then(tf: Terraform, *args: str) -> subprocess.CompletedProcess[str]:
    tf.init()
    return tf(*args, check=False)


@pytest.fixture(scope="module")
def static_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Future[Any]]]:
    """`terraform validate` of each module's example and `terraform test` of aws_cluster, started
    side by side (each mostly waits for its own provider process to start)."""
    reason = terraform_missing()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("aws-static")
    modules = copy_modules(tmp)
    env = terraform_env(tmp)
    with ThreadPoolExecutor(max_workers=len(AWS_MODULES) + 1) as pool:
        jobs: dict[str, Future[Any]] = {
            name: pool.submit(
                _init_then, Terraform(modules / name / "examples" / "basic", env), "validate"
            )
            for name in AWS_MODULES
        }
        jobs["test"] = pool.submit(_init_then, Terraform(modules / "aws_cluster", env), "test")
        yield jobs


@needs_terraform
@pytest.mark.parametrize("module", AWS_MODULES)
def test_validate_example(module: str, static_runs: dict[str, Future[Any]]) -> None:
    result = static_runs[module].result(timeout=600)
    assert result.returncode == 0, f"terraform validate failed:\n{result.stdout}{result.stderr}"
    assert "Success" in result.stdout


@needs_terraform
def test_module_versions_state_lower_bounds_and_roots_pin_exactly() -> None:
    for name in AWS_MODULES:
        text = (MODULES / name / "versions.tf").read_text()
        assert re.search(r'version\s*=\s*">= 5\.0"', text), name
        assert re.search(r'required_version\s*=\s*">= 1\.\d+"', text), name
    for root in ROOT_MODULES:
        text = (ROOTS / root / "versions.tf").read_text()
        assert re.search(r'version\s*=\s*"= 5\.100\.0"', text), root


# --- terraform test, mocked provider -----------------------------------------------------------------


@needs_terraform
def test_aws_cluster_validation_rules_with_mocked_provider(
    static_runs: dict[str, Future[Any]],
) -> None:
    """aws_cluster's tests/*.tftest.hcl with `mock_provider "aws"`: nothing reaches AWS or the
    emulator. Covers what moto lacks: placement groups and EFA interfaces."""
    result = static_runs["test"].result(timeout=600)
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, f"terraform test failed:\n{result.stdout[-6000:]}{result.stderr}"
    match = re.search(r"(\d+) passed, 0 failed", summary)
    assert match and int(match.group(1)) >= 10, summary
    for run_name in (
        "two_nodes_share_a_placement_group_and_follow_the_contract",
        "one_cpu_node_without_a_bucket",
        "placement_group_turned_off_and_a_given_image",
        "world_refused_without_allow_public",
        "zero_nodes_refused",
        "sixty_five_nodes_refused",
        "efa_on_unsupported_type_refused",
        "efa_on_p5_gives_each_node_an_efa_interface",
    ):
        assert f'run "{run_name}"... pass' in result.stdout, run_name


# --- checkov -------------------------------------------------------------------------------------------


def test_checkov_scan_of_aws_modules_passes() -> None:
    checkov = find_checkov()
    if checkov is None:
        pytest.skip("checkov not found (pip install checkov, or set RLINFRA_CHECKOV)")
    # One scan per module: given several -d folders, checkov 3.3 reports the first folder's
    # results again for the others, so a problem in a later module would go unseen.
    for name in AWS_MODULES:
        # --skip-download: no guideline downloads (no internet here); the checks are local.
        argv = [checkov, "-d", str(MODULES / name), "--framework", "terraform"]
        argv += ["--quiet", "--compact", "--skip-download"]
        result = run(argv, env={**os.environ, "BC_SKIP_MAPPING": "TRUE"}, timeout=300)
        assert result.returncode == 0, f"checkov found problems in {name}:\n{result.stdout[-6000:]}"
        counts = re.findall(
            r"Passed checks: (\d+), Failed checks: (\d+), Skipped checks: (\d+)", result.stdout
        )
        assert len(counts) == 1 and counts[0][1] == "0", (name, result.stdout)
        assert int(counts[0][0]) > 0, (name, result.stdout)  # it did check something
    # Every skip sits in the resource it concerns and says why.
    for tf_file in MODULES.glob("aws_*/**/*.tf"):
        for line in tf_file.read_text().splitlines():
            if "checkov:skip" in line:
                assert re.search(r"#checkov:skip=CKV2?_AWS_\d+:\S.{20,}", line), (tf_file, line)
