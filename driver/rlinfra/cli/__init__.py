"""The `rlinfra` command line: one module per command group, each parsing, asking and printing
only; the work is done by ``rlinfra.ops``.

Imports of heavy libraries (ansible-runner, python-terraform, ray) happen inside the commands
that need them, so `rlinfra --help` starts fast.
"""

from __future__ import annotations

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
for _name, _command in COMMANDS:
    app.command(name=_name)(_command)

__all__ = ["COMMANDS", "app", "main"]
