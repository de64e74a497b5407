"""What a new user and an auditor try first: every built-in profile plans and renders without
secrets or credentials; bad input of every kind is one line, exit 2, and nothing is created."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers.cli import CliResult, files_under
from rlinfra.profile import known_profiles

Cli = Callable[..., CliResult]
BUILT_IN = sorted(known_profiles())
SECRET_NAMES = ("WANDB_API_KEY", "HF_TOKEN", "GOOGLE_API_KEY", "GOOGLE_CSE_ID")


@pytest.fixture
def bare_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No secret and no cloud credential in the environment."""
    for name in (*SECRET_NAMES, "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)


def usage_error(result: CliResult, *fragments: str) -> str:
    assert result.code == 2, (result.code, result.out, result.err)
    lines = [line for line in result.err.splitlines() if line.startswith("Error: ")]
    assert len(lines) == 1, result.err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


@pytest.mark.parametrize("name", BUILT_IN)
def test_every_profile_plans_and_renders_without_secrets(
    cli: Cli,
    home: Path,
    tmp_path: Path,
    bare_env: None,
    name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("RLINFRA_QUIET")
    plan = cli("plan", "-p", name, "--json")
    assert plan.code == 0, plan.err
    listed = {row["name"]: row for row in json.loads(plan.out)["secrets"]}
    from rlinfra.profile import load_profile

    profile, _ = load_profile(name)
    assert set(listed) == set(profile.secrets)
    for secret, need in profile.secrets.items():
        assert listed[secret] == {"name": secret, "required": need == "required", "set": False}
    out = tmp_path / "review"
    render = cli("render", "-p", name, "--out", str(out))
    assert render.code == 0, render.err
    if profile.secrets:
        assert "secrets for up and run:" in render.err
    assert not [p for p in files_under(out) if "id_ed25519" in p and not p.endswith(".pub")]
    assert not (home / "clusters").exists(), "render wrote into the cluster's deployment folder"


@pytest.mark.parametrize(
    "command", [("up", "-p", "h100x1-ppo", "--yes"), ("up", "-p", "h100x1-ppo")]
)
def test_up_without_a_required_secret_refuses_before_anything(
    cli: Cli, home: Path, bare_env: None, command: tuple[str, ...]
) -> None:
    result = cli(*command)
    usage_error(result, "secrets.WANDB_API_KEY: required secret is not set", "--secret")
    assert files_under(home) == []


def test_run_without_a_required_secret_refuses_before_anything(
    cli: Cli, home: Path, bare_env: None
) -> None:
    """`run` resolves the cluster's profile and refuses before it sends anything."""
    folder = home / "clusters" / "ppo"
    folder.mkdir(parents=True)
    profile = Path(__file__).resolve().parents[2] / "profiles" / "h100x1-ppo.yaml"
    record = {"cluster": "ppo", "cloud": "aws", "stage": "ready", "source": str(profile)}
    (folder / "record.json").write_text(json.dumps(record))
    before = files_under(home)
    result = cli("run", "ppo")
    usage_error(result, "secrets.WANDB_API_KEY: required secret is not set")
    assert files_under(home) == before


def test_secret_flag_values(
    cli: Cli, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bare_env: None
) -> None:
    monkeypatch.delenv("RLINFRA_QUIET")
    usage_error(cli("validate", "--secret", "WANDB_API_KEY"), "not set in the environment")
    monkeypatch.setenv("WANDB_API_KEY", "")
    usage_error(cli("validate", "--secret", "WANDB_API_KEY"), "is empty")
    usage_error(cli("plan", "--secret", "WANDB_API_KEY=@/nonexistent/key"), "cannot read")
    empty = tmp_path / "empty"
    empty.write_text("\n")
    usage_error(cli("render", "--out", str(tmp_path / "r"), "--secret", f"X=@{empty}"), "is empty")
    key = tmp_path / "key"
    key.write_text("canary-from-file\n")
    ok = cli("validate", "--secret", f"WANDB_API_KEY=@{key}")
    assert ok.code == 0, ok.err
    assert "WANDB_API_KEY (optional, set)" in ok.err
    literal = cli("validate", "--secret", "WANDB_API_KEY=inline")
    assert literal.code == 0
    assert "puts the value in this process's arguments" in literal.err
    assert files_under(home) == []


def test_secret_values_resolve_from_file_stdin_and_environment(tmp_path: Path) -> None:
    from rlinfra.profile import profile_from_data
    from rlinfra.secrets import resolve_secrets

    profile = profile_from_data({"secrets": {"A": "required", "B": "optional"}}, "s.yaml", "s")
    key = tmp_path / "a"
    key.write_text("from-file\n")
    values = resolve_secrets(
        profile,
        {"A": f"@{key}", "C": "-"},
        {"B": "from-env"},
        "s.yaml",
        read_stdin=lambda: "from-stdin\n",
    )
    assert values == {"A": "from-file", "B": "from-env", "C": "from-stdin"}


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("", ["the file is empty"]),
        ("cloud: local\ncloud: aws\n", ["key 'cloud' is given twice (line 2)"]),
        ("resources:\n  num_nodes: true\n", ["num_nodes: expected a number, got true"]),
        ("cloud: ssh\n", ["cloud ssh needs an `ssh:` section that lists the hosts"]),
    ],
)
def test_bad_profile_files(
    cli: Cli, home: Path, tmp_path: Path, text: str, fragments: list[str]
) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    for command in ("validate", "plan"):
        usage_error(cli(command, "-p", str(path)), str(path), *fragments)
    assert files_under(home) == []


def test_a_profile_that_is_not_utf8(
    cli: Cli, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "latin.yaml"
    path.write_bytes(b"description: caf\xe9\n")
    usage_error(cli("validate", "-p", str(path)), str(path), "not UTF-8")
    # On the profile path it is listed as invalid; every other profile still lists.
    monkeypatch.setenv("RLINFRA_PROFILE_PATH", str(tmp_path))
    listed = cli("profiles", "--json")
    assert listed.code == 0, listed.err
    rows = {row["name"]: row for row in json.loads(listed.out)}
    assert "not UTF-8" in rows["latin"]["error"]
    assert "error" not in rows["local"]


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["validate", "-p", ""], "--profile ''"),
        (["validate", "--gpus", ""], "--accelerators ''"),
        (["plan", "-p", "h100x1", "--gpus", "H100:8,"], "--accelerators"),
        (["render", "--out", ""], "--out ''"),
        (["plan", "-p", "h100x1", "--allow-cidr", "nonsense"], "'nonsense' is not a CIDR"),
    ],
)
def test_bad_flags(cli: Cli, home: Path, argv: list[str], fragment: str) -> None:
    usage_error(cli(*argv), fragment)
    assert files_under(home) == []


def test_out_naming_a_file_or_the_clusters_folder(cli: Cli, home: Path, tmp_path: Path) -> None:
    afile = tmp_path / "file"
    afile.write_text("x")
    usage_error(cli("render", "--out", str(afile)), "not a folder")
    usage_error(cli("render", "--out", str(home / "clusters" / "local")), "deployment folder")


def test_home_naming_a_file(cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    afile = tmp_path / "home-file"
    afile.write_text("x")
    monkeypatch.setenv("RLINFRA_HOME", str(afile))
    usage_error(cli("status"), "RLINFRA_HOME", "is not a folder")


def test_allow_cidr_reaches_the_rendered_security_rules(
    cli: Cli, home: Path, tmp_path: Path, bare_env: None
) -> None:
    out = tmp_path / "review"
    flags = ("--allow-cidr", "198.51.100.7/32", "--allow-cidr", "203.0.113.0/24")
    plan = cli("plan", "-p", "h100x1", *flags, "--json")
    assert plan.code == 0, plan.err
    change = json.loads(plan.out)["overrides"][0]
    assert change["field"] == "network.allowed_cidrs"
    assert change["new"] == "198.51.100.7/32,203.0.113.0/24"
    assert cli("render", "-p", "h100x1", *flags, "--out", str(out)).code == 0
    tfvars = json.loads((out / "terraform" / "cluster" / "terraform.tfvars.json").read_text())
    assert tfvars["allowed_cidrs"] == ["198.51.100.7/32", "203.0.113.0/24"]
    # `up` refuses an empty list and names the flag (before any cloud call).
    refused = cli("up", "-p", "h100x1", "--yes")
    usage_error(refused, "network.allowed_cidrs", "--allow-cidr")


def test_local_cache_under_tmp_is_refused_before_anything(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not Path("/usr/sbin/sshd").exists():
        pytest.skip("the local cloud's preflight needs sshd first")
    home = Path("/tmp") / f"rlinfra-home-{tmp_path.name}"
    monkeypatch.setenv("RLINFRA_HOME", str(home))
    monkeypatch.delenv("RLINFRA_CACHE", raising=False)
    result = cli("up", "-p", "local", "--no-run")
    usage_error(result, "is under /tmp")
    assert not home.exists(), files_under(home)


def test_default_bucket_names_are_unique_to_the_account() -> None:
    from rlinfra.clouds.planning import make_plan
    from rlinfra.plan import bucket_names
    from rlinfra.profile import load_profile

    profile, source = load_profile("h100x2")
    one = bucket_names(profile, "111111111111")
    two = bucket_names(profile, "222222222222")
    assert one != two
    assert one[0].startswith("rlinfra-h100x2-") and len(one[0]) == len("rlinfra-h100x2-") + 8
    assert "111111111111" not in one[0]
    assert make_plan(profile, source, account="111111111111").storage_buckets == list(one)
    # Profiles that share a bucket (train, then infer) share a prefix, per account.
    train, _ = load_profile("search-grpo")
    infer, _ = load_profile("search-infer-local")
    assert bucket_names(train, "1") == bucket_names(infer, "1") != bucket_names(infer, "2")
    # Local buckets are this machine's folders: no account suffix.
    local, _ = load_profile("local")
    assert bucket_names(local, None, per_account=False) == ("rlinfra-local-checkpoints",)
    assert make_plan(local, "local").storage_buckets == ["rlinfra-local-checkpoints"]


def test_checkpoint_bucket_name_sets_the_exact_name(cli: Cli, home: Path, bare_env: None) -> None:
    plan = cli(
        "plan", "-p", "h100x1-ppo", "--env", "CHECKPOINT_BUCKET_NAME=my-team-ckpts", "--json"
    )
    assert plan.code == 0, plan.err
    assert json.loads(plan.out)["buckets"] == ["my-team-ckpts"]
    bad = cli("plan", "-p", "h100x1-ppo", "--env", "CHECKPOINT_BUCKET_NAME=Bad_Name")
    usage_error(bad, "'Bad_Name' is not a valid bucket name", "CHECKPOINT_BUCKET_NAME")
    # Without credentials the plan shows where the account's suffix goes.
    text = cli("plan", "-p", "h100x1-ppo")
    assert "+ bucket rlinfra-verl-ppo-account" in text.out


def test_down_refused_by_a_busy_lock_lists_nothing(cli: Cli, home: Path) -> None:
    import subprocess
    import sys

    folder = home / "clusters" / "busy"
    folder.mkdir(parents=True)
    record = {"cluster": "busy", "cloud": "local", "stage": "ready", "hosts": []}
    (folder / "record.json").write_text(json.dumps(record))
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from rlinfra.deploy import cluster_lock\n"
            "with cluster_lock(Path(sys.argv[1]), 'up'):\n"
            "    print('held', flush=True); time.sleep(60)",
            str(folder),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        result = cli("down", "busy", "--yes")
        assert result.code == 2, result.err
        assert "is busy: `rlinfra up`" in result.err
        assert "destroy" not in result.out.lower(), result.out
    finally:
        holder.kill()
        holder.wait(timeout=10)


def test_up_refuses_to_rename_a_clusters_kept_bucket(cli: Cli, home: Path) -> None:
    """A cluster made when its bucket had another name (say, before default names carried the
    account's suffix): `up` would have Terraform replace the bucket, so it refuses first."""
    folder = home / "clusters" / "local"
    folder.mkdir(parents=True)
    record = {"cluster": "local", "cloud": "local", "stage": "down", "buckets": ["old-ckpts"]}
    (folder / "record.json").write_text(json.dumps(record))
    before = files_under(home)
    result = cli("up", "-p", "local", "--no-run")
    if result.code == 2 and "the local cloud needs" in result.err:
        pytest.skip("the local cloud's preflight needs sshd and iproute2 first")
    usage_error(
        result, "keeps its checkpoints in bucket old-ckpts", "CHECKPOINT_BUCKET_NAME=old-ckpts"
    )
    assert files_under(home) == before
