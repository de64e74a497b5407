"""Serve the trained model on the head node, supervised by Ray and health-checked.

    python -m rlinfra_node.model_server deploy --engine vllm|standin --model DIR --port 9090
        [--host 127.0.0.1] [--timeout-s 900] [-- EXTRA SERVER ARGS]
    python -m rlinfra_node.model_server status | stop
    python -m rlinfra_node.model_server serve-standin --model DIR --port P [--host H]

``deploy`` (the last step of a training job) starts a detached Ray actor, ``rlinfra-model-server``
in namespace ``rlinfra``, pinned to the node it runs on. The actor runs the server as a child
process and keeps it alive: a server that exits is started again (with a growing pause, at most
30 s), and one that fails its health check (GET /health) three times in a row is killed and
started again. The actor itself is restarted by Ray if its process dies (max_restarts=-1), and
it starts the server anew; the server gets SIGTERM when its actor goes (PR_SET_PDEATHSIG). A
second ``deploy`` restarts the server so it loads the newly merged model. ``deploy`` returns once
the server answers its health check, or fails after ``--timeout-s``.

Engines: ``vllm`` runs ``vllm serve DIR --host H --port P`` (OpenAI-compatible; needs a GPU).
``standin`` runs ``serve-standin``: a small CPU server for clusters without GPUs that loads the
stand-in merger's ``model.pt`` and answers /health, /v1/models and /v1/completions in the
OpenAI response shape. It stands in for vLLM; it is not a language model.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ACTOR = "rlinfra-model-server"
NAMESPACE = "rlinfra"
# The server's log (the supervisor appends to LOG_DIR/server.log).
LOG_DIR = Path(os.environ.get("RLINFRA_SERVING_LOG_DIR", "/opt/rlinfra/serving"))
HEALTH_FAILURES = 3
HEALTH_PERIOD_S = 5.0
# Health checks a starting server may fail (vLLM loads the model first): 10 minutes.
STARTUP_CHECKS = 120
MAX_BACKOFF_S = 30.0


@dataclass(frozen=True)
class ServerConfig:
    engine: str
    model: str
    host: str
    port: int
    extra_args: tuple[str, ...] = field(default=())

    def argv(self, python: str = sys.executable) -> list[str]:
        if self.engine == "vllm":
            vllm = str(Path(python).parent / "vllm")
            host = ["--host", self.host, "--port", str(self.port)]
            return [vllm, "serve", self.model, *host, *self.extra_args]
        return [
            python,
            "-m",
            "rlinfra_node.model_server",
            "serve-standin",
            "--model",
            self.model,
            "--host",
            self.host,
            "--port",
            str(self.port),
            *self.extra_args,
        ]

    @property
    def health_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"http://{host}:{self.port}/health"


def healthy(url: str, timeout: float = 3.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    import ctypes

    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Supervisor:
    """Runs one server process and keeps it running (the body of the detached Ray actor)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = ServerConfig(**{**config, "extra_args": tuple(config.get("extra_args", ()))})
        self.restarts = 0
        self.last_exit: int | None = None
        self.failures = 0
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        self.stopping = False
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        self._start()
        threading.Thread(target=self._watch, daemon=True).start()

    def _start(self) -> None:
        log = open(LOG_DIR / "server.log", "ab")  # noqa: SIM115 - the child owns it
        self.proc = subprocess.Popen(
            self.config.argv(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )
        log.close()
        self.failures = 0
        self.answered = False
        print(
            f"model_server: started pid {self.proc.pid}: {' '.join(self.config.argv())}", flush=True
        )

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def _watch(self) -> None:
        backoff = 1.0
        checked = time.monotonic()
        while not self.stopping:
            time.sleep(1.0)
            with self.lock:
                if self.stopping:
                    return
                if self.proc is None:
                    continue
                code = self.proc.poll()
                if code is not None:
                    self.last_exit = code
                    print(
                        f"model_server: pid {self.proc.pid} exited ({code}); restarting", flush=True
                    )
                    time.sleep(backoff)
                    backoff = min(backoff * 2, MAX_BACKOFF_S)
                    self.restarts += 1
                    self._start()
                    continue
                if time.monotonic() - checked < HEALTH_PERIOD_S:
                    continue
                checked = time.monotonic()
                if healthy(self.config.health_url):
                    self.answered = True
                    self.failures = 0
                    backoff = 1.0
                    continue
                self.failures += 1
                # A server still loading its model has not answered yet; one that answered and
                # then stops answering is hung.
                limit = HEALTH_FAILURES if self.answered else STARTUP_CHECKS
                if self.failures >= limit:
                    print(
                        f"model_server: {self.failures} failed health checks; restarting",
                        flush=True,
                    )
                    self._kill()
                    self.restarts += 1
                    self._start()

    def restart(self) -> int:
        with self.lock:
            self._kill()
            self.restarts += 1
            self._start()
            assert self.proc is not None
            return self.proc.pid

    def status(self) -> dict[str, Any]:
        proc = self.proc
        return {
            "config": asdict(self.config),
            "pid": proc.pid if proc else None,
            "running": bool(proc and proc.poll() is None),
            "healthy": healthy(self.config.health_url),
            "restarts": self.restarts,
            "last_exit": self.last_exit,
        }

    def shutdown(self) -> None:
        with self.lock:
            self.stopping = True
            self._kill()


def _actor(create: dict[str, Any] | None = None) -> Any:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    try:
        return ray.get_actor(ACTOR, namespace=NAMESPACE)
    except ValueError:
        if create is None:
            return None
    remote = ray.remote(Supervisor).options(
        name=ACTOR,
        namespace=NAMESPACE,
        lifetime="detached",
        max_restarts=-1,
        max_task_retries=-1,
        num_cpus=0,
        max_concurrency=4,
        scheduling_strategy=NodeAffinitySchedulingStrategy(
            ray.get_runtime_context().get_node_id(), soft=False
        ),
    )
    return remote.remote(create)


def deploy(config: ServerConfig, timeout_s: float) -> int:
    import ray

    ray.init(address="auto", namespace=NAMESPACE, log_to_driver=False)
    actor = _actor()
    wanted = asdict(config)
    if actor is not None:
        current = ray.get(actor.status.remote(), timeout=60)
        if current["config"] == {**wanted, "extra_args": list(config.extra_args)}:
            pid = ray.get(actor.restart.remote(), timeout=120)
            print(f"model_server: restarted the server (pid {pid}) to load {config.model}")
        else:
            ray.get(actor.shutdown.remote(), timeout=120)
            ray.kill(actor, no_restart=True)
            time.sleep(1)
            actor = None
    if actor is None:
        actor = _actor(create=wanted)
        print(f"model_server: started the supervisor for {config.engine} on port {config.port}")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = ray.get(actor.status.remote(), timeout=60)
        if status["healthy"]:
            print(f"model_server: healthy at {config.health_url} (pid {status['pid']})")
            return 0
        time.sleep(2)
    print(
        f"model_server: {config.health_url} did not answer within {timeout_s:.0f} s",
        file=sys.stderr,
    )
    return 1


def _status_or_stop(command: str) -> int:
    import ray

    ray.init(address="auto", namespace=NAMESPACE, log_to_driver=False)
    actor = _actor()
    if actor is None:
        print(json.dumps({"deployed": False}))
        return 0 if command == "stop" else 1
    if command == "stop":
        ray.get(actor.shutdown.remote(), timeout=120)
        ray.kill(actor, no_restart=True)
        print(json.dumps({"deployed": False, "stopped": True}))
        return 0
    print(json.dumps({"deployed": True, **ray.get(actor.status.remote(), timeout=60)}))
    return 0


# ---------------------------------------------------------------- the CPU stand-in server


def standin_handler(model_dir: Path) -> type[BaseHTTPRequestHandler]:
    import torch

    state = torch.load(model_dir / "model.pt", weights_only=True)
    weight = state["weight"]
    meta = json.loads((model_dir / "config.json").read_text())
    model_id = str(model_dir)

    class Handler(BaseHTTPRequestHandler):
        def _send(self, code: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            if self.path == "/health":
                self._send(200, {"status": "ok"})
            elif self.path == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": model_id, "object": "model"}]})
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:
            if self.path != "/v1/completions":
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            try:
                length = int(self.headers.get("Content-Length", "0"))
                request = json.loads(self.rfile.read(length) or b"{}")
                prompt = str(request["prompt"])
            except (ValueError, KeyError, TypeError):
                self._send(400, {"error": {"message": "send JSON with a 'prompt'"}})
                return
            score = float(weight.abs().sum())
            text = f"stand-in model step {meta.get('step')}: |w|={score:.4f}, prompt of {len(prompt)} chars"
            self._send(
                200,
                {
                    "object": "text_completion",
                    "model": model_id,
                    "choices": [{"index": 0, "text": text, "finish_reason": "stop"}],
                },
            )

    return Handler


def serve_standin(model_dir: Path, host: str, port: int) -> int:
    server = ThreadingHTTPServer((host, port), standin_handler(model_dir))
    print(f"serve-standin: {model_dir} on {host}:{port}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    server.serve_forever()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in args_in:
        extra = args_in[args_in.index("--") + 1 :]
        args_in = args_in[: args_in.index("--")]
    parser = argparse.ArgumentParser(prog="model_server")
    sub = parser.add_subparsers(dest="command", required=True)
    dep = sub.add_parser("deploy")
    dep.add_argument("--engine", choices=["vllm", "standin"], required=True)
    dep.add_argument("--model", required=True)
    dep.add_argument("--host", default="127.0.0.1")
    dep.add_argument("--port", type=int, default=9090)
    dep.add_argument("--timeout-s", type=float, default=900.0)
    sub.add_parser("status")
    sub.add_parser("stop")
    std = sub.add_parser("serve-standin")
    std.add_argument("--model", type=Path, required=True)
    std.add_argument("--host", default="127.0.0.1")
    std.add_argument("--port", type=int, default=9090)
    args = parser.parse_args(args_in)
    if args.command == "deploy":
        config = ServerConfig(args.engine, args.model, args.host, args.port, tuple(extra))
        return deploy(config, args.timeout_s)
    if args.command == "serve-standin":
        return serve_standin(args.model, args.host, args.port)
    return _status_or_stop(args.command)


if __name__ == "__main__":
    sys.exit(main())
