"""AWS through the real CLI (`plan --terraform`, `up --from-plan`, `up --infra-only`, `down`)
against the test process's AWS API emulator (moto). The emulator's instances are not machines, so
`up` stops after Terraform; moto lacks CreatePlacementGroup, so the applies turn only that off (the
mocked-provider `terraform test` covers placement groups).

The scenario (tests named test_scenario_*, in order, on one cluster) is the one apply/destroy
cycle of the AWS roots: the saved plan, `up --from-plan`, boto3 checks of every resource made
(instances, image, inventory output, security group rule by rule, bucket, node role), a
converging re-run, `down` (keeps the bucket), `down --delete-buckets`.
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
from typing import Any

import pytest
import yaml

from helpers.cli import Rlinfra
from helpers.emulators import DLAMI_NEW, AwsEmulator
from helpers.paths import PROFILES
from helpers.terraform import mirror_env, terraform_env

BIN = Path(sys.executable).parent
RLINFRA = str(BIN / "rlinfra")
CIDR = "203.0.113.7/32"


@dataclass
class Aws:
    url: str
    env: dict[str, str]
    profiles: Path

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return Rlinfra(self.env).run(*argv, check=check)

    def boto(self, service: str) -> Any:
        import boto3

        return boto3.client(
            service,
            region_name="us-east-1",
            endpoint_url=self.url,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    @property
    def home(self) -> Path:
        return Path(self.env["RLINFRA_HOME"])


def write_profile(folder: Path, name: str, **changes: object) -> Path:
    data = yaml.safe_load((PROFILES / "h100x2.yaml").read_text())
    data["network"]["allowed_cidrs"] = [CIDR]
    data["resources"]["placement_group"] = False
    for key, value in changes.items():
        data[key] = value
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def aws(aws_api: AwsEmulator, tmp_path_factory: pytest.TempPathFactory) -> Aws:
    tmp = tmp_path_factory.mktemp("aws-driver")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "TF_"))}
    env.update(
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
        RLINFRA_AWS_ENDPOINT_URL=aws_api.url,
        **mirror_env(),
        RLINFRA_HOME=str(tmp / "home"),
        RLINFRA_QUIET="1",
        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    return Aws(aws_api.url, env, tmp)


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
    data = yaml.safe_load((PROFILES / "retrieval-cpu.yaml").read_text())
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


# ---- the scenario: one cluster from a saved plan to `down --delete-buckets` ------------------------

ZONE = "us-east-1a"
SERVICE_PORT = 8000


@dataclass
class Scenario:
    name: str
    bucket: str
    profile: Path
    aws: Aws
    outputs: dict[str, Any]

    @property
    def folder(self) -> Path:
        return self.aws.home / "clusters" / self.name

    def root(self, which: str) -> Path:
        return self.folder / "terraform" / which

    def terraform_outputs(self, which: str) -> dict[str, Any]:
        """`terraform output -json` of a root as rlinfra left it (state only, no provider)."""
        done = subprocess.run(
            ["terraform", "output", "-json", "-no-color"],
            cwd=self.root(which),
            env=terraform_env(self.folder),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return {name: value["value"] for name, value in json.loads(done.stdout).items()}

    def instances(self, states: tuple[str, ...] = ("pending", "running")) -> list[dict[str, Any]]:
        filters = [
            {"Name": "tag:rlinfra:cluster", "Values": [self.name]},
            {"Name": "instance-state-name", "Values": list(states)},
        ]
        found = self.aws.boto("ec2").describe_instances(Filters=filters)["Reservations"]
        return [i for r in found for i in r["Instances"]]


@pytest.fixture(scope="module")
def scenario(aws: Aws) -> Iterator[Scenario]:
    ident = uuid.uuid4().hex[:6]
    name, bucket = f"s{ident}", f"rlinfra-test-{ident}"
    profile = write_profile(aws.profiles, name, ports=[SERVICE_PORT], storage=[{"bucket": bucket}])
    handle = Scenario(name, bucket, profile, aws, {})
    try:
        yield handle
    finally:
        if (handle.folder / "record.json").is_file():
            aws.run("down", name, "--yes", "--delete-buckets", check=False)


def test_scenario_plan_is_saved_and_up_applies_it_only_while_the_config_is_unchanged(
    scenario: Scenario,
) -> None:
    aws, name = scenario.aws, scenario.name
    # -detailed-exitcode semantics: 2 while there is something to create.
    fresh = aws.run(
        "plan", "-p", str(scenario.profile), "-c", name, "--detailed-exitcode", "--json",
        check=False,
    )  # fmt: skip
    assert fresh.returncode == 2, fresh.stderr
    planned = json.loads(fresh.stdout)
    cluster = planned["terraform"]["roots"]["cluster"]["summary"]
    assert cluster["create"]["aws_instance"] == 2
    assert (scenario.root("cluster") / "tfplan").is_file()
    # A changed configuration (3 nodes) does not apply the saved plan, and creates nothing.
    changed = aws.run(
        "up", "-p", str(scenario.profile), "-c", name, "-n", "3", "--yes", "--infra-only",
        "--from-plan", check=False,
    )  # fmt: skip
    assert changed.returncode == 2
    assert "changed since its plan was saved" in changed.stderr
    assert scenario.instances(("pending", "running", "stopped")) == []
    up = aws.run(
        "up", "-p", str(scenario.profile), "-c", name, "--yes", "--infra-only", "--from-plan",
        "--json",
    )  # fmt: skip
    assert len(json.loads(up.stdout)["nodes"]) == 2
    # A broken profile is an error (1), not "changes" (2). (The "no changes" exit 0 is not
    # asserted against the emulator: moto reports no security groups on the instances it ran, so
    # Terraform always sees an in-place update of vpc_security_group_ids there.)
    broken = aws.profiles / "broken.yaml"
    broken.write_text(scenario.profile.read_text() + "bogus_key: 1\n")
    bad = aws.run("plan", "-p", str(broken), "-c", name, "--detailed-exitcode", check=False)
    assert bad.returncode == 1
    assert "bogus_key" in bad.stderr
    scenario.outputs.update(scenario.terraform_outputs("cluster"))


def test_scenario_two_tagged_instances_of_the_cheapest_candidate_run(scenario: Scenario) -> None:
    instances = scenario.instances()
    assert len(instances) == 2
    outputs = scenario.outputs
    for instance in instances:
        assert instance["InstanceType"] == "p4d.24xlarge"  # the cheapest candidate
        assert instance["State"]["Name"] == "running"
        tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
        assert tags["rlinfra:cluster"] == scenario.name
        assert tags["rlinfra:profile"]
        assert instance["ImageId"] == DLAMI_NEW  # the most recent Deep Learning GPU AMI
        assert instance["MetadataOptions"]["HttpTokens"] == "required"
        assert instance["Placement"]["AvailabilityZone"] == ZONE
        assert outputs["iam_role"]["instance_profile"] in instance["IamInstanceProfile"]["Arn"]
        groups = {g["GroupId"] for eni in instance["NetworkInterfaces"] for g in eni["Groups"]}
        assert groups == {outputs["security_group_id"]}
    names = sorted(t["Value"] for i in instances for t in i["Tags"] if t["Key"] == "Name")
    assert names == [f"{scenario.name}-0", f"{scenario.name}-1"]
    volumes = scenario.aws.boto("ec2").describe_volumes(
        Filters=[{"Name": "attachment.instance-id", "Values": [i["InstanceId"] for i in instances]}]
    )["Volumes"]
    assert len(volumes) == 2 and all(v["Encrypted"] and v["Size"] == 500 for v in volumes)


def test_scenario_inventory_output_follows_the_contract(scenario: Scenario) -> None:
    inventory = scenario.outputs["inventory"]
    assert inventory["cluster_name"] == scenario.name
    assert inventory["ssh_user"] == "ubuntu"
    by_id = {i["InstanceId"]: i for i in scenario.instances()}
    assert [node["rank"] for node in inventory["nodes"]] == [0, 1]
    for node in inventory["nodes"]:
        assert set(node) == {
            "name",
            "rank",
            "ssh_host",
            "private_ip",
            "interface",
            "instance_id",
            "instance_type",
        }
        instance = by_id[node["instance_id"]]
        assert node["name"] == f"{scenario.name}-{node['rank']}"
        assert node["ssh_host"] == instance["PublicIpAddress"]
        assert node["private_ip"] == instance["PrivateIpAddress"]
        assert node["private_ip"].startswith("10.42.0.")
        assert node["interface"] == ""
        assert node["instance_type"] == "p4d.24xlarge"
    # Terraform leaves null outputs out: no placement group (turned off for the emulator).
    assert scenario.outputs.get("placement_group") is None
    assert scenario.outputs["network"]["availability_zone"] == ZONE
    for root in ("cluster", "storage"):
        lock = (scenario.root(root) / ".terraform.lock.hcl").read_text()
        assert 'version     = "5.100.0"' in lock


def test_scenario_security_group_rule_by_rule(scenario: Scenario) -> None:
    sg_id = scenario.outputs["security_group_id"]
    ec2 = scenario.aws.boto("ec2")
    group = ec2.describe_security_groups(GroupIds=[sg_id])["SecurityGroups"][0]
    assert group["VpcId"] == scenario.outputs["network"]["vpc_id"]
    ingress = group["IpPermissions"]
    members = [r for r in ingress if r.get("UserIdGroupPairs")]
    assert len(members) == 1
    assert members[0]["IpProtocol"] == "-1"
    assert [p["GroupId"] for p in members[0]["UserIdGroupPairs"]] == [sg_id]
    assert not members[0].get("IpRanges")
    from_outside = [r for r in ingress if not r.get("UserIdGroupPairs")]
    assert sorted((r["IpProtocol"], r["FromPort"], r["ToPort"]) for r in from_outside) == sorted(
        ("tcp", port, port) for port in [22, SERVICE_PORT]
    )
    for rule in from_outside:
        assert [r["CidrIp"] for r in rule["IpRanges"]] == [CIDR]
        assert not rule.get("Ipv6Ranges")
    every_range = [r["CidrIp"] for rule in ingress for r in rule.get("IpRanges", [])]
    assert "0.0.0.0/0" not in every_range
    egress = group["IpPermissionsEgress"]
    assert [(r["IpProtocol"], [x["CidrIp"] for x in r["IpRanges"]]) for r in egress] == [
        ("-1", ["0.0.0.0/0"])
    ]
    tags = {t["Key"]: t["Value"] for t in group["Tags"]}
    assert tags["rlinfra:cluster"] == scenario.name


def test_scenario_bucket_is_versioned_encrypted_and_private(scenario: Scenario) -> None:
    s3 = scenario.aws.boto("s3")
    bucket = scenario.bucket
    buckets = scenario.terraform_outputs("storage")["buckets"]
    assert buckets[bucket] == {
        "name": bucket,
        "arn": f"arn:aws:s3:::{bucket}",
        "region": "us-east-1",
    }
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"
    rules = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"]
    assert rules[0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    block = s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"]
    assert block == {
        "BlockPublicAcls": True,
        "IgnorePublicAcls": True,
        "BlockPublicPolicy": True,
        "RestrictPublicBuckets": True,
    }
    ownership = s3.get_bucket_ownership_controls(Bucket=bucket)["OwnershipControls"]["Rules"]
    assert ownership == [{"ObjectOwnership": "BucketOwnerEnforced"}]
    tags = {t["Key"]: t["Value"] for t in s3.get_bucket_tagging(Bucket=bucket)["TagSet"]}
    given = json.loads((scenario.root("storage") / "terraform.tfvars.json").read_text())["tags"]
    assert given["rlinfra:profile"] and tags.items() >= given.items()


def test_scenario_node_role_reaches_only_the_bucket(scenario: Scenario) -> None:
    iam = scenario.aws.boto("iam")
    role = scenario.outputs["iam_role"]["name"]
    trust = iam.get_role(RoleName=role)["Role"]["AssumeRolePolicyDocument"]
    if isinstance(trust, str):
        trust = json.loads(trust)
    assert [s["Principal"] for s in trust["Statement"]] == [{"Service": "ec2.amazonaws.com"}]
    assert iam.list_attached_role_policies(RoleName=role)["AttachedPolicies"] == []
    assert iam.list_role_policies(RoleName=role)["PolicyNames"] == ["checkpoint-bucket"]
    document = iam.get_role_policy(RoleName=role, PolicyName="checkpoint-bucket")["PolicyDocument"]
    if isinstance(document, str):
        document = json.loads(document)
    arn = f"arn:aws:s3:::{scenario.bucket}"
    granted = {
        (action, resource)
        for statement in document["Statement"]
        for action in statement["Action"]
        for resource in statement["Resource"]
    }
    assert all(s["Effect"] == "Allow" for s in document["Statement"])
    assert granted == {("s3:ListBucket", arn)} | {
        (action, f"{arn}/*")
        for action in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload")
    }
    profile = scenario.outputs["iam_role"]["instance_profile"]
    roles = iam.get_instance_profile(InstanceProfileName=profile)["InstanceProfile"]["Roles"]
    assert [r["RoleName"] for r in roles] == [role]


def test_scenario_rerun_converges(scenario: Scenario) -> None:
    """A re-run of `up` converges (against moto a re-plan shows drift that AWS would not, so only
    the exit status and the unchanged instance set are checked)."""
    before = sorted(i["InstanceId"] for i in scenario.instances())
    scenario.aws.run(
        "up", "-p", str(scenario.profile), "-c", scenario.name, "--yes", "--infra-only"
    )
    assert sorted(i["InstanceId"] for i in scenario.instances()) == before


def test_scenario_down_removes_the_machines_and_keeps_the_bucket(scenario: Scenario) -> None:
    aws, name = scenario.aws, scenario.name
    ec2, s3, iam = aws.boto("ec2"), aws.boto("s3"), aws.boto("iam")
    role = scenario.outputs["iam_role"]["name"]
    aws.run("down", name, "--yes")
    assert scenario.instances(("pending", "running", "stopping", "stopped")) == []
    tagged = [{"Name": "tag:rlinfra:cluster", "Values": [name]}]
    assert ec2.describe_security_groups(Filters=tagged)["SecurityGroups"] == []
    assert (
        ec2.describe_key_pairs(Filters=[{"Name": "key-name", "Values": [name]}])["KeyPairs"] == []
    )
    assert ec2.describe_vpcs(Filters=tagged)["Vpcs"] == []
    assert ec2.describe_subnets(Filters=tagged)["Subnets"] == []
    assert ec2.describe_internet_gateways(Filters=tagged)["InternetGateways"] == []
    assert [r["RoleName"] for r in iam.list_roles()["Roles"] if r["RoleName"] == role] == []
    assert s3.head_bucket(Bucket=scenario.bucket)["ResponseMetadata"]["HTTPStatusCode"] == 200
    # force_destroy is off: Terraform never empties a bucket that holds checkpoints.
    state = json.loads((scenario.root("storage") / "terraform.tfstate").read_text())
    buckets = [
        instance["attributes"]
        for resource in state["resources"]
        if resource["type"] == "aws_s3_bucket"
        for instance in resource["instances"]
    ]
    assert [b["force_destroy"] for b in buckets] == [False]


def test_scenario_down_delete_buckets_asks_then_deletes_every_version(scenario: Scenario) -> None:
    aws, name, bucket = scenario.aws, scenario.name, scenario.bucket
    s3 = aws.boto("s3")
    # Checkpoints in the versioned bucket: two versions of one object and a deleted one.
    for body in (b"step 1", b"step 2"):
        s3.put_object(Bucket=bucket, Key="latest_checkpointed_iteration.txt", Body=body)
    s3.put_object(Bucket=bucket, Key="old.pt", Body=b"x")
    s3.delete_object(Bucket=bucket, Key="old.pt")
    refused = aws.run("down", name, "--delete-buckets", check=False)
    assert refused.returncode == 2 and "not confirmed" in refused.stderr
    assert f"DELETE bucket {bucket} and its 4 object version(s)" in refused.stdout + refused.stderr
    assert s3.head_bucket(Bucket=bucket)["ResponseMetadata"]["HTTPStatusCode"] == 200
    aws.run("down", name, "--yes", "--delete-buckets")
    assert bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]
