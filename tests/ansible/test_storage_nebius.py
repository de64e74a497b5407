"""The storage role on the nebius cloud, for real: two namespaced hosts (helpers.netbed) mount
(MOUNT) and copy (COPY) buckets of an S3 endpoint with rclone, through Ansible over SSH, with the
deployment folder that the real renderer writes for a nebius profile and the bucket key sent the
way `up` sends it.

What stands in for Nebius: moto stands in for Nebius Object Storage (S3-compatible). The endpoint
URL is the emulator's (``RLINFRA_NEBIUS_S3_ENDPOINT``, on the hosts' bridge, where they reach
it); the region is Nebius's, eu-north1, so rclone and boto3 sign for eu-north1 as on Nebius. moto
checks every request's signature against the key of an IAM user of its own (request
authentication on): that key is the nodes' bucket key, exported as the nebius cloud's default
NEBIUS_S3_ACCESS_KEY_ID / NEBIUS_S3_SECRET_ACCESS_KEY, and its secret is the canary that must
reach the nodes' 0600 key file and nothing else: no file of the deployment folder (rendered vars,
inventory, Ansible's artifacts), no process argument on the nodes.

The path is `up`'s from the render on: ``render`` and ``write_files`` (the role variables come
from ``NebiusCloud.ansible_vars``), ``render_inventory`` for the bed's hosts,
``NebiusCloud.before_configure`` (``storage.s3.send_bucket_key`` over SSH's standard input) and
the driver's own ``runners.ansible.run_playbook``, with the key in this process's environment
throughout, as it is during `up`. Only the playbook is the test's: the storage role alone.

One bed, one role run: the module fixture does everything once, the tests read what it left, and
its end unmounts, checks that rclone is gone and removes what it put on the hosts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import subprocess
import time
import uuid
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers.contexts import fixed_context
from helpers.emulators import AwsEmulator, aws_emulator, aws_emulator_missing
from helpers.netbed import NODE_IFACE, Node, Testbed
from rlinfra import layout
from rlinfra.clouds.nebius import cloud as nebius
from rlinfra.clouds.planning import make_plan
from rlinfra.context import Context
from rlinfra.deploy import write_files
from rlinfra.plan import Plan
from rlinfra.profile import profile_from_data
from rlinfra.record import Host
from rlinfra.render import render, render_inventory
from rlinfra.runners.ansible import PlaybookResult, run_playbook

REGION = "eu-north1"
PLAYBOOK = "rlt-storage.yml"
STORAGE_PLAY = """\
- name: Bring the buckets to the node
  hosts: rlinfra_nodes
  gather_facts: false
  roles:
    - storage
"""
# On the hosts' own /opt (each host has its own), so nothing lands in this machine's folders.
PLACE = "/opt/rlt-nebius"
CKPT_PATH = f"{PLACE}/ckpt"
DATA_PATH = f"{PLACE}/data"
SEED = {"seed/step.txt": b"from the nebius bucket"}
DATA = {"corpus/part-0.jsonl": b'{"text": "a"}\n', "corpus/nested/part-1.jsonl": b"{}\n"}
KEY_CHECK = "Require the S3 key (sent over SSH before this role, 0600)"


@dataclass
class Deployed:
    """What the module fixture made: the plan and context, the rendered role variables, the
    emulator and the nodes' key, the role's run and its events, and where everything is."""

    bed: Testbed
    plan: Plan
    ctx: Context
    variables: dict[str, Any]
    emu: AwsEmulator
    key: tuple[str, str]
    ckpt_bucket: str
    data_bucket: str
    result: PlaybookResult
    events: list[dict[str, Any]]
    root: Path

    def s3(self, secret: str | None = None) -> Any:
        """boto3 S3 at the emulator, signing for Nebius's region with the nodes' key."""
        return self.emu.session(self.key[0], secret or self.key[1]).client(
            "s3", endpoint_url=self.emu.url, region_name=REGION
        )

    def objects(self, bucket: str) -> dict[str, bytes]:
        s3 = self.s3()
        listed = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
        return {
            item["Key"]: s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
            for item in listed
        }

    def ok_tasks(self, changed: bool | None = None) -> list[str]:
        """'host: task' of each task that ran (only the changed ones, or only the unchanged)."""
        return [
            f"{e['event_data'].get('host')}: {e['event_data'].get('task')}"
            for e in self.events
            if e.get("event") == "runner_on_ok"
            and (changed is None or bool(e["event_data"].get("res", {}).get("changed")) == changed)
        ]

    def on(self, node: Node, command: str) -> str:
        done = self.bed.ssh(node, command, timeout=60)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        return done.stdout


def _profile(ckpt_bucket: str, data_bucket: str) -> dict[str, Any]:
    return {
        "cloud": "nebius",
        "region": REGION,
        "resources": {"accelerators": "H100:1", "num_nodes": 2},
        "storage": [
            {"bucket": ckpt_bucket, "mount_path": CKPT_PATH, "mode": "MOUNT"},
            {"bucket": data_bucket, "mount_path": DATA_PATH, "mode": "COPY"},
        ],
    }


def _bucket_key(emu: AwsEmulator) -> tuple[str, str]:
    """An IAM user of the emulator that may use S3, and its key (made while moto still takes
    any key; request authentication goes on afterwards)."""
    iam = emu.client("iam")
    iam.create_user(UserName="rlt-nebius-nodes")
    iam.put_user_policy(
        UserName="rlt-nebius-nodes",
        PolicyName="s3",
        PolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
            }
        ),
    )
    made = iam.create_access_key(UserName="rlt-nebius-nodes")["AccessKey"]
    return made["AccessKeyId"], made["SecretAccessKey"]


def _hosts(bed: Testbed) -> list[Host]:
    """The bed's nodes as a nebius cluster's record names them: root over SSH with the
    deployment's own key (``<folder>/ssh/id_ed25519``)."""
    return [
        Host(
            name=node.name,
            rank=node.index,
            ssh_host=node.ip,
            private_ip=node.ip,
            interface=NODE_IFACE,
            ssh_user="root",
        )
        for node in bed.nodes
    ]


def _give_ssh_key(folder: Path, bed: Testbed) -> None:
    """The bed's key as the deployment's own, where runners/ssh.py and the inventory look."""
    (folder / "ssh").mkdir(parents=True, mode=0o700)
    shutil.copyfile(bed.key, folder / "ssh" / "id_ed25519")
    (folder / "ssh" / "id_ed25519").chmod(0o600)


def _events(result: PlaybookResult) -> list[dict[str, Any]]:
    folder = Path(result.artifact_dir) / "job_events"
    return [json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))]


def _rclone_pids(node: Node) -> list[int]:
    """rclone's processes in the host's network namespace."""
    listed = subprocess.run(
        ["ip", "netns", "pids", node.netns], capture_output=True, text=True, check=False
    )
    found = []
    for pid in (int(p) for p in listed.stdout.split() if p.isdigit()):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/comm").read_text().strip() == "rclone":
                found.append(pid)
    return found


def _clean_node(bed: Testbed, node: Node) -> None:
    """Unmount (rclone's daemon ends with its mount), wait for rclone to go, then remove what the
    key and the role put on the host."""
    bed.ssh(
        node,
        f"if mountpoint -q {CKPT_PATH}; then fusermount3 -u {CKPT_PATH} || umount -l {CKPT_PATH};"
        f" fi; rm -rf {PLACE} {layout.ROOT}",
        timeout=60,
    )
    deadline = time.monotonic() + 20
    while _rclone_pids(node):
        assert time.monotonic() < deadline, f"rclone still runs on {node.name}"
        time.sleep(0.2)
    assert not (node.opt / "rlinfra").exists() and not (node.opt / "rlt-nebius").exists()


def _files(root: Path, skip: Collection[Path] = ()) -> Iterator[Path]:
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink() and path not in skip:
            yield path


@pytest.fixture(scope="module")
def deployed(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployed]:
    missing = aws_emulator_missing()
    if missing:
        pytest.skip(missing)
    if not Path("/dev/fuse").exists():
        pytest.fail("rclone mount needs /dev/fuse, which this machine lacks")
    root = tmp_path_factory.mktemp("nebius-storage")
    ident = uuid.uuid4().hex[:8]
    ckpt_bucket, data_bucket = f"rlt-nebius-ckpt-{ident}", f"rlt-nebius-data-{ident}"
    with contextlib.ExitStack() as stack:
        # The hosts reach the emulator on their bridge, not on this machine's loopback. It is
        # this module's own: its authentication setting ends with it.
        emu = stack.enter_context(aws_emulator(root / "moto", host=testbed.subnet.gateway))
        key = _bucket_key(emu)
        emu.require_authentication(True)
        env = stack.enter_context(pytest.MonkeyPatch.context())
        env.setenv(nebius.S3_ENDPOINT_ENV, emu.url)
        env.setenv("NEBIUS_S3_ACCESS_KEY_ID", key[0])
        env.setenv("NEBIUS_S3_SECRET_ACCESS_KEY", key[1])
        env.setenv("RLINFRA_QUIET", "1")

        # The buckets, as the nebius_bucket module would leave them, in Nebius's region.
        s3 = emu.session(*key).client("s3", endpoint_url=emu.url, region_name=REGION)
        for bucket in (ckpt_bucket, data_bucket):
            s3.create_bucket(
                Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": REGION}
            )
        for name, body in SEED.items():
            s3.put_object(Bucket=ckpt_bucket, Key=name, Body=body)
        for name, body in DATA.items():
            s3.put_object(Bucket=data_bucket, Key=name, Body=body)

        # The deployment folder as `up` writes it (the role variables: render.ansible_vars,
        # with NebiusCloud.ansible_vars's on top), and the bed's hosts as its inventory.
        profile = profile_from_data(_profile(ckpt_bucket, data_bucket), "nebius.yaml", "nbs")
        plan = make_plan(profile, "nebius.yaml", "rlt-nebius")
        folder = root / "deployment"
        ctx = dataclasses.replace(fixed_context("rlt-nebius"), deployment_dir=folder)
        _give_ssh_key(folder, testbed)
        write_files(folder, render(plan, ctx))
        hosts = _hosts(testbed)
        (folder / "ansible" / "inventory.yml").write_text(render_inventory(plan, hosts, ctx))
        (folder / "ansible" / "playbooks" / PLAYBOOK).write_text(STORAGE_PLAY)
        variables = yaml.safe_load((folder / "ansible" / "vars.yml").read_text())

        for node in testbed.nodes:
            stack.callback(_clean_node, testbed, node)
        # The key, as `up` gives it: bucket_key from the profile's variables, then
        # storage.s3.send_bucket_key over SSH's standard input.
        nebius.NebiusCloud().before_configure(plan, folder, hosts)
        result = run_playbook(
            folder / "ansible",
            PLAYBOOK,
            "storage",
            extravars={"acceptance_enabled": False},
            raise_on_failure=False,
        )
        assert result.rc == 0 and result.status == "successful", result.failures
        yield Deployed(
            testbed,
            plan,
            ctx,
            variables,
            emu,
            key,
            ckpt_bucket,
            data_bucket,
            result,
            _events(result),
            root,
        )


def test_the_role_variables_are_the_nebius_clouds_own(
    deployed: Deployed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rendered vars.yml: storage_backend s3 in Nebius's region, at the endpoint override
    (here moto's URL), with the node contract's key file, exactly as NebiusCloud gives them;
    without the override, the region's own endpoint."""
    assert deployed.plan.cloud == "nebius"
    got = deployed.variables
    cloud = nebius.NebiusCloud().ansible_vars(deployed.plan, deployed.ctx)
    assert {k: got[k] for k in cloud} == cloud
    assert got["rlinfra_cloud"] == "nebius"
    assert got["storage_backend"] == "s3"
    assert got["storage_s3_region"] == REGION
    assert got["storage_s3_endpoint"] == deployed.emu.url
    assert got["storage_s3_credentials_file"] == layout.BUCKET_CREDENTIALS
    assert got["storage_mounts"] == [
        {"bucket": deployed.ckpt_bucket, "mount_path": CKPT_PATH, "mode": "MOUNT"},
        {"bucket": deployed.data_bucket, "mount_path": DATA_PATH, "mode": "COPY"},
    ]
    monkeypatch.delenv(nebius.S3_ENDPOINT_ENV)
    real = nebius.NebiusCloud().ansible_vars(deployed.plan, deployed.ctx)
    assert real["storage_s3_endpoint"] == f"https://storage.{REGION}.nebius.cloud"


def test_the_emulator_checks_signatures_for_nebiuss_region(deployed: Deployed) -> None:
    """So the mount below worked with the key that was sent, not with any key."""
    from botocore.exceptions import ClientError

    location = deployed.s3().get_bucket_location(Bucket=deployed.ckpt_bucket)
    assert location["LocationConstraint"] == REGION
    with pytest.raises(ClientError, match="SignatureDoesNotMatch"):
        deployed.s3(secret="not-the-nodes-secret").list_objects_v2(Bucket=deployed.ckpt_bucket)


def test_the_key_reached_each_node_over_ssh_as_a_0600_file(deployed: Deployed) -> None:
    for node in deployed.bed.nodes:
        shown = deployed.on(node, f"stat -c '%a %U' {layout.SECRETS} {layout.BUCKET_CREDENTIALS}")
        assert shown.split("\n")[:2] == ["700 root", "600 root"], (node.name, shown)
    # The role required it on every node (it asks for the file's mode only, no checksum).
    names = sorted(n.name for n in deployed.bed.nodes)
    assert sorted(t for t in deployed.ok_tasks() if t.endswith(KEY_CHECK)) == [
        f"{name}: {KEY_CHECK}" for name in names
    ]


def test_a_file_written_under_the_mount_lands_in_the_bucket(deployed: Deployed) -> None:
    """MOUNT: every node sees the bucket at its mount path; what each writes reaches the bucket
    (rclone's write cache uploads in the background, so wait for it)."""
    for node in deployed.bed.nodes:
        fs = deployed.on(node, f"findmnt -no FSTYPE {CKPT_PATH}").strip()
        assert fs == "fuse.rclone", (node.name, fs)
        seen = deployed.on(node, f"cat {CKPT_PATH}/seed/step.txt").encode()
        assert seen == SEED["seed/step.txt"], node.name
        deployed.on(
            node,
            f"mkdir -p {CKPT_PATH}/global_step_2 && "
            f"printf 'weights of {node.name}' > {CKPT_PATH}/global_step_2/{node.name}.pt",
        )
    wanted = {
        f"global_step_2/{node.name}.pt": f"weights of {node.name}".encode()
        for node in deployed.bed.nodes
    }
    deadline = time.monotonic() + 60
    while True:
        found = deployed.objects(deployed.ckpt_bucket)
        if all(found.get(name) == body for name, body in wanted.items()):
            break
        assert time.monotonic() < deadline, sorted(found)
        time.sleep(0.5)
    assert found == {**SEED, **wanted}


def test_copy_brings_the_buckets_objects_to_each_node(deployed: Deployed) -> None:
    """COPY: the bucket's files in the node's own folder (no mount there)."""
    for node in deployed.bed.nodes:
        listed = deployed.on(
            node, f"mountpoint -q {DATA_PATH} && echo mounted; cd {DATA_PATH} && find . -type f"
        )
        assert "mounted" not in listed
        assert sorted(line.removeprefix("./") for line in listed.split()) == sorted(DATA)
        for name, body in DATA.items():
            # The node's /opt is this folder of the bed: read the bytes rclone copied there.
            assert (node.opt / DATA_PATH.removeprefix("/opt/") / name).read_bytes() == body
    assert sorted(t for t in deployed.ok_tasks(changed=True) if "Copy the bucket" in t) == [
        f"{n.name}: Copy the bucket's files to the path" for n in deployed.bed.nodes
    ]


def test_the_secret_is_in_no_argument_and_no_file_but_the_nodes_key_file(
    deployed: Deployed,
) -> None:
    """While rclone runs: in no process argument on the nodes (rclone's included); in no file of
    the deployment folder (rendered vars, inventory, Ansible's artifacts and events, the ssh
    folder) or the emulator's log, though it was in this process's environment all along; on
    the hosts' own folders, only in their key file."""
    key_id, secret = deployed.key
    for node in deployed.bed.nodes:
        # Every process's whole argument list (the hosts share this machine's process table).
        args = deployed.on(
            node, "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f 2>/dev/null; echo; done"
        )
        assert f"rclone mount rlinfra_s3:{deployed.ckpt_bucket} {CKPT_PATH}" in args, node.name
        assert secret not in args and key_id not in args, node.name
    looked = []
    for path in _files(deployed.root):
        looked.append(path.relative_to(deployed.root).as_posix())
        text = path.read_text(errors="replace")
        assert secret not in text and key_id not in text, path
    artifacts = Path(deployed.result.artifact_dir).relative_to(deployed.root).as_posix()
    for must in (
        "deployment/ansible/vars.yml",
        "deployment/ansible/inventory.yml",
        f"{artifacts}/command",
        f"{artifacts}/stdout",
        "moto/moto.log",
    ):
        assert must in looked, must
    assert any(p.startswith(f"{artifacts}/job_events/") for p in looked)
    key_files = {
        n.opt / layout.BUCKET_CREDENTIALS.removeprefix("/opt/") for n in deployed.bed.nodes
    }
    for path in key_files:
        assert secret in path.read_text()
    for path in _files(deployed.bed.root, skip=key_files):
        assert secret not in path.read_text(errors="replace"), path
