"""What the controller (the machine running rlinfra) hands to nodes: uv, Python, a wheelhouse."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from rlinfra import ui
from rlinfra.errors import OperationError, UsageError
from rlinfra.pins import PinSet


def uv_binary() -> str:
    try:
        from uv import find_uv_bin

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        pass
    found = shutil.which("uv")
    if not found:
        raise UsageError("uv not found", "Install it with `pip install uv`.")
    return found


def system_python() -> str:
    """The interpreter behind this (possibly virtual) environment."""
    base = Path(sys.base_prefix) / "bin"
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for name in (version, "python3"):
        candidate = base / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    raise UsageError(f"no system Python found in {base}")


def staged_uv(cache: Path, uv: str) -> Path:
    """Where a copy of the controller's uv goes for hosts that share this machine's disk.

    Named by the binary's path, size and modification time, so a new uv gets a new name and a
    host never copies a half-replaced file.
    """
    source = Path(uv).resolve()
    stat = source.stat()
    key = f"{source}:{stat.st_size}:{stat.st_mtime_ns}"
    return cache / "bin" / f"uv-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def stage_uv(cache: Path, uv: str) -> Path:
    """Copy uv into the cache once (atomically), and return the copy's path."""
    dest = staged_uv(cache, uv)
    if not dest.is_file():
        dest.parent.mkdir(parents=True, exist_ok=True)
        partial = dest.with_name(f".{dest.name}.{os.getpid()}")
        shutil.copyfile(uv, partial)
        partial.chmod(0o755)
        os.replace(partial, dest)
    return dest


def _wheelhouse_requirements(pins: PinSet) -> list[str]:
    """pip arguments naming what the wheelhouse holds: the pin set's lock when it is current
    (the exact versions nodes install with --require-hashes; the whole closure already, resolved
    with the pin set's overrides, so --no-deps), else its requirements."""
    from rlinfra.lock import current_lock

    lock = current_lock(pins)
    return ["--no-deps", "-r", str(lock)] if lock is not None else list(pins.packages)


def _pins_folder_name(pins: PinSet) -> str:
    """<pin set>-<digest of its lock (or of its packages when it has no lock)>."""
    from rlinfra.lock import current_lock

    lock = current_lock(pins)
    what = lock.read_text() if lock is not None else "\n".join(pins.packages)
    digest = hashlib.sha256(what.encode()).hexdigest()[:12]
    return f"{pins.name}-{digest}"


def wheelhouse_dir(cache: Path, pins: PinSet) -> Path:
    return cache / "wheelhouse" / _pins_folder_name(pins)


def pycache_dir(cache: Path, pins: PinSet) -> Path:
    """Bytecode of one lock's packages, shared by hosts that install them at the same path."""
    return cache / "pycache" / _pins_folder_name(pins)


# What uv needs, offline, to build a source-only package on a node (setuptools' PEP 517 backend).
SDIST_BUILD_TOOLS = ("setuptools", "wheel")


def build_wheelhouse(cache: Path, pins: PinSet, source: str) -> Path:
    """Download every wheel of a pin set once, for nodes that have no internet.

    ``source`` is 'auto' (download here with pip) or an existing folder of wheels.
    """
    if source != "auto":
        folder = Path(source).expanduser()
        if not folder.is_dir():
            raise UsageError(f"software.wheelhouse: {source} is not a folder")
        return folder.resolve()
    folder = wheelhouse_dir(cache, pins)
    if (folder / ".complete").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    # Two `up`s on one controller fill one wheelhouse: the second waits for the first's.
    with (folder.parent / f".{folder.name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return _fill_wheelhouse(folder, pins)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _fill_wheelhouse(folder: Path, pins: PinSet) -> Path:
    marker = folder / ".complete"
    if marker.is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--disable-pip-version-check",
        # Wheels where there are any; a package published only as source (Hydra's
        # antlr4-python3-runtime) comes as its sdist, which uv builds on the node with the
        # build tools below, offline.
        "--prefer-binary",
        "-d",
        str(folder),
        *_wheelhouse_requirements(pins),
    ]
    if pins.index_url:
        argv += ["--index-url", pins.index_url]
    for url in pins.extra_index_urls:
        argv += ["--extra-index-url", url]
    with ui.step(f"wheelhouse for pin set {pins.name}"):
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = (result.stderr.strip().splitlines() or ["pip download failed"])[-1]
        raise OperationError(f"building the wheelhouse failed: {tail}")
    if any(path.suffix == ".gz" or path.name.endswith(".zip") for path in folder.iterdir()):
        tools = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check"]
        tools += ["--only-binary=:all:", "-d", str(folder), *SDIST_BUILD_TOOLS]
        built = subprocess.run(tools, capture_output=True, text=True, check=False)
        if built.returncode != 0:
            tail = (built.stderr.strip().splitlines() or ["pip download failed"])[-1]
            raise OperationError(f"building the wheelhouse failed (build tools): {tail}")
    marker.write_text("\n".join(pins.packages) + "\n")
    return folder
