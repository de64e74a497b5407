"""Errors the CLI turns into one line and an exit code.

Exit codes: 0 success, 1 an operation failed, 2 bad usage or bad input (nothing was changed).
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


class RlinfraError(Exception):
    """An error with a one-line message, an optional hint and an exit code."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class UsageError(RlinfraError):
    """Bad input: a profile, a flag, a cluster name. Raised before anything changes."""

    exit_code = EXIT_USAGE


class ProfileError(UsageError):
    """A profile that does not validate; names the file and the field."""

    def __init__(self, source: str, field: str, problem: str, hint: str | None = None) -> None:
        where = f"{source}: {field}" if field else source
        super().__init__(f"{where}: {problem}", hint)
        self.source = source
        self.field = field
        self.problem = problem


class OperationError(RlinfraError):
    """A step that ran and failed (Terraform, Ansible, SSH, a check)."""

    exit_code = EXIT_FAILED


class TerraformError(OperationError):
    """A Terraform command that failed; ``output`` is all it printed (for reading error codes)."""

    def __init__(self, message: str, hint: str | None = None, output: str = "") -> None:
        super().__init__(message, hint)
        self.output = output


class ClusterBusyError(UsageError):
    """Another rlinfra command holds the cluster's lock: refused before anything changes."""


class NodeUnreachableError(OperationError):
    """SSH could not connect to a node (or log in there): nothing ran on it."""
