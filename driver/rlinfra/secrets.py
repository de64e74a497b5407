"""Secrets: where their values come from, checked before anything changes.

A value never goes into a rendered file, Terraform's variables or state, a log or a process's
arguments that rlinfra starts: `up` and `run` hand it to the job on SSH's standard input
(rlinfra.ops.jobs). This module only finds the values: ``--secret NAME`` (the environment),
``NAME=@FILE``, ``NAME=-`` (standard input) or, at a cost that is printed, ``NAME=VALUE``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from rlinfra.errors import UsageError
from rlinfra.profile import Profile

LITERAL_SECRET_WARNING = (
    "--secret {name}=VALUE puts the value in this process's arguments, where other users of "
    "this machine (ps) and your shell history can read it; prefer --secret {name} (from the "
    "environment), --secret {name}=@FILE or --secret {name}=- (standard input)"
)


def secret_value(
    name: str, flag: str | None, environ: Mapping[str, str], read_stdin: Callable[[], str]
) -> str:
    """The value a ``--secret`` flag names; UsageError when it is missing or empty.

    ``NAME``: from the environment; ``NAME=@FILE``: the file's text; ``NAME=-``: one line of
    standard input; ``NAME=VALUE``: the value itself. A trailing newline is dropped.
    """
    if flag is None:
        if name not in environ:
            raise UsageError(
                f"--secret {name}: {name} is not set in the environment",
                f"Export {name}, or pass --secret {name}=@FILE.",
            )
        value, where = environ[name], "in the environment"
    elif flag == "-":
        value, where = read_stdin(), "on standard input"
    elif flag.startswith("@"):
        path = Path(flag[1:]).expanduser()
        try:
            value = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or "not UTF-8 text"
            raise UsageError(f"--secret {name}=@{path}: cannot read: {reason}") from None
        where = f"in {path}"
    else:
        value, where = flag, "on the command line"
    value = value.removesuffix("\n").removesuffix("\r")
    if not value:
        raise UsageError(f"--secret {name}: the value {where} is empty")
    return value


@dataclass(frozen=True)
class SecretStatus:
    """A secret the profile declares (or the command line adds) and whether a value is at hand."""

    name: str
    required: bool
    available: bool


def secret_status(
    profile: Profile, flags: Mapping[str, str | None], environ: Mapping[str, str]
) -> list[SecretStatus]:
    names = list(profile.secrets) + [n for n in flags if n not in profile.secrets]
    return [
        SecretStatus(
            name=name,
            required=profile.secrets.get(name) == "required",
            available=name in flags or bool(environ.get(name)),
        )
        for name in names
    ]


def resolve_secrets(
    profile: Profile,
    flags: Mapping[str, str | None],
    environ: Mapping[str, str],
    source: str,
    require: bool = True,
    read_stdin: Callable[[], str] | None = None,
) -> dict[str, str]:
    """Secret values from ``--secret`` flags or the caller's environment.

    Every flag must yield a non-empty value. With ``require`` (``up``, ``run``), a required
    secret without a value is an error here, before any cloud call; without it (``validate``,
    ``render``, ``plan``, which need no value) it is only listed by ``secret_status``.
    """
    import sys

    def stdin_line() -> str:
        if read_stdin is not None:
            return read_stdin()
        return sys.stdin.readline()

    values: dict[str, str] = {}
    for name, flag in flags.items():
        values[name] = secret_value(name, flag, environ, stdin_line)
    for name, requirement in profile.secrets.items():
        if name in values:
            continue
        if environ.get(name):
            values[name] = environ[name]
        elif requirement == "required" and require:
            raise UsageError(
                f"{source}: secrets.{name}: required secret is not set",
                f"Export {name} in your shell and pass --secret {name}, "
                f"or pass --secret {name}=@FILE.",
            )
    return values
