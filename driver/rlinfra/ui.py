"""Progress output: stages and steps on stderr, results on stdout."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator

from rich.console import Console

err = Console(stderr=True, highlight=False, soft_wrap=True, markup=False)
out = Console(highlight=False, soft_wrap=True, markup=False)


def quiet() -> bool:
    return os.environ.get("RLINFRA_QUIET", "") not in ("", "0")


def info(message: str) -> None:
    if not quiet():
        err.print(message)


def warn(message: str) -> None:
    err.print(f"Warning: {message}", style="yellow")


class Step:
    """A long step: a live status line while it runs, one line with its time when it ends."""

    def __init__(self, title: str) -> None:
        self.title = title
        self._status: object | None = None

    def update(self, detail: str) -> None:
        status = self._status
        if status is not None:
            detail = detail.strip()
            if len(detail) > 100:
                detail = detail[:97] + "..."
            status.update(f"{self.title}: {detail}")  # type: ignore[attr-defined]


@contextlib.contextmanager
def step(title: str) -> Iterator[Step]:
    handle = Step(title)
    start = time.monotonic()
    live = err.is_terminal and not quiet()
    if not live and not quiet():
        err.print(f"… {title}")
    try:
        if live:
            with err.status(title) as status:
                handle._status = status
                yield handle
        else:
            yield handle
    except BaseException:
        if not quiet():
            err.print(f"✗ {title} ({time.monotonic() - start:.1f} s)", style="red")
        raise
    if not quiet():
        err.print(f"✓ {title} ({time.monotonic() - start:.1f} s)")


def confirm(question: str) -> bool:
    if not sys.stdin.isatty():
        return False
    answer = input(f"{question} [y/N] ")
    return answer.strip().lower() in {"y", "yes"}
