"""The deployment folder: writing rendered files, the SSH key, the cluster record and its lock."""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rlinfra.context import rlinfra_home
from rlinfra.errors import ClusterBusyError, OperationError, UsageError
from rlinfra.record import Record

# Subtrees that rendering owns entirely: files in them that a new render does not produce are
# removed, so a deployment folder never keeps a stale module or role file.
MANAGED_PREFIXES = (
    "terraform/cluster/modules/",
    "terraform/storage/modules/",
    "ansible/roles/",
    "ansible/playbooks/",
)


def clusters_dir(home: Path | None = None) -> Path:
    return (home or rlinfra_home()) / "clusters"


def deployment_dir(cluster: str, home: Path | None = None) -> Path:
    return clusters_dir(home) / cluster


def known_clusters(home: Path | None = None) -> list[str]:
    root = clusters_dir(home)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "record.json").is_file())


def write_files(root: Path, files: dict[str, str]) -> list[str]:
    """Write rendered files under ``root``; returns the paths that changed."""
    changed: list[str] = []
    for rel, text in sorted(files.items()):
        path = root / rel
        if path.is_file() and path.read_text() == text:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        mode = 0o755 if rel.endswith(".sh") or ("/files/" in rel and rel.endswith(".py")) else 0o644
        tmp.chmod(mode)
        tmp.replace(path)
        changed.append(rel)
    for prefix in MANAGED_PREFIXES:
        top = root / prefix
        if not top.is_dir():
            continue
        for path in sorted(top.rglob("*"), reverse=True):
            rel = path.relative_to(root).as_posix()
            if path.is_file() and rel not in files and "__pycache__" not in rel:
                path.unlink()
                changed.append(rel)
            elif path.is_dir() and not any(path.iterdir()):
                path.rmdir()
    return changed


def ensure_ssh_key(folder: Path) -> str:
    """The deployment's SSH key pair (made once, private key 0600); returns the public key."""
    key = folder / "ssh" / "id_ed25519"
    pub = key.with_suffix(".pub")
    if not key.is_file() or not pub.is_file():
        key.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        for path in (key, pub):
            path.unlink(missing_ok=True)
        try:
            subprocess.run(
                [
                    "ssh-keygen",
                    "-q",
                    "-t",
                    "ed25519",
                    "-N",
                    "",
                    "-C",
                    f"rlinfra-{folder.name}",
                    "-f",
                    str(key),
                ],
                check=True,
                capture_output=True,
                text=True,
            )
        except FileNotFoundError:
            raise UsageError(
                "ssh-keygen not found", "Install OpenSSH (Debian: openssh-client)."
            ) from None
        except subprocess.CalledProcessError as exc:
            raise OperationError(f"ssh-keygen failed: {exc.stderr.strip()}") from None
    key.chmod(0o600)
    return pub.read_text().strip()


RAY_TOKEN_FILE = "secrets/ray_auth_token"


def ensure_ray_token(folder: Path) -> Path:
    """The cluster's Ray authentication token (made once, 0600); returns its path.

    Every Ray server and client of the cluster runs with RAY_AUTH_MODE=token and reads this
    token from a file (RAY_AUTH_TOKEN_PATH), so the value never appears in arguments, logs,
    rendered files or job metadata.
    """
    import secrets

    path = folder / RAY_TOKEN_FILE
    if not path.is_file() or not path.read_text().strip():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_hex(32))
        tmp.replace(path)
    path.parent.chmod(0o700)
    path.chmod(0o600)
    return path


# ---------------------------------------------------------------- record


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()


def read_record(folder: Path) -> Record | None:
    path = folder / "record.json"
    if not path.is_file():
        return None
    try:
        return Record.model_validate_json(path.read_text())
    except ValidationError as exc:
        raise OperationError(
            f"{path}: not a cluster record rlinfra can read: {exc.errors()[0]['msg']}",
            "It was written by another rlinfra version, or edited by hand.",
        ) from None


def write_record(folder: Path, record: Record) -> Record:
    now = _now()
    record = record.with_(updated_at=now, created_at=record.created_at or now)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / "record.json.tmp"
    data = record.model_dump(mode="json")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    tmp.replace(folder / "record.json")
    return record


def update_record(folder: Path, **fields: Any) -> Record:
    record = read_record(folder) or Record(cluster=folder.name)
    return write_record(folder, record.with_(**fields))


def new_task_id(cluster: str) -> str:
    return f"{cluster}-{uuid.uuid4().hex[:12]}"


def require_cluster(cluster: str, home: Path | None = None) -> tuple[Path, Record]:
    """The folder and record of a known cluster, or a UsageError listing the known ones."""
    folder = deployment_dir(cluster, home)
    record = read_record(folder)
    if record is None:
        known = known_clusters(home)
        hint = "Known clusters: " + ", ".join(known) if known else "No clusters exist yet."
        raise UsageError(f"unknown cluster {cluster!r}", hint)
    return folder, record


# ---------------------------------------------------------------- lock


@contextlib.contextmanager
def cluster_lock(folder: Path, command: str) -> Iterator[None]:
    """Hold the cluster's lock; a second command that changes the cluster refuses to start."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / ".lock"
    handle = path.open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "another rlinfra command"
        handle.close()
        raise ClusterBusyError(
            f"cluster {folder.name!r} is busy: {holder} holds its lock",
            "Wait for it to finish; the lock is released when that command exits.",
        ) from None
    try:
        handle.seek(0)
        handle.truncate()
        handle.write(f"`rlinfra {command}` (pid {os.getpid()})")
        handle.flush()
        yield
    finally:
        handle.seek(0)
        handle.truncate()
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


_HOLDER = re.compile(r"^`rlinfra (?P<command>[^`]+)` \(pid (?P<pid>\d+)\)$")


def lock_holder(folder: Path) -> dict[str, Any] | None:
    """The command that holds the cluster's lock: {"command", "pid", "running"}; None when none.

    A command that exits, even by Ctrl-C, clears the lock's text. A killed one cannot: its text
    stays, naming a process that is gone ("running": false), and the cluster's stage is then
    wherever that command stopped.
    """
    try:
        text = (folder / ".lock").read_text().strip()
    except OSError:
        return None
    found = _HOLDER.match(text)
    if not found:
        return None
    pid = int(found["pid"])
    return {"command": found["command"], "pid": pid, "running": _lock_held(folder / ".lock", pid)}


def _lock_held(path: Path, pid: int) -> bool:
    """Whether a process holds the flock on path: the kernel's lock table where there is one
    (Linux), else whether the named process is alive."""
    try:
        info = path.stat()
        table = Path("/proc/locks").read_text()
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    device = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    return any("FLOCK" in line and device in line.split() for line in table.splitlines())
