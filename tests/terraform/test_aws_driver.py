"""`rlinfra plan --terraform`, `up --infra-only` and `down` on AWS, through the real CLI, against
an AWS API emulator (moto) of the test's own. The emulator's instances are not machines, so `up`
stops after Terraform; moto lacks CreatePlacementGroup, so the apply turns only that off (the
mocked-provider `terraform test` covers placement groups).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from test_aws_modules import MIRROR, _emulator_skip_reason, emulator

BIN = Path(sys.executable).parent
RLINFRA = str(BIN / "rlinfra")
CIDR = "203.0.113.7/32"


@dataclass
class Aws:
    url: str
    env: dict[str, str]
    profiles: Path

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [RLINFRA, *argv],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=900,
            stdin=subprocess.DEVNULL,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"rlinfra {' '.join(argv)}: {result.returncode}\n{result.stderr}")
        return result

    def boto(self, service: str) -> object:
        import boto3

        return boto3.client(
            service,
            region_name="us-east-1",
            endpoint_url=self.url,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )


def write_profile(folder: Path, name: str, **changes: object) -> Path:
    data = yaml.safe_load((Path(__file__).parents[2] / "profiles" / "h100x2.yaml").read_text())
    data["network"]["allowed_cidrs"] = [CIDR]
    data["resources"]["placement_group"] = False
    for key, value in changes.items():
        data[key] = value
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def aws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Aws]:
    reason = _emulator_skip_reason()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("aws-driver")
    with emulator(tmp) as emu:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "TF_"))}
        env.update(
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing",
            AWS_DEFAULT_REGION="us-east-1",
            RLINFRA_AWS_ENDPOINT_URL=emu.url,
            **({"RLINFRA_TF_PLUGIN_MIRROR": str(MIRROR)} if MIRROR else {}),
            RLINFRA_HOME=str(tmp / "home"),
            RLINFRA_QUIET="1",
            PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        )
        yield Aws(emu.url, env, tmp)


def test_plan_summary_for_auditors(aws: Aws) -> None:
    path = write_profile(aws.profiles, "audit")
    data = yaml.safe_load(path.read_text())
    data["resources"]["placement_group"] = True
    path.write_text(yaml.safe_dump(data))
    result = json.loads(
        aws.run("plan", "-p", str(path), "-c", "audit", "--terraform", "--json").stdout
    )
    assert result["instance_type"] == "p4d.24xlarge"
    assert [c["instance_type"] for c in result["candidates"]] == [
        "p4d.24xlarge",
        "p4de.24xlarge",
        "p5.48xlarge",
    ]
    cluster = result["terraform"]["roots"]["cluster"]["summary"]
    assert cluster["create"]["aws_instance"] == 2
    assert cluster["create"]["aws_placement_group"] == 1
    assert cluster["instances"] == {"p4d.24xlarge": 2}
    assert cluster["hourly_usd"] == pytest.approx(2 * 21.957642, rel=1e-6)
    assert cluster["exposed_to_world"] == []
    storage = result["terraform"]["roots"]["storage"]["summary"]
    assert storage["create"]["aws_s3_bucket"] == 1
    folder = Path(aws.env["RLINFRA_HOME"]) / "clusters" / "audit"
    assert (folder / "terraform" / "cluster" / "tfplan").is_file()
    assert json.loads((folder / "terraform" / "cluster" / "tfplan.json").read_text())[
        "format_version"
    ]
    text = aws.run("plan", "-p", str(path), "-c", "audit", "--terraform").stdout
    assert "estimated cost: $43.92 per hour" in text
    assert "create     2 x aws_instance" in text


def test_plan_flags_a_dashboard_opened_to_the_world(aws: Aws) -> None:
    path = write_profile(
        aws.profiles,
        "open",
        ports=[8265],
        network={"allowed_cidrs": ["0.0.0.0/0"], "allow_public": True},
    )
    result = json.loads(
        aws.run("plan", "-p", str(path), "-c", "open", "--terraform", "--json").stdout
    )
    exposed = result["terraform"]["roots"]["cluster"]["summary"]["exposed_to_world"]
    assert any("8265" in item for item in exposed), exposed
    text = aws.run("plan", "-p", str(path), "-c", "open", "--terraform").stdout
    assert "! EXPOSED:" in text


def test_up_applies_the_saved_plan_only_while_the_config_is_unchanged(aws: Aws) -> None:
    name = f"p{uuid.uuid4().hex[:6]}"
    path = write_profile(aws.profiles, name)
    # -detailed-exitcode semantics: 2 while there is something to create.
    fresh = aws.run("plan", "-p", str(path), "-c", name, "--detailed-exitcode", check=False)
    assert fresh.returncode == 2, fresh.stderr
    changed = aws.run(
        "up",
        "-p",
        str(path),
        "-c",
        name,
        "-n",
        "3",
        "--yes",
        "--infra-only",
        "--from-plan",
        check=False,
    )
    assert changed.returncode == 2
    assert "changed since its plan was saved" in changed.stderr
    ec2 = aws.boto("ec2")
    tagged = ec2.describe_instances(  # type: ignore[attr-defined]
        Filters=[{"Name": "tag:rlinfra:cluster", "Values": [name]}]
    )["Reservations"]
    assert tagged == []
    aws.run("up", "-p", str(path), "-c", name, "--yes", "--infra-only", "--from-plan")
    # A broken profile is an error (1), not "changes" (2). (The "no changes" exit 0 is not
    # asserted against the emulator: moto reports no security groups on the instances it ran, so
    # Terraform always sees an in-place update of vpc_security_group_ids there.)
    broken = aws.profiles / "broken.yaml"
    broken.write_text(path.read_text() + "bogus_key: 1\n")
    bad = aws.run("plan", "-p", str(broken), "-c", name, "--detailed-exitcode", check=False)
    assert bad.returncode == 1
    assert "bogus_key" in bad.stderr
    aws.run("down", name, "--yes", "--delete-buckets")


def test_up_infra_then_down_keeps_only_the_bucket(aws: Aws) -> None:
    name = f"c{uuid.uuid4().hex[:6]}"
    bucket = f"rlinfra-test-{uuid.uuid4().hex[:8]}"
    path = write_profile(aws.profiles, name, storage=[{"bucket": bucket}])
    result = json.loads(
        aws.run("up", "-p", str(path), "-c", name, "--yes", "--infra-only", "--json").stdout
    )
    assert len(result["nodes"]) == 2
    ec2 = aws.boto("ec2")
    filters = [
        {"Name": "tag:rlinfra:cluster", "Values": [name]},
        {"Name": "instance-state-name", "Values": ["running", "pending"]},
    ]
    reservations = ec2.describe_instances(Filters=filters)["Reservations"]  # type: ignore[attr-defined]
    types = [i["InstanceType"] for r in reservations for i in r["Instances"]]
    assert types == ["p4d.24xlarge", "p4d.24xlarge"]
    s3 = aws.boto("s3")
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"  # type: ignore[attr-defined]
    # A re-run converges (against moto a re-plan shows drift that AWS would not, so only the
    # exit status and the unchanged instance set are checked).
    aws.run("up", "-p", str(path), "-c", name, "--yes", "--infra-only")
    reservations = ec2.describe_instances(Filters=filters)["Reservations"]  # type: ignore[attr-defined]
    assert len([i for r in reservations for i in r["Instances"]]) == 2
    aws.run("down", name, "--yes")
    left = ec2.describe_instances(Filters=filters)["Reservations"]  # type: ignore[attr-defined]
    assert left == []
    assert s3.head_bucket(Bucket=bucket)["ResponseMetadata"]["HTTPStatusCode"] == 200  # type: ignore[attr-defined]
    # Checkpoints in the versioned bucket: two versions of one object and a deleted one.
    for body in (b"step 1", b"step 2"):
        s3.put_object(Bucket=bucket, Key="latest_checkpointed_iteration.txt", Body=body)  # type: ignore[attr-defined]
    s3.put_object(Bucket=bucket, Key="old.pt", Body=b"x")  # type: ignore[attr-defined]
    s3.delete_object(Bucket=bucket, Key="old.pt")  # type: ignore[attr-defined]
    refused = aws.run("down", name, "--delete-buckets", check=False)
    assert refused.returncode == 2 and "not confirmed" in refused.stderr
    assert f"DELETE bucket {bucket} and its 4 object version(s)" in refused.stdout + refused.stderr
    assert s3.head_bucket(Bucket=bucket)["ResponseMetadata"]["HTTPStatusCode"] == 200  # type: ignore[attr-defined]
    aws.run("down", name, "--yes", "--delete-buckets")
    buckets = [b["Name"] for b in s3.list_buckets()["Buckets"]]  # type: ignore[attr-defined]
    assert bucket not in buckets


def test_up_refuses_without_ssh_access(aws: Aws) -> None:
    path = write_profile(aws.profiles, "closed", network={"allowed_cidrs": []})
    result = aws.run("up", "-p", str(path), "-c", "closed", "--yes", "--infra-only", check=False)
    assert result.returncode == 2
    assert "network.allowed_cidrs: empty" in result.stderr
    assert not (Path(aws.env["RLINFRA_HOME"]) / "clusters" / "closed").exists()


def test_allow_cidr_and_the_accounts_bucket_name_reach_the_terraform_plan(aws: Aws) -> None:
    """`--allow-cidr` lands in the security group's SSH rule of the saved plan; the default
    bucket name carries the (emulated) account's suffix, and CHECKPOINT_BUCKET_NAME overrides it."""
    import hashlib

    data = yaml.safe_load(write_profile(aws.profiles, "cidr").read_text())
    data["network"]["allowed_cidrs"] = []
    path = aws.profiles / "cidr.yaml"
    path.write_text(yaml.safe_dump(data))
    flags = ["--allow-cidr", "198.51.100.7/32"]
    result = json.loads(
        aws.run("plan", "-p", str(path), "-c", "cidr", *flags, "--terraform", "--json").stdout
    )
    account = aws.boto("sts").get_caller_identity()["Account"]  # type: ignore[attr-defined]
    expected = f"rlinfra-cidr-{hashlib.sha256(account.encode()).hexdigest()[:8]}"
    assert result["buckets"] == [expected]
    folder = Path(aws.env["RLINFRA_HOME"]) / "clusters" / "cidr"
    planned = json.loads((folder / "terraform" / "cluster" / "tfplan.json").read_text())
    cidrs: list[str] = []
    for change in planned["resource_changes"]:
        after = (change.get("change") or {}).get("after") or {}
        if change["type"] == "aws_vpc_security_group_ingress_rule":
            cidrs.append(str(after.get("cidr_ipv4")))
        if change["type"] == "aws_security_group":
            for rule in after.get("ingress") or []:
                cidrs += rule.get("cidr_blocks") or []
    assert "198.51.100.7/32" in cidrs, cidrs
    storage = json.loads((folder / "terraform" / "storage" / "tfplan.json").read_text())
    names = [
        c["change"]["after"]["bucket"]
        for c in storage["resource_changes"]
        if c["type"] == "aws_s3_bucket"
    ]
    assert names == [expected]
    exact = json.loads(
        aws.run(
            "plan",
            "-p",
            str(path),
            "-c",
            "cidr",
            *flags,
            "--env",
            "CHECKPOINT_BUCKET_NAME=team-ckpt-exact",
            "--json",
        ).stdout
    )
    assert exact["buckets"] == ["team-ckpt-exact"]


def test_retrieval_clients_open_only_the_service_port_to_another_cluster(aws: Aws) -> None:
    """Two clusters, one retriever: `serving.retrieval.clients` (a trainer cluster's range)
    opens the retrieval port, and only it, to that range in the saved plan's security group,
    and the service listens on every interface for them."""
    data = yaml.safe_load((Path(__file__).parents[2] / "profiles/retrieval-cpu.yaml").read_text())
    data["network"] = {"allowed_cidrs": [CIDR]}
    data["serving"]["retrieval"]["clients"] = ["203.0.113.0/28"]
    path = aws.profiles / "served.yaml"
    path.write_text(yaml.safe_dump(data))
    aws.run("plan", "-p", str(path), "-c", "served", "--terraform", "--json")
    folder = Path(aws.env["RLINFRA_HOME"]) / "clusters" / "served"
    planned = json.loads((folder / "terraform" / "cluster" / "tfplan.json").read_text())
    rules: list[tuple[int, list[str]]] = []
    for change in planned["resource_changes"]:
        if change["type"] == "aws_security_group":
            for rule in (change["change"].get("after") or {}).get("ingress") or []:
                rules.append((rule["from_port"], sorted(rule.get("cidr_blocks") or [])))
    assert (8000, ["203.0.113.0/28"]) in rules, rules
    # The clients reach nothing else: not SSH, not any other port.
    assert [port for port, cidrs in rules if "203.0.113.0/28" in cidrs] == [8000], rules
    assert (22, [CIDR]) in rules, rules
    variables = yaml.safe_load((folder / "ansible" / "vars.yml").read_text())
    assert variables["retrieval_service_host"] == "0.0.0.0"


class _NoCapacityFor:
    """A proxy in front of the emulator that answers EC2 RunInstances for one instance type
    with InsufficientInstanceCapacity, as EC2 does when a zone has none (the emulator cannot run
    out of capacity by itself); everything else goes to the emulator unchanged."""

    ERROR = (
        '<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error>'
        "<Code>InsufficientInstanceCapacity</Code><Message>We currently do not have "
        "sufficient {kind} capacity in the Availability Zone you requested.</Message>"
        "</Error></Errors><RequestID>00000000-0000-0000-0000-000000000000</RequestID></Response>"
    )

    def __init__(self, upstream: str, kind: str) -> None:
        import http.server
        import threading
        import urllib.error
        import urllib.parse
        import urllib.request

        self.refused = 0
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                form = urllib.parse.parse_qs(body.decode(errors="replace"))
                if form.get("Action") == ["RunInstances"] and form.get("InstanceType") == [kind]:
                    proxy.refused += 1
                    data = _NoCapacityFor.ERROR.format(kind=kind).encode()
                    self.send_response(500)
                    self.send_header("Content-Type", "text/xml")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                request = urllib.request.Request(
                    upstream + self.path,
                    data=body if self.command not in ("GET", "HEAD") else None,
                    method=self.command,
                    headers={k: v for k, v in self.headers.items() if k.lower() != "host"},
                )
                try:
                    with urllib.request.urlopen(request, timeout=120) as answer:
                        status, headers, data = answer.status, answer.headers, answer.read()
                except urllib.error.HTTPError as error:
                    status, headers, data = error.code, error.headers, error.read()
                self.send_response(status)
                for key, value in headers.items():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _forward

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_up_fails_over_to_the_next_candidate_when_a_type_has_no_capacity(aws: Aws) -> None:
    """The cheapest candidate (p4d.24xlarge) has no capacity: `up` shows the error, creates the
    next candidate in the plan's order instead, and leaves a state that converges."""

    name = f"f{uuid.uuid4().hex[:6]}"
    path = write_profile(aws.profiles, name)
    proxy = _NoCapacityFor(aws.url, "p4d.24xlarge")
    env = {**aws.env, "RLINFRA_AWS_ENDPOINT_URL": proxy.url}
    try:
        argv = [RLINFRA, "up", "-p", str(path), "-c", name, "--yes", "--infra-only", "--json"]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr
        assert proxy.refused >= 1
        trying = re.search(
            r"capacity: p4d\.24xlarge in us-east-1a: InsufficientInstanceCapacity; "
            r"trying (\S+) \(2 of (\d+)\)",
            done.stderr,
        )
        assert trying, done.stderr
        second = trying.group(1)
        assert second != "p4d.24xlarge"
        ec2 = aws.boto("ec2")
        filters = [
            {"Name": "tag:rlinfra:cluster", "Values": [name]},
            {"Name": "instance-state-name", "Values": ["running", "pending"]},
        ]
        found = ec2.describe_instances(Filters=filters)["Reservations"]  # type: ignore[attr-defined]
        types = sorted(i["InstanceType"] for r in found for i in r["Instances"])
        assert types and set(types) == {second}, types
        record = json.loads(
            (Path(aws.env["RLINFRA_HOME"]) / "clusters" / name / "record.json").read_text()
        )
        assert record["instance_type"] == second and record["stage"] == "infrastructure"
        tfvars = Path(aws.env["RLINFRA_HOME"]) / "clusters" / name / "terraform" / "cluster"
        assert json.loads((tfvars / "terraform.tfvars.json").read_text())["instance_type"] == second
        # The deployment talks to the endpoint it was made with (the proxy): down goes there too.
        down = subprocess.run(
            [RLINFRA, "down", name, "--yes", "--delete-buckets"],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert down.returncode == 0, down.stderr
    finally:
        proxy.close()
