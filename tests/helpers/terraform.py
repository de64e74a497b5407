"""Terraform in the tests: the AWS provider's filesystem mirror (found at run time, or from
RLINFRA_TF_PLUGIN_MIRROR), a clean environment with a CLI config of the test's own, a runner."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from helpers.paths import REPO

PROVIDER_DIR = ("registry.terraform.io", "hashicorp", "aws")


def find_provider_mirror() -> Path | None:
    """The filesystem mirror root that holds hashicorp/aws (the folder above registry.terraform.io).

    RLINFRA_TF_PLUGIN_MIRROR may name the root or any folder inside it; otherwise a few usual
    places are searched, a few levels deep, for a file named terraform-provider-aws_*.
    """
    patterns = [
        "/".join(PROVIDER_DIR) + "/*/*/terraform-provider-aws_*",  # unpacked layout
        "/".join(PROVIDER_DIR) + "/terraform-provider-aws_*.zip",  # packed layout
    ]
    bases: list[Path] = []
    override = os.environ.get("RLINFRA_TF_PLUGIN_MIRROR")
    if override:
        bases.append(Path(override))
    else:
        bases += [Path("/opt"), Path("/usr/local/share"), Path("/usr/share")]
        bases += [Path.home() / ".terraform.d", Path.home() / ".local" / "share" / "terraform"]
    for base in bases:
        if not base.is_dir():
            continue
        # The root may be the base itself, a folder in it, or two levels down.
        for prefix in ("", "*/", "*/*/"):
            for pattern in patterns:
                for hit in sorted(base.glob(prefix + pattern)):
                    parts = hit.parts
                    index = parts.index(PROVIDER_DIR[0])
                    return Path(*parts[:index])
        # RLINFRA_TF_PLUGIN_MIRROR may point inside the mirror.
        for parent in [base, *base.parents]:
            if parent.name == PROVIDER_DIR[0]:
                return parent.parent
    return None


def find_checkov() -> str | None:
    """checkov: RLINFRA_CHECKOV, the Makefile's .venv-checkov, or one beside this Python."""
    override = os.environ.get("RLINFRA_CHECKOV")
    if override:
        return override if Path(override).exists() else None
    for candidate in (
        REPO / ".venv-checkov" / "bin" / "checkov",
        Path(sys.executable).parent / "checkov",
    ):
        if candidate.exists() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("checkov")


MIRROR = find_provider_mirror()


def terraform_missing() -> str | None:
    """Why Terraform cannot run here (None when it can). Without a filesystem mirror
    (RLINFRA_TF_PLUGIN_MIRROR), Terraform's registry is used."""
    if shutil.which("terraform") is None:
        return "terraform is not on PATH"
    return None


needs_terraform = pytest.mark.skipif(
    terraform_missing() is not None, reason=str(terraform_missing())
)


def mirror_env() -> dict[str, str]:
    """RLINFRA_TF_PLUGIN_MIRROR for rlinfra itself, where a mirror was found."""
    return {"RLINFRA_TF_PLUGIN_MIRROR": str(MIRROR)} if MIRROR else {}


def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    kwargs.setdefault("timeout", 600)
    return subprocess.run(argv, **kwargs)


def terraform_env(tmp: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment without the machine's TF_* and AWS_* settings, with a CLI config that
    installs hashicorp/aws from the mirror when there is one (else from Terraform's registry)."""
    cli_config = tmp / "terraformrc"
    if MIRROR is None:
        cli_config.write_text("")
    else:
        cli_config.write_text(
            "provider_installation {\n"
            "  filesystem_mirror {\n"
            f"    path    = {json.dumps(str(MIRROR))}\n"
            '    include = ["registry.terraform.io/hashicorp/aws"]\n'
            "  }\n"
            "  direct {\n"
            '    exclude = ["registry.terraform.io/hashicorp/aws"]\n'
            "  }\n"
            "}\n"
        )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_", "AWS_"))}
    env.update(
        TF_CLI_CONFIG_FILE=str(cli_config),
        TF_IN_AUTOMATION="1",
        TF_INPUT="0",
        CHECKPOINT_DISABLE="1",
    )
    env.update(extra or {})
    return env


@dataclass
class Terraform:
    workdir: Path
    env: dict[str, str]

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = run(["terraform", *args, "-no-color"], cwd=self.workdir, env=self.env)
        if check and result.returncode != 0:
            pytest.fail(
                f"terraform {' '.join(args)} in {self.workdir} exited {result.returncode}\n"
                f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
            )
        return result

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            ["terraform", *args, "-no-color"],
            cwd=self.workdir,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def init(self) -> None:
        self("init", "-input=false")

    def output(self) -> dict[str, Any]:
        raw = json.loads(self("output", "-json").stdout)
        return {name: value["value"] for name, value in raw.items()}


def provider_free_env(tmp: Path) -> dict[str, str]:
    """No TF_* settings of the machine's (TF_CLI_CONFIG_FILE may name a missing file); an empty
    CLI config: roots that install no provider download nothing."""
    cli_config = tmp / "terraformrc"
    cli_config.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_")}
    env.update(
        TF_CLI_CONFIG_FILE=str(cli_config),
        TF_IN_AUTOMATION="1",
        TF_INPUT="0",
        CHECKPOINT_DISABLE="1",
    )
    return env


def terraform_in(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``terraform ARGS`` in a provider-free root (variables, locals and outputs only)."""
    return run(["terraform", *args, "-no-color"], cwd=folder, env=provider_free_env(folder))
