"""Bad input through the real CLI: one line naming the file and field, exit 2, nothing created."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers.cli import CliResult, files_under

Cli = Callable[..., CliResult]


def assert_usage_error(result: CliResult, *fragments: str) -> None:
    assert result.code == 2, (result.code, result.err)
    lines = [line for line in result.err.splitlines() if line.strip()]
    assert len(lines) == 1, result.err
    assert lines[0].startswith("Error: ")
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


@pytest.fixture
def profile_file(tmp_path: Path) -> Callable[[str], str]:
    def make(text: str) -> str:
        path = tmp_path / "bad.yaml"
        path.write_text(text)
        return str(path)

    return make


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("resources:\n  num_node: 2\n", ["resources.num_node: unknown key", "'num_nodes'"]),
        ("resources:\n  num_nodes: many\n", ["resources.num_nodes:", "'many'"]),
        ("resources:\n  num_nodes: 0\n", ["resources.num_nodes: must be between 1 and 64"]),
        ("cloud: aws\nresources:\n  accelerators: H100x8\n", ["resources.accelerators:"]),
        ("ports: [9090, 9090]\n", ["ports: port 9090 is listed twice"]),
        ("ports: [0]\n", ["ports: port 0 is out of range"]),
        ("clod: local\n", ["clod: unknown key", "Did you mean 'cloud'?"]),
    ],
)
@pytest.mark.parametrize("command", ["validate", "plan", "up"])
def test_bad_profiles(
    cli: Cli,
    home: Path,
    profile_file: Callable[[str], str],
    text: str,
    fragments: list[str],
    command: str,
) -> None:
    path = profile_file(text)
    result = cli(command, "--profile", path)
    assert_usage_error(result, path, *fragments)
    assert files_under(home) == []


def test_unknown_profile_lists_known_ones(cli: Cli, home: Path) -> None:
    result = cli("up", "--profile", "nosuch")
    assert_usage_error(result, "unknown profile 'nosuch'", "Known profiles: ", "local")
    assert files_under(home) == []


@pytest.mark.parametrize("name", ["Bad_Name", "-x", "a" * 40])
def test_bad_cluster_name(cli: Cli, home: Path, name: str) -> None:
    assert_usage_error(cli("up", "--cluster", name), "bad cluster name")
    assert files_under(home) == []


def test_bad_override_flags(cli: Cli, home: Path) -> None:
    assert_usage_error(cli("up", "--env", "NOVALUE"), "--env 'NOVALUE': expected NAME=VALUE")
    assert_usage_error(cli("up", "-n", "0"), "(with command-line overrides)", "num_nodes")
    assert files_under(home) == []


def test_not_root_for_local(cli: Cli, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    result = cli("up", "--profile", "local")
    assert_usage_error(result, "the local cloud needs root")
    assert files_under(home) == []


def test_terraform_missing(
    cli: Cli, home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    result = cli("up", "--profile", "local")
    assert_usage_error(result, "terraform not found on PATH", "Install Terraform")
    monkeypatch.setenv("RLINFRA_TERRAFORM", str(tmp_path / "nope"))
    assert_usage_error(cli("up"), "RLINFRA_TERRAFORM=", "is not an executable")
    assert files_under(home) == []


@pytest.mark.parametrize(
    "argv",
    [
        ["down", "ghost", "--yes"],
        ["status", "ghost"],
        ["check", "ghost"],
        ["exec", "ghost", "--", "true"],
    ],
)
def test_unknown_cluster(cli: Cli, home: Path, argv: list[str]) -> None:
    assert_usage_error(cli(*argv), "unknown cluster 'ghost'", "No clusters exist yet.")
    assert files_under(home) == []


def test_status_of_no_clusters(cli: Cli, home: Path) -> None:
    result = cli("status")
    assert result.code == 0
    assert result.out.strip() == "no clusters"


def test_help_and_version(cli: Cli) -> None:
    result = cli("--help")
    assert result.code == 0
    for command in (
        "profiles",
        "validate",
        "render",
        "plan",
        "up",
        "status",
        "exec",
        "ssh",
        "check",
        "down",
    ):
        assert command in result.out
    assert cli("--version").out.strip().startswith("rlinfra ")


def test_render_writes_a_reviewable_folder(cli: Cli, home: Path, tmp_path: Path) -> None:
    out = tmp_path / "review"
    first = cli("render", "--out", str(out), "-n", "3")
    assert first.code == 0, first.err
    snapshot = {p: (out / p).read_bytes() for p in files_under(out) if (out / p).is_file()}
    assert "terraform/cluster/terraform.tfvars.json" in snapshot
    assert "ansible/vars.yml" in snapshot
    # A review folder holds no private key, and the cluster's own folder is not touched.
    assert not [p for p in snapshot if "id_ed25519" in p], snapshot.keys()
    assert not (home / "clusters").exists()
    tfvars = (out / "terraform" / "cluster" / "terraform.tfvars.json").read_text()
    assert str(home / "clusters" / "local" / "ssh" / "id_ed25519") in tfvars
    second = cli("render", "--out", str(out), "-n", "3")
    assert second.code == 0
    assert "(0 file(s) changed)" in second.out
    again = {p: (out / p).read_bytes() for p in files_under(out) if (out / p).is_file()}
    assert again == snapshot
