"""The model server's supervisor and the CPU stand-in server, with real processes on loopback."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlinfra_node import model_server


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    import torch

    folder = tmp_path / "hf_model"
    folder.mkdir()
    torch.save({"weight": torch.ones(4)}, folder / "model.pt")
    (folder / "config.json").write_text(json.dumps({"step": 8}))
    return folder


@pytest.fixture
def supervisor(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[model_server.Supervisor]:
    monkeypatch.setattr(model_server, "LOG_DIR", tmp_path / "logs")
    config = {
        "engine": "standin",
        "model": str(model_dir),
        "host": "127.0.0.1",
        "port": free_port(),
    }
    sup = model_server.Supervisor(config)
    try:
        yield sup
    finally:
        sup.shutdown()


def wait_healthy(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if model_server.healthy(url):
            return
        time.sleep(0.3)
    raise AssertionError(f"{url} not healthy within {timeout} s")


def test_vllm_argv_is_the_reference_command() -> None:
    config = model_server.ServerConfig("vllm", "/checkpoints/hf_model", "0.0.0.0", 9090, ("--x",))
    assert config.argv("/opt/rlinfra/venv/bin/python") == [
        "/opt/rlinfra/venv/bin/vllm",
        "serve",
        "/checkpoints/hf_model",
        "--host",
        "0.0.0.0",
        "--port",
        "9090",
        "--x",
    ]
    assert config.health_url == "http://127.0.0.1:9090/health"


def test_standin_answers_in_openai_shape_and_rejects_bad_requests(
    supervisor: model_server.Supervisor,
) -> None:
    url = supervisor.config.health_url
    wait_healthy(url)
    base = url.removesuffix("/health")
    with urllib.request.urlopen(f"{base}/v1/models", timeout=10) as response:
        assert json.load(response)["data"][0]["id"] == supervisor.config.model
    request = urllib.request.Request(
        f"{base}/v1/completions",
        data=json.dumps({"prompt": "2+2="}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        body = json.load(response)
    assert body["object"] == "text_completion"
    assert body["choices"][0]["text"].startswith("stand-in model step 8")
    bad = urllib.request.Request(f"{base}/v1/completions", data=b"not json")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(bad, timeout=10)
    assert err.value.code == 400
    assert model_server.healthy(url)


def test_a_killed_server_is_started_again(supervisor: model_server.Supervisor) -> None:
    url = supervisor.config.health_url
    wait_healthy(url)
    first = supervisor.status()["pid"]
    os.kill(first, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = supervisor.status()
        if status["pid"] != first and status["healthy"]:
            break
        time.sleep(0.5)
    status = supervisor.status()
    assert status["pid"] != first and status["healthy"], status
    assert status["restarts"] == 1 and status["last_exit"] == -signal.SIGKILL
    log = (model_server.LOG_DIR / "server.log").read_text()
    assert log.count("serve-standin:") == 2


def test_restart_loads_the_model_again(supervisor: model_server.Supervisor) -> None:
    wait_healthy(supervisor.config.health_url)
    first = supervisor.status()["pid"]
    second = supervisor.restart()
    assert second != first
    wait_healthy(supervisor.config.health_url)
    assert supervisor.status()["restarts"] == 1
