"""A cache filled once per machine, also when two test processes fill it at once."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Callable, Iterator
from pathlib import Path


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on ``path`` (made if missing) for the block's duration."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def fill_once(folder: Path, fill: Callable[[Path], None], marker: str = ".complete") -> Path:
    """``fill(folder)`` unless ``folder/marker`` exists; the marker is written after it.

    The check and the fill run under a lock beside the folder, so a second process waits for
    the first one's fill instead of filling (or reading) a half-made folder.
    """
    done = folder / marker
    if done.is_file():
        return folder
    with file_lock(folder.parent / f".{folder.name}.lock"):
        if not done.is_file():
            folder.mkdir(parents=True, exist_ok=True)
            fill(folder)
            done.write_text("complete\n")
    return folder
