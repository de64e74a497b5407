"""The AWS modules and roots: fmt, validate, `terraform test` with a mocked provider, a checkov
scan, and a real apply/destroy of the AWS roots against an AWS API emulator.

The real hashicorp/aws provider comes from a filesystem mirror on this machine (found at run time,
or from RLINFRA_TF_PLUGIN_MIRROR), else from Terraform's registry. The apply-level tests start their own
moto server on a free port on 127.0.0.1, point the roots' `endpoints` at it, check what was made
with boto3, and stop the server by pid at the end, also when a test fails. moto has no placement
groups, so only that resource is turned off there; the mocked-provider tests cover it (and EFA).

Most of the time here is the provider starting (several times per terraform command) and polling
new resources, so the apply runs in the background from the module's first test on, and the
validations run side by side.

What moto does differently from AWS (checked where it matters, tolerated otherwise): instances
launched with a network-interface spec report their security group only on the interface, so a
second plan shows drift on vpc_security_group_ids; the emulator cannot say which account owns a
bucket; and it has no EC2 Service Quotas.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
MODULES = REPO / "terraform" / "modules"
ROOTS = REPO / "terraform" / "roots" / "aws"
AWS_MODULES = ("aws_network", "aws_cluster", "aws_bucket")
ROOT_MODULES = {"cluster": ("aws_network", "aws_cluster"), "storage": ("aws_bucket",)}
PROVIDER_DIR = ("registry.terraform.io", "hashicorp", "aws")
REGION = "us-east-1"
ZONE = "us-east-1a"
ALLOWED_CIDR = "203.0.113.7/32"
SERVICE_PORTS = [8000]
INSTANCE_TYPE = "p5.48xlarge"

# Images the emulator serves, so that the module's own lookup (most recent Deep Learning GPU AMI
# for Ubuntu 22.04 from Amazon) runs for real: the newer of the two must win.
DLAMI_NEW = "ami-0a1b2c3d4e5f60718"
DLAMI_OLD = "ami-0a1b2c3d4e5f60719"
UBUNTU = "ami-0b1b2c3d4e5f60718"


def _image(ami_id: str, name: str, owner: str, created: str) -> dict[str, Any]:
    return {
        "ami_id": ami_id,
        "name": name,
        "description": name,
        "owner_id": owner,
        "state": "available",
        "public": True,
        "image_location": f"{owner}/{name}",
        "root_device_type": "ebs",
        "root_device_name": "/dev/sda1",
        "image_type": "machine",
        "architecture": "x86_64",
        "virtualization_type": "hvm",
        "hypervisor": "xen",
        "sriov": "simple",
        "creation_date": created,
    }


EMULATOR_IMAGES = [
    _image(
        DLAMI_NEW,
        "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) 20261101",
        "898082745236",
        "2026-11-01T00:00:00.000Z",
    ),
    _image(
        DLAMI_OLD,
        "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) 20260901",
        "898082745236",
        "2026-09-01T00:00:00.000Z",
    ),
    _image(
        UBUNTU,
        "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-20261101",
        "099720109477",
        "2026-11-01T00:00:00.000Z",
    ),
]


# --- finding the tools ---------------------------------------------------------------------------


def find_provider_mirror() -> Path | None:
    """The filesystem mirror root that holds hashicorp/aws (the folder above registry.terraform.io).

    RLINFRA_TF_PLUGIN_MIRROR may name the root or any folder inside it; otherwise a few usual
    places are searched, a few levels deep, for a file named terraform-provider-aws_*.
    """
    patterns = [
        "/".join(PROVIDER_DIR) + "/*/*/terraform-provider-aws_*",  # unpacked layout
        "/".join(PROVIDER_DIR) + "/terraform-provider-aws_*.zip",  # packed layout
    ]
    bases: list[Path] = []
    override = os.environ.get("RLINFRA_TF_PLUGIN_MIRROR")
    if override:
        bases.append(Path(override))
    else:
        bases += [Path("/opt"), Path("/usr/local/share"), Path("/usr/share")]
        bases += [Path.home() / ".terraform.d", Path.home() / ".local" / "share" / "terraform"]
    for base in bases:
        if not base.is_dir():
            continue
        # The root may be the base itself, a folder in it, or two levels down.
        for prefix in ("", "*/", "*/*/"):
            for pattern in patterns:
                for hit in sorted(base.glob(prefix + pattern)):
                    parts = hit.parts
                    index = parts.index(PROVIDER_DIR[0])
                    return Path(*parts[:index])
        # RLINFRA_TF_PLUGIN_MIRROR may point inside the mirror.
        for parent in [base, *base.parents]:
            if parent.name == PROVIDER_DIR[0]:
                return parent.parent
    return None


def find_checkov() -> str | None:
    override = os.environ.get("RLINFRA_CHECKOV")
    if override:
        return override
    for candidate in (Path(sys.executable).parent / "checkov", REPO / ".venv" / "bin" / "checkov"):
        if candidate.exists() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("checkov")


MIRROR = find_provider_mirror()
MOTO_SERVER = Path(sys.executable).parent / "moto_server"


def _terraform_skip_reason() -> str | None:
    if shutil.which("terraform") is None:
        return "terraform is not on PATH"
    # Without a filesystem mirror (RLINFRA_TF_PLUGIN_MIRROR), Terraform's registry is used.
    return None


def _emulator_skip_reason() -> str | None:
    reason = _terraform_skip_reason()
    if reason:
        return reason
    if not MOTO_SERVER.exists():
        return f"moto_server not found next to {sys.executable} (pip install 'moto[server]')"
    try:
        import boto3  # noqa: F401
    except ImportError:
        return "boto3 is not installed"
    return None


needs_terraform = pytest.mark.skipif(
    _terraform_skip_reason() is not None, reason=str(_terraform_skip_reason())
)
needs_emulator = pytest.mark.skipif(
    _emulator_skip_reason() is not None, reason=str(_emulator_skip_reason())
)


# --- terraform in a scratch folder -----------------------------------------------------------------


def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    kwargs.setdefault("timeout", 600)
    return subprocess.run(argv, **kwargs)


def terraform_env(tmp: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment without the machine's TF_* and AWS_* settings, with a CLI config that
    installs hashicorp/aws from the mirror when there is one (else from Terraform's registry)."""
    cli_config = tmp / "terraformrc"
    if MIRROR is None:
        cli_config.write_text("")
    else:
        cli_config.write_text(
            "provider_installation {\n"
            "  filesystem_mirror {\n"
            f"    path    = {json.dumps(str(MIRROR))}\n"
            '    include = ["registry.terraform.io/hashicorp/aws"]\n'
            "  }\n"
            "  direct {\n"
            '    exclude = ["registry.terraform.io/hashicorp/aws"]\n'
            "  }\n"
            "}\n"
        )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_", "AWS_"))}
    env.update(
        TF_CLI_CONFIG_FILE=str(cli_config),
        TF_IN_AUTOMATION="1",
        TF_INPUT="0",
        CHECKPOINT_DISABLE="1",
    )
    env.update(extra or {})
    return env


@dataclass
class Terraform:
    workdir: Path
    env: dict[str, str]

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = run(["terraform", *args, "-no-color"], cwd=self.workdir, env=self.env)
        if check and result.returncode != 0:
            pytest.fail(
                f"terraform {' '.join(args)} in {self.workdir} exited {result.returncode}\n"
                f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
            )
        return result

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            ["terraform", *args, "-no-color"],
            cwd=self.workdir,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def init(self) -> None:
        self("init", "-input=false")

    def output(self) -> dict[str, Any]:
        raw = json.loads(self("output", "-json").stdout)
        return {name: value["value"] for name, value in raw.items()}


def copy_modules(tmp: Path) -> Path:
    """The AWS modules, side by side (the cluster example uses ../../../aws_network)."""
    target = tmp / "modules"
    for name in AWS_MODULES:
        shutil.copytree(
            MODULES / name,
            target / name,
            ignore=shutil.ignore_patterns(".terraform", "*.tfstate*", ".terraform.lock.hcl"),
        )
    return target


def render_root(tmp: Path, root: str) -> Path:
    """The root as rlinfra renders it: the root's files plus its modules in ./modules/<name>."""
    folder = tmp / root
    shutil.copytree(ROOTS / root, folder)
    for name in ROOT_MODULES[root]:
        shutil.copytree(
            MODULES / name,
            folder / "modules" / name,
            ignore=shutil.ignore_patterns(
                ".terraform", "*.tfstate*", ".terraform.lock.hcl", "examples", "tests"
            ),
        )
    return folder


# --- fmt and validate ------------------------------------------------------------------------------


@needs_terraform
def test_fmt_check_of_aws_modules_and_roots() -> None:
    paths = [str(MODULES / name) for name in AWS_MODULES] + [str(ROOTS)]
    result = run(["terraform", "fmt", "-check", "-recursive", "-diff", *paths])
    assert result.returncode == 0, f"terraform fmt -check found changes:\n{result.stdout}"


def _init_then(tf: Terraform, *args: str) -> subprocess.CompletedProcess[str]:
    tf.init()
    return tf(*args, check=False)


@pytest.fixture(scope="module")
def static_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Future[Any]]]:
    """`terraform validate` of each module's example and `terraform test` of aws_cluster, started
    side by side (each mostly waits for its own provider process to start)."""
    reason = _terraform_skip_reason()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("aws-static")
    modules = copy_modules(tmp)
    env = terraform_env(tmp)
    with ThreadPoolExecutor(max_workers=len(AWS_MODULES) + 1) as pool:
        jobs: dict[str, Future[Any]] = {
            name: pool.submit(
                _init_then, Terraform(modules / name / "examples" / "basic", env), "validate"
            )
            for name in AWS_MODULES
        }
        jobs["test"] = pool.submit(_init_then, Terraform(modules / "aws_cluster", env), "test")
        yield jobs


@needs_terraform
@pytest.mark.parametrize("module", AWS_MODULES)
def test_validate_example(module: str, static_runs: dict[str, Future[Any]]) -> None:
    result = static_runs[module].result(timeout=600)
    assert result.returncode == 0, f"terraform validate failed:\n{result.stdout}{result.stderr}"
    assert "Success" in result.stdout


@needs_terraform
def test_module_versions_state_lower_bounds_and_roots_pin_exactly() -> None:
    for name in AWS_MODULES:
        text = (MODULES / name / "versions.tf").read_text()
        assert re.search(r'version\s*=\s*">= 5\.0"', text), name
        assert re.search(r'required_version\s*=\s*">= 1\.\d+"', text), name
    for root in ROOT_MODULES:
        text = (ROOTS / root / "versions.tf").read_text()
        assert re.search(r'version\s*=\s*"= 5\.100\.0"', text), root


# --- terraform test, mocked provider -----------------------------------------------------------------


@needs_terraform
def test_aws_cluster_validation_rules_with_mocked_provider(
    static_runs: dict[str, Future[Any]],
) -> None:
    """aws_cluster's tests/*.tftest.hcl with `mock_provider "aws"`: nothing reaches AWS or the
    emulator. Covers what moto lacks: placement groups and EFA interfaces."""
    result = static_runs["test"].result(timeout=600)
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, f"terraform test failed:\n{result.stdout[-6000:]}{result.stderr}"
    match = re.search(r"(\d+) passed, 0 failed", summary)
    assert match and int(match.group(1)) >= 10, summary
    for run_name in (
        "two_nodes_share_a_placement_group_and_follow_the_contract",
        "one_cpu_node_without_a_bucket",
        "placement_group_turned_off_and_a_given_image",
        "world_refused_without_allow_public",
        "zero_nodes_refused",
        "sixty_five_nodes_refused",
        "efa_on_unsupported_type_refused",
        "efa_on_p5_gives_each_node_an_efa_interface",
    ):
        assert f'run "{run_name}"... pass' in result.stdout, run_name


# --- checkov -------------------------------------------------------------------------------------------


def test_checkov_scan_of_aws_modules_passes() -> None:
    checkov = find_checkov()
    if checkov is None:
        pytest.skip("checkov not found (pip install checkov, or set RLINFRA_CHECKOV)")
    # One scan per module: given several -d folders, checkov 3.3 reports the first folder's
    # results again for the others, so a problem in a later module would go unseen.
    for name in AWS_MODULES:
        # --skip-download: no guideline downloads (no internet here); the checks are local.
        argv = [checkov, "-d", str(MODULES / name), "--framework", "terraform"]
        argv += ["--quiet", "--compact", "--skip-download"]
        result = run(argv, env={**os.environ, "BC_SKIP_MAPPING": "TRUE"}, timeout=300)
        assert result.returncode == 0, f"checkov found problems in {name}:\n{result.stdout[-6000:]}"
        counts = re.findall(
            r"Passed checks: (\d+), Failed checks: (\d+), Skipped checks: (\d+)", result.stdout
        )
        assert len(counts) == 1 and counts[0][1] == "0", (name, result.stdout)
        assert int(counts[0][0]) > 0, (name, result.stdout)  # it did check something
    # Every skip sits in the resource it concerns and says why.
    for tf_file in MODULES.glob("aws_*/**/*.tf"):
        for line in tf_file.read_text().splitlines():
            if "checkov:skip" in line:
                assert re.search(r"#checkov:skip=CKV2?_AWS_\d+:\S.{20,}", line), (tf_file, line)


# --- the emulator ------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Emulator:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def session(self) -> Any:
        import boto3

        return boto3.Session(
            aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION
        )

    def client(self, service: str) -> Any:
        return self.session().client(service, endpoint_url=self.url)


@contextlib.contextmanager
def emulator(tmp: Path, host: str = "127.0.0.1") -> Iterator[Emulator]:
    """A moto server of our own on a free port of ``host`` (loopback, or an address that test
    hosts reach), stopped by pid at the end."""
    images = tmp / "amis.json"
    images.write_text(json.dumps(EMULATOR_IMAGES))
    port = free_port()
    log = tmp / "moto.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["MOTO_AMIS_PATH"] = str(images)
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(MOTO_SERVER), "-p", str(port), "-H", host],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection((host, port), 1):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"moto_server did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield Emulator(f"http://{host}:{port}", process, log)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


@dataclass
class Deployment:
    """Both AWS roots against the emulator: 2 x p5.48xlarge and the checkpoint bucket."""

    emu: Emulator
    cluster_name: str
    bucket: str
    cluster: Terraform
    storage: Terraform
    outputs: dict[str, Any] = field(default_factory=dict)
    buckets: dict[str, Any] = field(default_factory=dict)
    destroyed: set[str] = field(default_factory=set)
    error: str | None = None
    thread: threading.Thread | None = None

    @property
    def tags(self) -> dict[str, str]:
        return {
            "rlinfra:cluster": self.cluster_name,
            "rlinfra:profile": "h100x2",
            "managed-by": "rlinfra",
        }

    def apply(self) -> None:
        """init + apply of both roots; the two are independent (the cluster only names the
        bucket), so they apply at the same time. Failures are kept in ``error``."""
        try:
            self.storage.init()
            self.cluster.init()
            storage_apply = self.storage.start("apply", "-auto-approve", "-input=false")
            try:
                self.cluster("apply", "-auto-approve", "-input=false")
            finally:
                _wait(storage_apply, "terraform apply (storage)")
            self.outputs = self.cluster.output()
            self.buckets = self.storage.output()["buckets"]
        except BaseException as exc:  # pytest.fail raises a BaseException
            self.error = str(exc)

    def destroy_leftovers(self) -> None:
        for name, tf in (("cluster", self.cluster), ("storage", self.storage)):
            if name not in self.destroyed and (tf.workdir / "terraform.tfstate").exists():
                if name == "storage":
                    _empty_bucket(self.emu, self.bucket)
                tf("destroy", "-auto-approve", "-input=false", check=False)

    def live_instances(self) -> list[dict[str, Any]]:
        ec2 = self.emu.client("ec2")
        reservations = ec2.describe_instances(
            Filters=[
                {"Name": "tag:rlinfra:cluster", "Values": [self.cluster_name]},
                {
                    "Name": "instance-state-name",
                    "Values": ["pending", "running", "stopping", "stopped"],
                },
            ]
        )["Reservations"]
        return [i for r in reservations for i in r["Instances"]]


def _wait(process: subprocess.Popen[str], what: str) -> None:
    stdout, stderr = process.communicate(timeout=600)
    if process.returncode != 0:
        pytest.fail(f"{what} exited {process.returncode}\n{stdout[-4000:]}\n{stderr[-4000:]}")


def prepare_deployment(tmp: Path, emu: Emulator) -> Deployment:
    """Rendered roots and their terraform.tfvars.json, as the driver writes them."""
    key = tmp / "id_ed25519"
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    suffix = uuid.uuid4().hex[:8]
    cluster_name = f"t{suffix}"
    bucket = f"rlinfra-test-{suffix}"
    env = terraform_env(
        tmp,
        {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": REGION,
        },
    )
    endpoints = {service: emu.url for service in ("ec2", "s3", "sts", "iam")}
    tags = {"rlinfra:cluster": cluster_name, "rlinfra:profile": "h100x2", "managed-by": "rlinfra"}
    # Retries as the driver allows against an emulator (clouds/aws.py), plus one: a connection
    # the emulator drops mid-read must not fail the whole apply.
    common = {"region": REGION, "endpoints": endpoints, "max_retries": 3, "tags": tags}
    cluster = Terraform(render_root(tmp, "cluster"), env)
    storage = Terraform(render_root(tmp, "storage"), env)
    (storage.workdir / "terraform.tfvars.json").write_text(
        json.dumps({**common, "buckets": [bucket]}, indent=2)
    )
    (cluster.workdir / "terraform.tfvars.json").write_text(
        json.dumps(
            {
                **common,
                "availability_zone": ZONE,
                "cluster_name": cluster_name,
                "node_count": 2,
                "instance_type": INSTANCE_TYPE,
                "ssh_public_key": Path(f"{key}.pub").read_text(),
                "allowed_cidrs": [ALLOWED_CIDR],
                "service_ports": SERVICE_PORTS,
                "placement_group": False,  # moto: CreatePlacementGroup is not implemented
                "root_volume": {"size_gb": 300, "type": "gp3"},
                "bucket_name": bucket,
            },
            indent=2,
        )
    )
    return Deployment(emu, cluster_name, bucket, cluster, storage)


@pytest.fixture(scope="module", autouse=True)
def _deployment_in_background(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment | None]:
    """Starts the emulator and the apply as soon as this module's tests start, so that the
    apply's waits (the provider polls new VPCs, instances and bucket settings for seconds) overlap
    the static checks. Whatever is left is destroyed and the emulator stopped at the end."""
    wanted = any(
        item.module is request.module and "deployment" in getattr(item, "fixturenames", ())
        for item in request.session.items
    )
    if not wanted or _emulator_skip_reason() is not None:
        yield None
        return
    tmp = tmp_path_factory.mktemp("aws-apply")
    with emulator(tmp) as emu:
        deployment = prepare_deployment(tmp, emu)
        deployment.thread = threading.Thread(target=deployment.apply, name="aws-apply")
        deployment.thread.start()
        try:
            yield deployment
        finally:
            deployment.thread.join(timeout=900)
            deployment.destroy_leftovers()


@pytest.fixture(scope="module")
def deployment(_deployment_in_background: Deployment | None) -> Deployment:
    reason = _emulator_skip_reason()
    if reason:
        pytest.skip(reason)
    assert _deployment_in_background is not None and _deployment_in_background.thread is not None
    _deployment_in_background.thread.join(timeout=900)
    if _deployment_in_background.error:
        pytest.fail(_deployment_in_background.error)
    return _deployment_in_background


def _empty_bucket(emu: Emulator, bucket: str) -> None:
    s3 = emu.client("s3")
    with contextlib.suppress(Exception):
        versions = s3.list_object_versions(Bucket=bucket)
        for item in versions.get("Versions", []) + versions.get("DeleteMarkers", []):
            s3.delete_object(Bucket=bucket, Key=item["Key"], VersionId=item["VersionId"])


# --- what was made ---------------------------------------------------------------------------------------


@needs_emulator
def test_two_tagged_instances_of_the_chosen_type_run(deployment: Deployment) -> None:
    instances = deployment.live_instances()
    assert len(instances) == 2
    for instance in instances:
        assert instance["InstanceType"] == INSTANCE_TYPE
        assert instance["State"]["Name"] == "running"
        tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
        assert tags.items() >= deployment.tags.items()
        assert instance["ImageId"] == DLAMI_NEW  # the most recent Deep Learning GPU AMI
        assert instance["MetadataOptions"]["HttpTokens"] == "required"
        assert instance["Placement"]["AvailabilityZone"] == ZONE
        assert (
            deployment.outputs["iam_role"]["instance_profile"]
            in instance["IamInstanceProfile"]["Arn"]
        )
        groups = {g["GroupId"] for eni in instance["NetworkInterfaces"] for g in eni["Groups"]}
        assert groups == {deployment.outputs["security_group_id"]}
    names = sorted(t["Value"] for i in instances for t in i["Tags"] if t["Key"] == "Name")
    assert names == [f"{deployment.cluster_name}-0", f"{deployment.cluster_name}-1"]
    volumes = deployment.emu.client("ec2").describe_volumes(
        Filters=[{"Name": "attachment.instance-id", "Values": [i["InstanceId"] for i in instances]}]
    )["Volumes"]
    assert len(volumes) == 2 and all(v["Encrypted"] and v["Size"] == 300 for v in volumes)


@needs_emulator
def test_inventory_output_follows_the_contract(deployment: Deployment) -> None:
    inventory = deployment.outputs["inventory"]
    assert inventory["cluster_name"] == deployment.cluster_name
    assert inventory["ssh_user"] == "ubuntu"
    by_id = {i["InstanceId"]: i for i in deployment.live_instances()}
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
        assert node["name"] == f"{deployment.cluster_name}-{node['rank']}"
        assert node["ssh_host"] == instance["PublicIpAddress"]
        assert node["private_ip"] == instance["PrivateIpAddress"]
        assert node["private_ip"].startswith("10.42.0.")
        assert node["interface"] == ""
        assert node["instance_type"] == INSTANCE_TYPE
    # Terraform leaves null outputs out: no placement group (turned off for the emulator).
    assert deployment.outputs.get("placement_group") is None
    assert deployment.outputs["network"]["availability_zone"] == ZONE
    for tf in (deployment.cluster, deployment.storage):
        assert 'version     = "5.100.0"' in (tf.workdir / ".terraform.lock.hcl").read_text()


@needs_emulator
def test_security_group_rule_by_rule(deployment: Deployment) -> None:
    sg_id = deployment.outputs["security_group_id"]
    group = deployment.emu.client("ec2").describe_security_groups(GroupIds=[sg_id])[
        "SecurityGroups"
    ][0]
    assert group["VpcId"] == deployment.outputs["network"]["vpc_id"]
    ingress = group["IpPermissions"]
    members = [r for r in ingress if r.get("UserIdGroupPairs")]
    assert len(members) == 1
    assert members[0]["IpProtocol"] == "-1"
    assert [p["GroupId"] for p in members[0]["UserIdGroupPairs"]] == [sg_id]
    assert not members[0].get("IpRanges")
    from_outside = [r for r in ingress if not r.get("UserIdGroupPairs")]
    assert sorted((r["IpProtocol"], r["FromPort"], r["ToPort"]) for r in from_outside) == sorted(
        ("tcp", port, port) for port in [22, *SERVICE_PORTS]
    )
    for rule in from_outside:
        assert [r["CidrIp"] for r in rule["IpRanges"]] == [ALLOWED_CIDR]
        assert not rule.get("Ipv6Ranges")
    every_range = [r["CidrIp"] for rule in ingress for r in rule.get("IpRanges", [])]
    assert "0.0.0.0/0" not in every_range
    egress = group["IpPermissionsEgress"]
    assert [(r["IpProtocol"], [x["CidrIp"] for x in r["IpRanges"]]) for r in egress] == [
        ("-1", ["0.0.0.0/0"])
    ]
    tags = {t["Key"]: t["Value"] for t in group["Tags"]}
    assert tags.items() >= deployment.tags.items()


@needs_emulator
def test_bucket_is_versioned_encrypted_and_private(deployment: Deployment) -> None:
    s3 = deployment.emu.client("s3")
    bucket = deployment.bucket
    assert deployment.buckets[bucket] == {
        "name": bucket,
        "arn": f"arn:aws:s3:::{bucket}",
        "region": REGION,
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
    assert tags.items() >= deployment.tags.items()


@needs_emulator
def test_node_role_reaches_only_the_bucket(deployment: Deployment) -> None:
    iam = deployment.emu.client("iam")
    role = deployment.outputs["iam_role"]["name"]
    trust = iam.get_role(RoleName=role)["Role"]["AssumeRolePolicyDocument"]
    if isinstance(trust, str):
        trust = json.loads(trust)
    assert [s["Principal"] for s in trust["Statement"]] == [{"Service": "ec2.amazonaws.com"}]
    assert iam.list_attached_role_policies(RoleName=role)["AttachedPolicies"] == []
    assert iam.list_role_policies(RoleName=role)["PolicyNames"] == ["checkpoint-bucket"]
    document = iam.get_role_policy(RoleName=role, PolicyName="checkpoint-bucket")["PolicyDocument"]
    if isinstance(document, str):
        document = json.loads(document)
    arn = f"arn:aws:s3:::{deployment.bucket}"
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
    profile = deployment.outputs["iam_role"]["instance_profile"]
    roles = iam.get_instance_profile(InstanceProfileName=profile)["InstanceProfile"]["Roles"]
    assert [r["RoleName"] for r in roles] == [role]


# --- down, then down --delete-buckets ----------------------------------------------------------------------


@needs_emulator
def test_destroying_the_cluster_keeps_the_bucket_then_the_storage_root_removes_it(
    deployment: Deployment,
) -> None:
    emu = deployment.emu
    ec2, s3, iam = emu.client("ec2"), emu.client("s3"), emu.client("iam")
    name = deployment.cluster_name
    role = deployment.outputs["iam_role"]["name"]

    # -refresh=false: the state was just written by the apply; skipping the refresh saves a
    # provider start per destroy on a busy test machine.
    deployment.cluster("destroy", "-auto-approve", "-input=false", "-refresh=false")
    deployment.destroyed.add("cluster")
    assert deployment.live_instances() == []
    tagged = [{"Name": "tag:rlinfra:cluster", "Values": [name]}]
    assert ec2.describe_security_groups(Filters=tagged)["SecurityGroups"] == []
    assert (
        ec2.describe_key_pairs(Filters=[{"Name": "key-name", "Values": [name]}])["KeyPairs"] == []
    )
    assert ec2.describe_vpcs(Filters=tagged)["Vpcs"] == []
    assert ec2.describe_subnets(Filters=tagged)["Subnets"] == []
    assert ec2.describe_internet_gateways(Filters=tagged)["InternetGateways"] == []
    assert [r["RoleName"] for r in iam.list_roles()["Roles"] if r["RoleName"] == role] == []
    s3.head_bucket(Bucket=deployment.bucket)  # still there

    # force_destroy is off: Terraform never empties a bucket that holds checkpoints.
    state = json.loads((deployment.storage.workdir / "terraform.tfstate").read_text())
    buckets = [
        instance["attributes"]
        for resource in state["resources"]
        if resource["type"] == "aws_s3_bucket"
        for instance in resource["instances"]
    ]
    assert [b["force_destroy"] for b in buckets] == [False]

    deployment.storage("destroy", "-auto-approve", "-input=false", "-refresh=false")
    deployment.destroyed.add("storage")
    buckets = [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert deployment.bucket not in buckets
