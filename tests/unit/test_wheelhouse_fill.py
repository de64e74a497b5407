"""The controller's wheelhouse is filled once, also when two `up`s start at once: the second
waits on the first one's lock and then uses its fill instead of downloading into it."""

from __future__ import annotations

import fcntl
import subprocess
import threading
import time
from pathlib import Path

import pytest

from rlinfra import controller
from rlinfra.pins import pin_sets


def test_a_second_fill_waits_for_the_first_and_downloads_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pins = pin_sets()["cpu-sandbox"]
    folder = controller.wheelhouse_dir(tmp_path, pins)
    folder.parent.mkdir(parents=True)
    downloads: list[list[str]] = []

    def no_download(argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        downloads.append(argv)
        return subprocess.CompletedProcess(argv, 1, "", "not in this test")

    monkeypatch.setattr(controller.subprocess, "run", no_download)
    result: list[Path] = []
    with (folder.parent / f".{folder.name}.lock").open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # the first `up`, still downloading
        second = threading.Thread(
            target=lambda: result.append(controller.build_wheelhouse(tmp_path, pins, "auto"))
        )
        second.start()
        time.sleep(0.5)
        assert second.is_alive() and result == []  # waiting for the lock
        folder.mkdir()
        (folder / ".complete").write_text("done\n")  # the first one's fill ends
        fcntl.flock(held, fcntl.LOCK_UN)
    second.join(timeout=10)
    assert result == [folder]
    assert downloads == []


def test_a_fill_that_fails_leaves_no_complete_marker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pins = pin_sets()["cpu-sandbox"]

    def failing(argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 1, "", "ERROR: no network")

    monkeypatch.setattr(controller.subprocess, "run", failing)
    with pytest.raises(controller.OperationError, match="no network"):
        controller.build_wheelhouse(tmp_path, pins, "auto")
    assert not (controller.wheelhouse_dir(tmp_path, pins) / ".complete").exists()
