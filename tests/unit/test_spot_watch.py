"""The spot notice watcher (rlinfra_node.spot_watch), run as the nodes run it, against local HTTP
servers of this test's own that answer like AWS's IMDSv2 and GCP's metadata server (the real
services exist only on cloud VMs); and which notice the trainer's patch finds due."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from rlinfra_node.spot_watch import (
    GCP_NOTICE_S,
    Notice,
    due_notice,
    notice_path,
    parse_aws_action,
    read_notices,
    write_notice,
)

DRIVER = Path(__file__).resolve().parents[2] / "driver"
TOKEN = "imds-token-1"


@dataclass
class Metadata:
    """What the fake metadata service answers, and what it was asked."""

    # AWS: the instance-action body (None: 404); GCP: the preempted value.
    instance_action: dict[str, str] | None = None
    preempted: bool = False
    # Answer every GET with this status instead (an unhealthy service).
    fail_with: int | None = None
    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)


def handler_for(state: Metadata) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def _headers(self) -> dict[str, str]:
            return {name.lower(): value for name, value in self.headers.items()}

        def _answer(self, status: int, body: bytes = b"") -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_PUT(self) -> None:
            state.requests.append(("PUT", self.path, self._headers()))
            if self.path != "/latest/api/token":
                return self._answer(404)
            if not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                return self._answer(400)
            self._answer(200, TOKEN.encode())

        def do_GET(self) -> None:
            state.requests.append(("GET", self.path, self._headers()))
            if state.fail_with is not None:
                return self._answer(state.fail_with, b"boom")
            if self.path == "/latest/meta-data/spot/instance-action":
                # IMDSv2 only: no token, no answer.
                if self.headers.get("X-aws-ec2-metadata-token") != TOKEN:
                    return self._answer(401)
                if state.instance_action is None:
                    return self._answer(404, b"Not Found")
                return self._answer(200, json.dumps(state.instance_action).encode())
            if self.path == "/computeMetadata/v1/instance/preempted":
                if self.headers.get("Metadata-Flavor") != "Google":
                    return self._answer(403)
                return self._answer(200, b"TRUE" if state.preempted else b"FALSE")
            self._answer(404)

    return Handler


@pytest.fixture
def metadata() -> Iterator[tuple[Metadata, str]]:
    state = Metadata()
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(state))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class Watch:
    """``python -m rlinfra_node.spot_watch`` as a child process, its output in a file."""

    def __init__(self, tmp_path: Path, *args: str) -> None:
        self.log = tmp_path / "watch.log"
        env = {**os.environ, "PYTHONPATH": str(DRIVER)}
        argv = [sys.executable, "-m", "rlinfra_node.spot_watch", *args]
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)

    def text(self) -> str:
        return self.log.read_text()

    def wait_for(self, what: Callable[[], bool], timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while not what():
            assert self.proc.poll() is None, f"the watcher exited:\n{self.text()}"
            assert time.monotonic() < deadline, f"timed out; the watcher said:\n{self.text()}"
            time.sleep(0.05)

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=10)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def test_aws_notice_is_written_once_after_404s_and_sigterm_stops_cleanly(
    tmp_path: Path, metadata: tuple[Metadata, str]
) -> None:
    state, url = metadata
    notices = tmp_path / "bucket" / "notices"

    def gets() -> list[tuple[str, str, dict[str, str]]]:
        return [r for r in state.requests if r[0] == "GET"]

    watch = Watch(tmp_path, "--provider", "aws", "--endpoint", url, "--notice-dir", str(notices),
                  "--interval", "0.05", "--node", "worker-1")  # fmt: skip
    try:
        watch.wait_for(lambda: len(gets()) >= 3)  # three 404s: no notice
        assert not notices.exists() or not list(notices.iterdir())
        deadline = int(time.time()) + 120
        stamp = datetime.fromtimestamp(deadline, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        state.instance_action = {"action": "terminate", "time": stamp}
        path = notices / "worker-1.json"
        watch.wait_for(path.exists)
        asked = len(gets())
        watch.wait_for(lambda: len(gets()) >= asked + 5)  # it keeps polling
        assert watch.stop() == 0
    finally:
        watch.kill()
    notice = json.loads(path.read_text())
    assert notice["node"] == "worker-1" and notice["provider"] == "aws"
    assert notice["action"] == "terminate" and notice["deadline"] == deadline
    assert notice["deadline"] - 125 < notice["seen"] <= notice["deadline"]
    assert sorted(p.name for p in notices.iterdir()) == ["worker-1.json"]  # no temporary left
    # IMDSv2: a token first, then every GET carries it.
    puts = [r for r in state.requests if r[0] == "PUT"]
    assert len(puts) == 1 and puts[0][2]["x-aws-ec2-metadata-token-ttl-seconds"]
    assert all(r[2].get("x-aws-ec2-metadata-token") == TOKEN for r in gets())
    lines = watch.text().splitlines()
    said = [line for line in lines if "preemption notice" in line]
    assert len(said) == 1, lines  # one line, however many polls saw it
    assert "node worker-1: aws terminate at" in said[0] and str(path) in said[0]
    assert lines[-1] == "spot_watch: stopped"


def test_metadata_errors_are_logged_once_per_kind_and_never_stop_it(
    tmp_path: Path, metadata: tuple[Metadata, str]
) -> None:
    state, url = metadata
    state.fail_with = 500
    watch = Watch(tmp_path, "--provider", "aws", "--endpoint", url, "--notice-dir",
                  str(tmp_path / "n"), "--interval", "0.05")  # fmt: skip
    try:
        watch.wait_for(lambda: len(state.requests) >= 8)
        state.fail_with = None
        state.instance_action = {"action": "stop", "time": "not a time"}
        asked = len(state.requests)
        watch.wait_for(lambda: len(state.requests) >= asked + 6)
        assert watch.stop() == 0
    finally:
        watch.kill()
    errors = [line for line in watch.text().splitlines() if "logged once" in line]
    assert sum("instance-action answered HTTP 500" in line for line in errors) == 1, errors
    assert sum("bad instance-action answer" in line for line in errors) == 1, errors
    assert not (tmp_path / "n").exists()


def test_an_unreachable_service_is_one_line(tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    watch = Watch(tmp_path, "--provider", "gcp", "--endpoint", f"http://127.0.0.1:{port}",
                  "--notice-dir", str(tmp_path / "n"), "--interval", "0.05")  # fmt: skip
    try:
        # The first failed poll is logged; 20 more polls (0.05 s apart) add no line.
        watch.wait_for(lambda: "logged once" in watch.text())
        time.sleep(1.0)
        assert watch.stop() == 0
    finally:
        watch.kill()
    errors = [line for line in watch.text().splitlines() if "logged once" in line]
    assert len(errors) == 1 and "metadata service unreachable" in errors[0]


def test_gcp_preempted_gives_30_seconds_from_the_first_true(
    tmp_path: Path, metadata: tuple[Metadata, str]
) -> None:
    state, url = metadata
    notices = tmp_path / "notices"
    watch = Watch(tmp_path, "--provider", "gcp", "--endpoint", url, "--notice-dir",
                  str(notices), "--interval", "0.05", "--node", "head")  # fmt: skip
    try:
        watch.wait_for(lambda: len(state.requests) >= 3)
        assert all(r[2].get("metadata-flavor") == "Google" for r in state.requests)
        assert not notices.exists()
        before = time.time()
        state.preempted = True
        watch.wait_for((notices / "head.json").exists)
        first = (notices / "head.json").read_text()
        asked = len(state.requests)
        watch.wait_for(lambda: len(state.requests) >= asked + 5)
        assert watch.stop() == 0
    finally:
        watch.kill()
    notice = json.loads(first)
    assert notice["provider"] == "gcp" and notice["action"] == "preempt"
    assert notice["deadline"] == pytest.approx(notice["seen"] + GCP_NOTICE_S)
    assert before <= notice["seen"] <= time.time()
    assert (notices / "head.json").read_text() == first  # later TRUEs keep the first deadline
    assert sum("preemption notice" in line for line in watch.text().splitlines()) == 1


def test_bad_arguments_are_usage_errors(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(DRIVER)}
    argv = [sys.executable, "-m", "rlinfra_node.spot_watch", "--provider", "azure"]
    done = subprocess.run([*argv, "--notice-dir", str(tmp_path)], env=env, capture_output=True)
    assert done.returncode == 2 and b"invalid choice: 'azure'" in done.stderr


# ------------------------------------------------------------------------------------------
# Pure parts.


def test_instance_action_time_is_the_deadline() -> None:
    assert parse_aws_action(b'{"action": "terminate", "time": "2026-12-05T12:00:00Z"}') == (
        "terminate",
        datetime(2026, 12, 5, 12, tzinfo=timezone.utc).timestamp(),
    )


def notice(node: str, deadline: float) -> Notice:
    return Notice(node=node, provider="aws", action="terminate", deadline=deadline, seen=0.0)


def test_the_soonest_notice_within_the_window_is_due() -> None:
    now = 1000.0
    gone, later, soon = notice("gone", 990), notice("later", now + 200), notice("soon", now + 50)
    assert due_notice([gone, later, soon], window_s=100, now=now) == soon
    assert due_notice([gone, later], window_s=100, now=now) is None  # past, and too far
    assert due_notice([later], window_s=200, now=now) == later


def test_notices_are_read_back_and_other_files_skipped(tmp_path: Path) -> None:
    written = write_notice(tmp_path, notice("10.0.0.12", 5.0))
    assert written == notice_path(tmp_path, "10.0.0.12") == tmp_path / "10.0.0.12.json"
    assert notice_path(tmp_path, "../evil/x") == tmp_path / "_evil_x.json"
    (tmp_path / "junk.json").write_text("{not json")
    (tmp_path / "other.json").write_text('{"node": "x"}')
    assert read_notices(tmp_path) == [notice("10.0.0.12", 5.0)]
    assert read_notices(tmp_path / "missing") == []


def test_the_trainer_patch_finds_a_due_notice_in_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the patched should_save_ckpt_esi asks (Verl itself runs in tests/verl)."""
    from rlinfra_node.verl_cpu.patches import notice_forcing_save

    monkeypatch.delenv("RLINFRA_NOTICE_DIR", raising=False)
    assert notice_forcing_save(10, 60, 0) is None  # no folder: Verl's own answer only
    monkeypatch.setenv("RLINFRA_NOTICE_DIR", str(tmp_path / "notices"))
    assert notice_forcing_save(10, 60, 0) is None  # no notice yet
    due = notice("worker-1", time.time() + 100)
    write_notice(tmp_path / "notices", due)
    assert notice_forcing_save(10, 60, 0) is None  # 100 s left: one more step fits
    assert notice_forcing_save(10, 60, 40) == due  # within save + step + margin


def test_status_probe_reports_the_notices_the_watcher_wrote(tmp_path: Path) -> None:
    """rlinfra_node.progress, run as `status` runs it on the head (its source on standard input,
    isolated), lists the watcher's notices soonest first and leaves out an earlier run's."""
    from rlinfra.ops.recovery import describe_notice
    from rlinfra_node import progress

    now = time.time()
    folder = tmp_path / "notices"
    write_notice(folder, notice("worker-2", now + 300))
    write_notice(folder, notice("worker-1", now + 90))
    write_notice(folder, notice("old-node", now - 2 * progress.NOTICE_KEPT_S))
    (folder / "junk.json").write_text("{not json")
    probe = Path(progress.__file__).read_bytes()
    done = subprocess.run(
        [sys.executable, "-I", "-", "", "0", str(folder)],
        input=probe,
        capture_output=True,
        check=True,
        timeout=30,
    )
    found = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert [n["node"] for n in found["notices"]] == ["worker-1", "worker-2"]
    assert found["notices"][0]["action"] == "terminate"
    assert found["notices"][0]["deadline"] == pytest.approx(now + 90)
    line = describe_notice(found["notices"][0], now)
    assert line == "node worker-1: preemption notice (terminate), goes in 90 s"
    assert describe_notice(found["notices"][1], now + 400).endswith("went 100 s ago")
    # Without a folder (an on-demand profile) there are none.
    bare = subprocess.run(
        [sys.executable, "-I", "-", "", "0"],
        input=probe,
        capture_output=True,
        check=True,
        timeout=30,
    )
    assert json.loads(bare.stdout.decode())["notices"] == []
