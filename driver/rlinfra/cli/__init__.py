"""The `rlinfra` command line: one module per command group, each parsing, asking and printing
only; the work is done by ``rlinfra.ops``.

Imports of heavy libraries (ansible-runner, python-terraform, ray) happen inside the commands
that need them, so `rlinfra --help` starts fast.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from rlinfra.cli import cluster, jobs, nodes, profiles
from rlinfra.cli.common import app
from rlinfra.cli.entry import main

# Every command, in the order `rlinfra --help` lists them.
COMMANDS = (
    ("profiles", profiles.profiles),
    ("validate", profiles.validate),
    ("render", profiles.render),
    ("plan", profiles.plan),
    ("up", cluster.up),
    ("run", jobs.run),
    ("logs", jobs.logs),
    ("status", cluster.status),
    ("exec", nodes.exec_),
    ("ssh", nodes.ssh),
    ("check", cluster.check),
    ("down", cluster.down),
    ("lock", profiles.lock),
)


def _summary(command: Callable[..., Any]) -> str:
    """A command's line in `rlinfra --help`: the first paragraph of its docstring, whole and on
    one line (the formatter flows it; left to itself it would cut it short with "...")."""
    first = inspect.cleandoc(command.__doc__ or "").split("\n\n")[0]
    return " ".join(first.split())


for _name, _command in COMMANDS:
    app.command(name=_name, short_help=_summary(_command))(_command)

__all__ = ["COMMANDS", "app", "main"]
