"""`ssh.buckets`: S3 buckets for machines you already have, without any host or AWS.

What is checked here: the profile's settings and refusals, the storage root that `render` writes
(the aws cloud's, with this machine's credentials left to the environment), the storage role's
variables, and that the hosts' key is in no rendered file. The buckets made for real, the key
sent over SSH and the mount: tests/e2e/test_ssh_cloud.py.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from helpers.cli import CliResult, files_under, usage_line, write_yaml
from rlinfra.clouds.planning import make_plan
from rlinfra.clouds.ssh import cloud as ssh_cloud
from rlinfra.profile import profile_from_data
from rlinfra.storage import s3

Cli = Callable[..., CliResult]
KEY_ID = "AKIACANARY0SSHBUCKET1"
SECRET = "canary-secret-of-the-hosts-bucket-key"


def profile_data(key: Path, **buckets: object) -> dict[str, object]:
    return {
        "cloud": "ssh",
        "storage": [{"bucket": "team-ckpt-7f3a", "mount_path": "/checkpoints"}],
        "ssh": {
            "identity_file": str(key),
            "hosts": [{"name": "box", "address": "192.0.2.10"}],
            "buckets": {"cloud": "aws", "region": "eu-west-1", **buckets},
        },
    }


@pytest.fixture
def key(tmp_path: Path) -> Path:
    path = tmp_path / "id_test"
    path.write_text("not a real key\n")
    return path


def test_render_writes_the_aws_storage_root_and_s3_role_settings_without_the_key(
    cli: Cli, home: Path, tmp_path: Path, key: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BUCKET_AWS_ACCESS_KEY_ID", KEY_ID)
    monkeypatch.setenv("BUCKET_AWS_SECRET_ACCESS_KEY", SECRET)
    out = tmp_path / "review"
    done = cli("render", "-p", str(write_yaml(tmp_path, profile_data(key))), "--out", str(out))
    assert done.code == 0, done.err
    root = out / "terraform" / "storage"
    main = (root / "main.tf").read_text()
    assert 'provider "aws"' in main and 'source   = "./modules/aws_bucket"' in main
    assert (root / "modules" / "aws_bucket" / "main.tf").is_file()
    assert not (root / "modules" / "local_bucket").exists()
    tfvars = yaml.safe_load((root / "terraform.tfvars.json").read_text())
    assert tfvars["region"] == "eu-west-1" and tfvars["buckets"] == ["team-ckpt-7f3a"]
    assert "endpoints" not in tfvars  # AWS itself (no RLINFRA_AWS_ENDPOINT_URL)
    variables = yaml.safe_load((out / "ansible" / "vars.yml").read_text())
    assert variables["storage_backend"] == "s3"
    assert variables["storage_s3_region"] == "eu-west-1"
    assert variables["storage_s3_credentials_file"] == "/opt/rlinfra/secrets/buckets.env"
    assert variables["storage_s3_endpoint"] == ""
    assert set(variables["base_extra_packages"]) >= {"rclone", "fuse3"}
    # The key is nowhere in what was rendered.
    for path in out.rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            assert KEY_ID not in text and SECRET not in text, path
    assert files_under(home) == []


def test_an_emulators_endpoint_reaches_terraform_and_the_role(
    tmp_path: Path, key: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rlinfra.context import Context, Controller

    plan = make_plan(profile_from_data(profile_data(key), "p.yaml", "box"), "p.yaml")
    controller = Controller("uv", "python3", None, aws_endpoint="http://10.9.0.1:5000")
    ctx = Context(tmp_path, tmp_path, tmp_path, "", "t", controller)
    storage = ssh_cloud.CLOUD.tfvars(plan, ctx)["storage"]
    assert storage["endpoints"]["s3"] == "http://10.9.0.1:5000"
    assert ssh_cloud.CLOUD.root_source(plan, "storage") == ("aws", ("aws_bucket",))
    assert ssh_cloud.bucket_ansible_vars(plan, ctx)["storage_s3_endpoint"] == (
        "http://10.9.0.1:5000"
    )
    local = make_plan(
        profile_from_data(
            {
                **profile_data(key),
                "ssh": {
                    **profile_data(key)["ssh"],
                    "buckets": None,  # type: ignore[dict-item]
                    "shared_filesystem": True,
                },
            },
            "p.yaml",
            "box",
        ),
        "p.yaml",
    )
    assert ssh_cloud.CLOUD.root_source(local, "storage") == ("ssh", ("local_bucket",))
    assert ssh_cloud.bucket_ansible_vars(local, ctx) == {}


@pytest.mark.parametrize(
    ("buckets", "fragments"),
    [
        ({"cloud": "gcp"}, ["ssh.buckets.cloud", "'aws'"]),
        ({"region": "Europe"}, ["ssh.buckets.region", "not an AWS region name"]),
        ({"access_key_id_env": "lower"}, ["ssh.buckets.access_key_id_env", "not an environment"]),
        (
            {"access_key_id_env": "SAME", "secret_access_key_env": "SAME"},
            ["ssh.buckets", "name one variable"],
        ),
    ],
)
def test_bad_bucket_settings_are_one_line_exit_2(
    cli: Cli,
    home: Path,
    tmp_path: Path,
    key: Path,
    buckets: dict[str, object],
    fragments: list[str],
) -> None:
    line = usage_line(
        cli("validate", "-p", str(write_yaml(tmp_path, profile_data(key, **buckets))))
    )
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    assert files_under(home) == []


def test_a_bucket_without_an_exact_name_is_refused(
    cli: Cli, home: Path, tmp_path: Path, key: Path
) -> None:
    data = profile_data(key)
    data["storage"] = [{"prefix": "team-ckpt", "mount_path": "/checkpoints"}]
    line = usage_line(cli("plan", "-p", str(write_yaml(tmp_path, data))))
    assert "storage[0].bucket: S3 bucket names are global" in line
    assert files_under(home) == []
    # --env CHECKPOINT_BUCKET_NAME names the first one, as its hint says.
    path = write_yaml(tmp_path, data)
    named = cli("plan", "-p", str(path), "--env", "CHECKPOINT_BUCKET_NAME=team-ckpt-7f3a", "--json")
    assert named.code == 0, named.err
    assert "team-ckpt-7f3a" in named.out


def test_up_refuses_before_any_host_or_cloud_without_the_hosts_key(
    cli: Cli, home: Path, tmp_path: Path, key: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """192.0.2.10 answers nobody: a refusal that came after SSH would take seconds and say so."""
    monkeypatch.delenv("BUCKET_AWS_ACCESS_KEY_ID", raising=False)
    monkeypatch.setenv("BUCKET_AWS_SECRET_ACCESS_KEY", SECRET)
    path = write_yaml(tmp_path, profile_data(key))
    line = usage_line(cli("up", "-p", str(path), "--yes"))
    assert "ssh.buckets: BUCKET_AWS_ACCESS_KEY_ID not set in this environment" in line
    monkeypatch.setenv("BUCKET_AWS_ACCESS_KEY_ID", KEY_ID)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "nohome"))
    line = usage_line(cli("up", "-p", str(path), "--yes"))
    assert "Terraform makes the S3 buckets with this machine's AWS credentials" in line
    assert not (home / "clusters").exists() or files_under(home / "clusters") == []


def test_local_buckets_still_need_a_shared_filesystem(
    cli: Cli, home: Path, tmp_path: Path, key: Path
) -> None:
    data = profile_data(key)
    data["ssh"] = {k: v for k, v in data["ssh"].items() if k != "buckets"}  # type: ignore[union-attr]
    line = usage_line(cli("validate", "-p", str(write_yaml(tmp_path, data))))
    assert "storage: local buckets (folders of this machine) need" in line
    assert "cloud buckets need ssh.buckets" in line


def test_the_key_file_is_written_0600_in_a_0700_folder_and_loads_back_exactly(
    tmp_path: Path,
) -> None:
    """The script `up` runs on each host (as root, or through sudo -n), here under a folder of
    the test's; the key holds characters a shell would otherwise take apart."""
    import stat
    import subprocess

    root = tmp_path / "opt-rlinfra"
    key = ("AKIA/with+odd'chars", 'sec"ret $(rm -rf /) `x` \\ ;|&')
    for _ in range(2):  # again: the same file, replaced whole
        done = subprocess.run(
            ["sh", "-c", s3.key_file_script(str(root))],
            input=s3.key_file_body(key),
            capture_output=True,
            timeout=30,
        )
        assert done.returncode == 0, done.stderr
    secrets = root / "secrets"
    assert stat.S_IMODE(root.stat().st_mode) == 0o755  # the login user still runs the venv
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o700
    assert stat.S_IMODE((secrets / "buckets.env").stat().st_mode) == 0o600
    assert [p.name for p in secrets.iterdir()] == ["buckets.env"]
    # What rclone's wrapper does with it: set -a, then source.
    loaded = subprocess.run(
        [
            "sh",
            "-c",
            'set -a && . "$0" && set +a && exec "$@"',
            str(secrets / "buckets.env"),
            sys.executable,
            "-c",
            "import os; print(os.environ['AWS_ACCESS_KEY_ID']); "
            "print(os.environ['AWS_SECRET_ACCESS_KEY'])",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.splitlines() == list(key)
