"""Terraform, through python-terraform: init, plan, apply, destroy, output.

Commands are built with python-terraform and run with their output streamed line by line to a
log file in the deployment folder and to the progress line. An interrupted command is left to
finish its own shutdown (Terraform saves its state on SIGINT) before the interrupt propagates.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlinfra import ui
from rlinfra.errors import OperationError, TerraformError, UsageError

INSTALL_HINT = (
    "Install Terraform >= 1.5 (https://developer.hashicorp.com/terraform/install) and put it on "
    "PATH, or point RLINFRA_TERRAFORM at the binary."
)


def terraform_binary() -> str:
    configured = os.environ.get("RLINFRA_TERRAFORM")
    if configured:
        if not (os.path.isfile(configured) and os.access(configured, os.X_OK)):
            raise UsageError(f"RLINFRA_TERRAFORM={configured} is not an executable", INSTALL_HINT)
        return configured
    found = shutil.which("terraform")
    if found is None:
        raise UsageError("terraform not found on PATH", INSTALL_HINT)
    return found


def cli_config(mirror: str | None) -> str:
    """Terraform CLI settings: providers from a filesystem mirror when one is given."""
    if not mirror:
        return ""
    return (
        "# Written by rlinfra: providers come from a filesystem mirror (RLINFRA_TF_PLUGIN_MIRROR).\n"
        "provider_installation {\n"
        f"  filesystem_mirror {{\n    path = {json.dumps(mirror)}\n  }}\n"
        "}\n"
    )


def terraform_version(binary: str) -> str:
    result = subprocess.run(
        [binary, "version", "-json"],
        capture_output=True,
        text=True,
        check=False,
        env=_env(None),
    )
    try:
        return str(json.loads(result.stdout)["terraform_version"])
    except (ValueError, KeyError):
        return "unknown"


def _env(cli_config: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    env["TF_IN_AUTOMATION"] = "1"
    env["TF_INPUT"] = "0"
    env.pop("TF_LOG", None)
    if cli_config is not None:
        env["TF_CLI_CONFIG_FILE"] = str(cli_config)
    else:
        env.pop("TF_CLI_CONFIG_FILE", None)
    return env


# Written in .terraform/ after a successful init: what that init read (Terraform.init).
INIT_STAMP = Path(".terraform") / "rlinfra-init.sha256"
INIT_FILES = (".terraformrc", ".terraform.lock.hcl")
INIT_SUFFIXES = (".tf", ".tf.json", ".tfbackend")


class Terraform:
    """One Terraform root in the deployment folder."""

    def __init__(self, root: Path, log_dir: Path, cli_config_text: str = "") -> None:
        from python_terraform import Terraform as PyTerraform

        self.root = root
        self.log_dir = log_dir
        self.binary = terraform_binary()
        self._tf = PyTerraform(working_dir=str(root), terraform_bin_path=self.binary)
        self._initialized = False
        self.cli_config = root / ".terraformrc"
        if not self.cli_config.is_file() or self.cli_config.read_text() != cli_config_text:
            self.cli_config.write_text(cli_config_text)

    # -- running

    def _run(
        self, title: str, cmd: str, *args: str, ok_codes: tuple[int, ...] = (0,), **options: Any
    ) -> tuple[int, str]:
        argv: list[str] = self._tf.generate_cmd_string(cmd, *args, **options)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"terraform-{self.root.name}-{cmd.replace(' ', '-')}.log"
        lines: list[str] = []
        with ui.step(title) as progress, log_path.open("w") as log:
            log.write("$ " + " ".join(argv) + "\n")
            proc = subprocess.Popen(
                argv,
                cwd=self.root,
                env=_env(self.cli_config),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                bufsize=1,
            )
            try:
                assert proc.stdout is not None
                for line in proc.stdout:
                    log.write(line)
                    lines.append(line)
                    if line.strip():
                        progress.update(line)
                code = proc.wait()
            except KeyboardInterrupt:
                ui.warn("interrupted: letting Terraform save its state")
                try:
                    proc.wait(timeout=300)
                except KeyboardInterrupt:
                    proc.wait(timeout=300)
                raise
            if code not in ok_codes:
                raise TerraformError(
                    f"terraform {cmd} failed in {self.root}: {_last_error(lines)}",
                    f"Full output: {log_path}",
                    output="".join(lines),
                )
        return code, "".join(lines)

    @property
    def remote_state(self) -> bool:
        """The root keeps its state in a backend (backend.tfbackend rendered beside it)."""
        return (self.root / "backend.tfbackend").is_file()

    def init(self) -> None:
        """terraform init, once per instance (has_state needs it first for remote state), and
        not again while nothing that init reads has changed since the last one succeeded here:
        `up`, `plan` and `down` re-run it on every call otherwise, seconds each time."""
        if self._initialized:
            return
        stamp = self.root / INIT_STAMP
        inputs = self._init_inputs()
        # A lock file names providers that init installed under .terraform/providers.
        installed = (self.root / ".terraform" / "providers").is_dir() or not (
            self.root / ".terraform.lock.hcl"
        ).is_file()
        if installed and stamp.is_file() and stamp.read_text() == inputs:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            log_path = self.log_dir / f"terraform-{self.root.name}-init.log"
            log_path.write_text(f"# not run: nothing that init reads changed since ({stamp})\n")
            self._initialized = True
            return
        stamp.unlink(missing_ok=True)
        options: dict[str, Any] = {"no_color": _FLAG, "input": False, "upgrade": False}
        if self.remote_state:
            options["backend_config"] = "backend.tfbackend"
        self._run(f"terraform init ({self.root.name})", "init", **options)
        # The lock file init wrote is among the inputs: deleting it brings init back.
        stamp.parent.mkdir(exist_ok=True)
        stamp.write_text(self._init_inputs())
        self._initialized = True

    def _init_inputs(self) -> str:
        """A digest of what `terraform init` reads: the binary, the CLI settings, every
        configuration and backend file of the root and its modules, and the lock file."""
        import hashlib

        digest = hashlib.sha256()
        binary = Path(self.binary).stat()
        digest.update(f"{self.binary}\0{binary.st_size}\0{binary.st_mtime_ns}\0".encode())
        found: list[Path] = []
        for folder, dirs, names in os.walk(self.root):
            dirs[:] = [d for d in dirs if d != ".terraform"]
            found += [
                Path(folder, name)
                for name in names
                if name in INIT_FILES or name.endswith(INIT_SUFFIXES)
            ]
        for path in sorted(found):
            rel = path.relative_to(self.root)
            digest.update(str(rel).encode() + b"\0" + path.read_bytes() + b"\0")
        return digest.hexdigest() + "\n"

    def plan(
        self, out_file: str = "tfplan", destroy: bool = False, replace: Sequence[str] = ()
    ) -> bool:
        """Save a plan (replacing the resources at ``replace``); True when it changes something."""
        options: dict[str, Any] = {
            "no_color": _FLAG,
            "input": False,
            "out": out_file,
            "detailed_exitcode": _FLAG,
        }
        if destroy:
            options["destroy"] = _FLAG
        if replace:
            options["replace"] = list(replace)
        code, _ = self._run(
            f"terraform plan ({self.root.name})", "plan", ok_codes=(0, 2), **options
        )
        return code == 2

    def apply(self, plan_file: str = "tfplan") -> None:
        self._run(
            f"terraform apply ({self.root.name})",
            "apply",
            plan_file,
            no_color=_FLAG,
            input=False,
            auto_approve=_FLAG,
        )

    def destroy(self) -> None:
        self._run(
            f"terraform destroy ({self.root.name})",
            "destroy",
            no_color=_FLAG,
            input=False,
            auto_approve=_FLAG,
        )

    def show_json(self, plan_file: str = "tfplan") -> dict[str, Any]:
        code, text = self._quiet("show", "-json", plan_file)
        if code != 0:
            raise OperationError(f"terraform show failed in {self.root}: {text.strip()[-300:]}")
        data: dict[str, Any] = json.loads(text)
        return data

    def state_json(self) -> dict[str, Any]:
        """The state as `terraform show -json` gives it ({} when the root has none)."""
        code, text = self._quiet("show", "-json")
        if code != 0:
            raise OperationError(f"terraform show failed in {self.root}: {text.strip()[-300:]}")
        data: dict[str, Any] = json.loads(text) if text.strip() else {}
        return data

    def output(self) -> dict[str, Any]:
        code, text = self._quiet("output", "-json")
        if code != 0:
            raise OperationError(f"terraform output failed in {self.root}: {text.strip()[-300:]}")
        data: dict[str, Any] = json.loads(text)
        return data

    def has_state(self) -> bool:
        """Whether the root's state holds any resource (asks the backend for remote state)."""
        if self.remote_state:
            self.init()
            code, text = self._quiet("state", "list")
            if code != 0:
                raise OperationError(
                    f"terraform state list failed in {self.root}: {text.strip()[-300:]}"
                )
            return bool(text.strip())
        state = self.root / "terraform.tfstate"
        if not state.is_file():
            return False
        try:
            return bool(json.loads(state.read_text()).get("resources"))
        except ValueError:
            return True

    def _quiet(self, *argv: str) -> tuple[int, str]:
        result = subprocess.run(
            [self.binary, *argv],
            cwd=self.root,
            env=_env(self.cli_config),
            capture_output=True,
            text=True,
            check=False,
        )
        return result.returncode, result.stdout if result.returncode == 0 else result.stderr


@dataclass(frozen=True)
class ProviderFailure:
    """An init that could not install a provider: which one, and why."""

    provider: str  # as the configuration names it, e.g. hashicorp/aws
    reason: str  # Terraform's words, on one line
    # Terraform could not connect to the provider registry (no filesystem mirror was used).
    registry_unreachable: bool
    # The filesystem mirror given to Terraform does not hold the provider.
    not_in_mirror: bool


# Terraform's summaries of an init that could not install a provider.
_PROVIDER_ERRORS = (
    "Failed to query available provider packages",
    "Failed to install provider",
    "Failed to resolve provider packages",
)


def provider_failure(output: str) -> ProviderFailure | None:
    """The provider that `terraform init` could not install, read from its output; else None."""
    import re

    if not any(f"Error: {summary}" in output for summary in _PROVIDER_ERRORS):
        return None
    found = re.search(r"provider (?:registry\.terraform\.io/)?([\w.-]+/[\w.-]+)\b", output)
    provider = found.group(1) if found else "a provider"
    detail = re.search(
        r"(?:for provider|installing) [^\n]*?:\s*\n?(?P<reason>(?:.+\n?)+?)(?:\n|$)", output
    )
    reason = " ".join((detail["reason"] if detail else "").split()).rstrip(".")
    flat = " ".join(output.split())
    return ProviderFailure(
        provider=provider,
        reason=reason[:300] or "see Terraform's output",
        registry_unreachable="could not connect to registry." in flat,
        not_in_mirror="was not found in any of the search locations" in flat,
    )


def _last_error(lines: list[str]) -> str:
    """The first line of Terraform's last error block, or its last line of output."""
    for index in range(len(lines) - 1, -1, -1):
        text = lines[index].strip().lstrip("│╷╵ ").strip()
        if text.startswith("Error:"):
            detail = [
                line.strip().lstrip("│ ").strip()
                for line in lines[index + 1 : index + 8]
                if line.strip().lstrip("│╷╵ ").strip()
            ]
            tail = next(
                (d for d in detail if not d.startswith("on ") and not d.startswith("with ")), ""
            )
            return (text + (" " + tail if tail else ""))[:400]
    rest = [line.strip() for line in lines if line.strip()]
    return rest[-1][:400] if rest else "no output"


def _flag() -> Any:
    from python_terraform import IsFlagged

    return IsFlagged


_FLAG: Any = _flag()
