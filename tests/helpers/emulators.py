"""The API emulators the tests run against, each on a free port and stopped by pid at the end.

- moto (``moto_server``): the AWS API for Terraform's real AWS provider, boto3 and rclone.
- gcp-storage-emulator: the GCS JSON API for the GCP bucket operations and the storage role.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REGION = "us-east-1"
MOTO_SERVER = Path(sys.executable).parent / "moto_server"

# Images the AWS emulator serves, so that the cluster module's own lookup (most recent Deep
# Learning GPU AMI for Ubuntu 22.04 from Amazon) runs for real: the newer of the two must win.
DLAMI_NEW = "ami-0a1b2c3d4e5f60718"
DLAMI_OLD = "ami-0a1b2c3d4e5f60719"
UBUNTU = "ami-0b1b2c3d4e5f60718"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


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


def aws_emulator_missing() -> str | None:
    """Why the AWS emulator cannot run here (None when it can)."""
    if not MOTO_SERVER.exists():
        return f"moto_server not found next to {sys.executable} (pip install 'moto[server]')"
    try:
        import boto3  # noqa: F401
    except ImportError:
        return "boto3 is not installed"
    return None


@dataclass
class AwsEmulator:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def session(self, key_id: str = "testing", secret: str = "testing") -> Any:
        import boto3

        return boto3.Session(
            aws_access_key_id=key_id, aws_secret_access_key=secret, region_name=REGION
        )

    def client(self, service: str) -> Any:
        return self.session().client(service, endpoint_url=self.url)

    def require_authentication(self, on: bool) -> None:
        """moto checks request signatures against its IAM users while this is on (the whole
        server: a test that turns it on turns it off again before others run)."""
        request = urllib.request.Request(
            f"{self.url}/moto-api/reset-auth",
            data=b"0" if on else b"inf",
            method="POST",
            headers={"Content-Type": "text/plain"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200


def _stop(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def _wait_listening(host: str, port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        with contextlib.suppress(OSError), socket.create_connection((host, port), 1):
            return
        if process.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"the emulator did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)


@contextlib.contextmanager
def aws_emulator(tmp: Path, host: str = "127.0.0.1") -> Iterator[AwsEmulator]:
    """A moto server of our own on a free port of ``host`` (loopback, or an address that test
    hosts reach), stopped by pid at the end."""
    tmp.mkdir(parents=True, exist_ok=True)
    images = tmp / "amis.json"
    images.write_text(json.dumps(EMULATOR_IMAGES))
    port = free_port(host)
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
        _wait_listening(host, port, process, log)
        yield AwsEmulator(f"http://{host}:{port}", process, log)
    finally:
        _stop(process)


def find_gcs_emulator() -> str | None:
    configured = os.environ.get("RLINFRA_GCS_EMULATOR")
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    beside = Path(sys.executable).with_name("gcp-storage-emulator")
    if beside.exists():
        return str(beside)
    return shutil.which("gcp-storage-emulator")


GCS_EMULATOR_MISSING = (
    "gcp-storage-emulator not found: set RLINFRA_GCS_EMULATOR to its executable "
    "(pip install gcp-storage-emulator into a venv of its own; it needs google-crc32c)"
)


@contextlib.contextmanager
def gcs_emulator(tmp: Path) -> Iterator[str]:
    """gcp-storage-emulator on a free loopback port (in memory); yields its URL."""
    executable = find_gcs_emulator()
    if executable is None:
        pytest.skip(GCS_EMULATOR_MISSING)
    tmp.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = tmp / "gcs-emulator.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [executable, "start", "--host", "127.0.0.1", "--port", str(port), "--in-memory"],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(url + "/", timeout=2):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(log.read_text()) from None
                time.sleep(0.1)
        yield url
    finally:
        _stop(process)


def own_address() -> str:
    """This machine's address on its default route (not loopback), or skip. Only the socket's
    own address is read: connecting a UDP socket sends nothing."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.123", 9))
        except OSError:
            pytest.skip("no non-loopback IPv4 route on this machine")
        address = str(probe.getsockname()[0])
    if address.startswith("127."):
        pytest.skip("no non-loopback IPv4 address on this machine")
    return address
