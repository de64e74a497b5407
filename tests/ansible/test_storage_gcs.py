"""The storage role's Cloud Storage path (`storage_backend: gcs`), for real: rclone mounts (MOUNT)
and copies (COPY) a bucket of gcp-storage-emulator, through Ansible on this machine.

What stands in for Google: the emulator (the Cloud Storage JSON API, in memory) at
``storage_gcs_endpoint``, which takes no credentials, so the remote asks with none (rclone's
anonymous mode). On a VM the same role reads the service account's token from the metadata
server (env_auth); that part needs Google Cloud and is not run here.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from helpers.ansible import run_playbook

STORAGE_PLAY = """\
- name: Bring the buckets to the node
  hosts: rlinfra_nodes
  gather_facts: false
  roles:
    - storage
"""


def _request(method: str, url: str, body: bytes | None = None) -> Any:
    upload = "/upload/" in url
    headers = {"Content-Type": "application/octet-stream" if upload else "application/json"}
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    with urllib.request.urlopen(request, timeout=10) as response:
        data = response.read()
    return json.loads(data) if data else None


def _objects(emulator: str, bucket: str) -> dict[str, bytes]:
    listed = _request("GET", f"{emulator}/storage/v1/b/{bucket}/o") or {}
    found = {}
    for item in listed.get("items", []):
        name = urllib.parse.quote(item["name"], safe="")
        with urllib.request.urlopen(
            f"{emulator}/storage/v1/b/{bucket}/o/{name}?alt=media", timeout=10
        ) as response:
            found[item["name"]] = response.read()
    return found


def _localhost() -> dict[str, Any]:
    import sys

    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    return {
        "all": {
            "children": {
                "rlinfra_nodes": {"children": {"rlinfra_head": {"hosts": {"gcs-local": host}}}}
            }
        }
    }


def _unmount(path: Path) -> None:
    if subprocess.run(["mountpoint", "-q", str(path)], check=False).returncode == 0:
        subprocess.run(["fusermount3", "-u", str(path)], check=False)
        if subprocess.run(["mountpoint", "-q", str(path)], check=False).returncode == 0:
            subprocess.run(["umount", "-l", str(path)], check=False)


def test_storage_role_mounts_and_copies_a_cloud_storage_bucket(
    storage_emulator: str, tmp_path: Path
) -> None:
    if not Path("/dev/fuse").exists():
        pytest.fail("rclone mount needs /dev/fuse, which this machine lacks")
    bucket = "rlinfra-gcs-role-test"
    _request(
        "POST",
        f"{storage_emulator}/storage/v1/b?project=test",
        json.dumps({"name": bucket}).encode(),
    )
    _request(
        "POST",
        f"{storage_emulator}/upload/storage/v1/b/{bucket}/o?uploadType=media&name=seed%2Fstep.txt",
        b"from the bucket",
    )
    mounted, copied = tmp_path / "checkpoints", tmp_path / "copied"
    extravars = {
        "storage_backend": "gcs",
        "storage_gcs_endpoint": f"{storage_emulator}/storage/v1/",
        "storage_rclone_cache_dir": str(tmp_path / "rclone-cache"),
        "storage_mounts": [
            {"bucket": bucket, "mount_path": str(mounted), "mode": "MOUNT"},
            {"bucket": bucket, "mount_path": str(copied), "mode": "COPY"},
        ],
    }
    play = tmp_path / "storage.yml"
    play.write_text(STORAGE_PLAY)
    try:
        first = run_playbook(tmp_path / "run1", str(play), _localhost(), extravars)
        assert first.rc == 0, first.stdout[-4000:]
        assert subprocess.run(["mountpoint", "-q", str(mounted)]).returncode == 0
        assert (mounted / "seed" / "step.txt").read_bytes() == b"from the bucket"
        assert (copied / "seed" / "step.txt").read_bytes() == b"from the bucket"
        # A write through the mount reaches the bucket (rclone uploads from its write cache).
        (mounted / "global_step_2").mkdir()
        (mounted / "global_step_2" / "model.pt").write_bytes(b"weights")
        deadline = time.monotonic() + 60
        while "global_step_2/model.pt" not in _objects(storage_emulator, bucket):
            assert time.monotonic() < deadline, _objects(storage_emulator, bucket)
            time.sleep(0.5)
        assert _objects(storage_emulator, bucket)["global_step_2/model.pt"] == b"weights"
        # The second run mounts nothing again; its copy brings the new object, and only it.
        second = run_playbook(tmp_path / "run2", str(play), _localhost(), extravars)
        assert second.rc == 0, second.stdout[-4000:]
        assert second.changed_tasks() == ["gcs-local: Copy the bucket's files to the path"]
        assert (copied / "global_step_2" / "model.pt").read_bytes() == b"weights"
        # Converged: a third run changes nothing.
        third = run_playbook(tmp_path / "run3", str(play), _localhost(), extravars)
        assert third.rc == 0, third.stdout[-4000:]
        assert third.changed_tasks() == [] and not any(third.changed().values())
    finally:
        _unmount(mounted)


def test_an_emulator_endpoint_is_refused_on_the_gcp_cloud(tmp_path: Path) -> None:
    """The endpoint turns the credentials off: a cluster of the gcp cloud never takes it."""
    play = tmp_path / "storage.yml"
    play.write_text(STORAGE_PLAY)
    extravars = {
        "rlinfra_cloud": "gcp",
        "storage_backend": "gcs",
        "storage_gcs_endpoint": "http://127.0.0.1:1/storage/v1/",
        "storage_mounts": [{"bucket": "b", "mount_path": str(tmp_path / "m"), "mode": "MOUNT"}],
    }
    run = run_playbook(tmp_path / "run", str(play), _localhost(), extravars)
    assert run.rc != 0
    assert (
        "storage_gcs_endpoint and storage_s3_endpoint (emulators only) unset on their own cloud"
        in ("\n".join(run.failures()))
    )
    assert not (tmp_path / "m").exists()
