"""What every command shares: the Typer app, the options, the request a command line makes,
and printing JSON and errors.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from rlinfra.errors import RlinfraError, UsageError

DEFAULT_PROFILE = "local"

# Help is laid out by Typer's plain formatter (`rich_markup_mode=None`), not its Rich panels:
# that formatter re-flows each paragraph of a docstring to the terminal's width (Rich markup
# mode keeps the source's line breaks after the first paragraph and in the command list), shows
# a value placeholder only for options that take a value (the panels show one, `<bool>`, for
# flags too), and takes `[...]` in help text literally. Its lines grow with the terminal up to
# `max_content_width` columns. A paragraph whose lines must stay as written (a list) starts with
# a line holding only `\b`.
app = typer.Typer(
    name="rlinfra",
    help=(
        "Ray clusters for RL post-training (Verl PPO/GRPO): a profile is rendered into Terraform "
        "and Ansible, applied, and checked with a distributed all-reduce.\n\n"
        "Start with `rlinfra up` (the built-in `local` profile: 2 hosts on this machine)."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 120},
)


ProfileOpt = Annotated[
    str | None,
    typer.Option(
        "--profile",
        "-p",
        metavar="NAME|PATH",
        help="Profile name (see `rlinfra profiles`) or YAML path.",
    ),
]


ClusterOpt = Annotated[
    str | None,
    typer.Option(
        "--cluster", "-c", metavar="NAME", help="Cluster name (default: the profile's name)."
    ),
]


NodesOpt = Annotated[
    int | None, typer.Option("--num-nodes", "-n", metavar="N", help="Override node count.")
]


EnvOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--env", "-e", metavar="NAME=VALUE", help="Override an env var: NAME=VALUE (repeat)."
    ),
]


SecretOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--secret",
        metavar="NAME[=@FILE|=-]",
        help="Secret NAME: the value from your environment; NAME=@FILE: from a file; NAME=-: "
        "from standard input; NAME=VALUE puts it in process arguments (warned). Never written "
        "to disk or logs; validate, render and plan need no value.",
    ),
]


AccOpt = Annotated[
    str | None,
    typer.Option(
        "--accelerators",
        "--gpus",
        metavar="GPU:N",
        help="Override accelerators, e.g. H100:8,A100:8.",
    ),
]


CidrOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--allow-cidr",
        metavar="CIDR",
        help="Also allow SSH from this CIDR (repeat); added to network.allowed_cidrs.",
    ),
]


CloudOpt = Annotated[
    str | None,
    typer.Option(
        "--cloud",
        metavar="CLOUD",
        help="Plan on this one of the profile's candidate clouds (`cloud: [aws, gcp]`) instead "
        "of the cheapest.",
    ),
]


JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (for CI and auditors).")]


ClusterArg = Annotated[str, typer.Argument(help="Cluster name (see `rlinfra status`).")]


def make_request(
    profile: str | None,
    cluster: str | None,
    num_nodes: int | None,
    env: list[str] | None,
    secret: list[str] | None,
    accelerators: str | None,
    allow_cidr: list[str] | None = None,
    cloud: str | None = None,
) -> Any:
    from rlinfra.deploy import deployment_dir, read_record
    from rlinfra.ops.prepare import Request
    from rlinfra.profile import Overrides, check_cluster_name, parse_env_pairs, parse_secret_flags

    if profile is not None and not profile.strip():
        raise UsageError("--profile '': give a profile name or a YAML path")
    if profile is None and cluster is not None:
        check_cluster_name(cluster)
        record = read_record(deployment_dir(cluster))
        if record and record.source:
            profile = record.source
    overrides = Overrides(
        num_nodes=num_nodes,
        env=parse_env_pairs(env or []),
        secrets=parse_secret_flags(secret or []),
        accelerators=parse_accelerators(accelerators),
        allowed_cidrs=list(allow_cidr or []),
        cloud=cloud,
    )
    return Request(profile=profile or DEFAULT_PROFILE, cluster=cluster, overrides=overrides)


def parse_accelerators(value: str | None) -> list[str] | None:
    if value is None:
        return None
    items = [a.strip() for a in value.split(",")]
    if not all(items):
        raise UsageError(f"--accelerators {value!r}: expected e.g. H100:8 or H100:8,A100:8")
    return items


def out_folder(out: str | None) -> Path | None:
    """--out names a folder to write into: not empty, not a file."""
    if out is None:
        return None
    if not out.strip():
        raise UsageError("--out '': give a folder to write into")
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise UsageError(f"--out {out}: not a folder")
    return path


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")


def error_line(exc: RlinfraError) -> str:
    line = f"Error: {exc.message}"
    if exc.hint:
        line = f"{line.rstrip('.')}. {exc.hint}"
    return line
