"""The retrieval API replicated with Ray Serve, behind Serve's one HTTP endpoint on the head.

Serve does the replication: it routes each request to a replica, health-checks replicas
(``check_health``) and replaces one whose process died, and scales to ``num_replicas`` when the
config changes. This module gives Serve the application (``app_builder``, named by
``import_path`` in the config) and deploys a config through the dashboard's Serve REST API (what
``serve deploy`` does), only when the running one differs, then waits until the endpoint answers.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from rlinfra_node.retrieval.settings import Settings

APP_NAME = "retrieval"
DEPLOYMENT = "Retriever"
IMPORT_PATH = "rlinfra_node.retrieval.serve_app:app_builder"
SERVE_API = "/api/serve/applications/"
PROBE_QUERY = "health check"


def app_builder(args: dict[str, Any]) -> Any:
    """Serve's application builder: ``args = {"settings": {...}}`` (Settings as a dict)."""
    from ray import serve

    from rlinfra_node.retrieval import api

    settings = Settings.from_dict(dict(args["settings"]))
    app = api.create_app(api.process_retriever)

    @serve.deployment(name=DEPLOYMENT)
    @serve.ingress(app)
    class RetrievalReplica:
        """One replica: the corpus, the index and the encoder, loaded at start."""

        def __init__(self, settings_dict: dict[str, Any]) -> None:
            # Builds the index under the build lock when the data folder has none yet (the
            # first replica builds, the others wait); normally `build` ran before the deploy.
            api.set_process_retriever(api.Retriever(Settings.from_dict(settings_dict)))

        def check_health(self) -> None:
            retriever = api.process_retriever()
            if retriever is None:
                raise RuntimeError("the retriever is not loaded")
            if retriever.index.ntotal != retriever.passages:
                raise RuntimeError("the index and the corpus disagree")

    return RetrievalReplica.bind(settings.to_dict())  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Deployment:
    """How the service is replicated and where Serve listens."""

    replicas: int = 3
    host: str = "127.0.0.1"
    port: int = 8000
    num_cpus: float = 1.0
    max_ongoing_requests: int = 16
    max_replicas_per_node: int | None = None
    health_check_period_s: float = 5.0
    health_check_timeout_s: float = 30.0
    graceful_shutdown_timeout_s: float = 5.0


def serve_config(settings: Settings, deployment: Deployment) -> dict[str, Any]:
    """A Serve config (the schema ``serve deploy`` takes) for one retrieval application."""
    options: dict[str, Any] = {
        "name": DEPLOYMENT,
        "num_replicas": deployment.replicas,
        "max_ongoing_requests": deployment.max_ongoing_requests,
        "health_check_period_s": deployment.health_check_period_s,
        "health_check_timeout_s": deployment.health_check_timeout_s,
        "graceful_shutdown_timeout_s": deployment.graceful_shutdown_timeout_s,
        "ray_actor_options": {"num_cpus": deployment.num_cpus},
    }
    if deployment.max_replicas_per_node is not None:
        options["max_replicas_per_node"] = deployment.max_replicas_per_node
    return {
        "proxy_location": "HeadOnly",
        "http_options": {"host": deployment.host, "port": deployment.port},
        "applications": [
            {
                "name": APP_NAME,
                "route_prefix": "/",
                "import_path": IMPORT_PATH,
                "args": {"settings": settings.to_dict()},
                "deployments": [options],
            }
        ],
    }


# ---------------------------------------------------------------- the dashboard's Serve API


def ray_token() -> str | None:
    """The cluster's Ray token, found as Ray finds it: RAY_AUTH_TOKEN, the file that
    RAY_AUTH_TOKEN_PATH names, or ~/.ray/auth_token. The dashboard asks for it when token
    authentication is on."""
    token = os.environ.get("RAY_AUTH_TOKEN", "").strip()
    if token:
        return token
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or os.path.expanduser("~/.ray/auth_token")
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip() or None
    except OSError:
        return None


def _http(method: str, url: str, body: Any = None, timeout: float = 30.0) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    token = ray_token()
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read()
            status = response.status
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        status = exc.code
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw.decode(errors="replace")


def serve_details(address: str) -> dict[str, Any]:
    """What Serve runs now (``serve status`` in JSON); ``{}`` when Serve is not started."""
    status, body = _http("GET", address.rstrip("/") + SERVE_API)
    if status != 200 or not isinstance(body, dict):
        raise RuntimeError(f"the Serve API at {address} answered {status}: {str(body)[:300]}")
    return body


def _covers(wanted: Any, have: Any) -> bool:
    """Whether ``have`` has every value ``wanted`` sets (lists of named dicts match by name)."""
    if isinstance(wanted, dict):
        return isinstance(have, dict) and all(
            key in have and _covers(value, have[key]) for key, value in wanted.items()
        )
    if isinstance(wanted, list) and wanted and all(isinstance(w, dict) for w in wanted):
        if not isinstance(have, list) or len(have) != len(wanted):
            return False
        by_name = {item.get("name"): item for item in have if isinstance(item, dict)}
        return all(_covers(item, by_name.get(item.get("name"))) for item in wanted)
    if isinstance(wanted, float | int) and isinstance(have, float | int):
        return float(wanted) == float(have)
    return bool(wanted == have)


def running_matches(details: dict[str, Any], config: dict[str, Any]) -> bool:
    """Whether Serve already runs ``config`` (the same app settings and options)."""
    app = (details.get("applications") or {}).get(APP_NAME)
    if not app or app.get("status") in {"DEPLOY_FAILED", "DELETING", None}:
        return False
    if not _covers(config["http_options"], details.get("http_options") or {}):
        return False
    return _covers(config["applications"][0], app.get("deployed_app_config") or {})


def http_options_differ(details: dict[str, Any], config: dict[str, Any]) -> bool:
    """Serve cannot move its HTTP proxy while it runs: a new host or port needs a restart."""
    current = details.get("http_options") or {}
    if not details.get("applications") and not details.get("controller_info"):
        return False
    return bool(current) and not _covers(config["http_options"], current)


def replicas(details: dict[str, Any]) -> list[dict[str, Any]]:
    app = (details.get("applications") or {}).get(APP_NAME) or {}
    deployment = (app.get("deployments") or {}).get(DEPLOYMENT) or {}
    return list(deployment.get("replicas") or [])


def deploy(
    address: str, config: dict[str, Any], timeout_s: float = 900.0, poll_s: float = 2.0
) -> dict[str, Any]:
    """Deploy ``config`` unless Serve already runs it; wait until it serves. Returns a report."""
    details = serve_details(address)
    changed = False
    if not running_matches(details, config):
        if http_options_differ(details, config):
            _log("the HTTP host or port changed: shutting Serve down to move its proxy")
            status, body = _http("DELETE", address.rstrip("/") + SERVE_API, timeout=120)
            if status not in (200, 204):
                raise RuntimeError(f"shutting Serve down failed ({status}): {body}")
            _wait_shutdown(address, timeout_s)
        status, body = _http("PUT", address.rstrip("/") + SERVE_API, config, timeout=120)
        if status != 200:
            raise RuntimeError(f"the Serve API refused the config ({status}): {str(body)[:500]}")
        changed = True
    wanted = config["applications"][0]["deployments"][0]["num_replicas"]
    details = wait_running(address, wanted, timeout_s, poll_s)
    port = config["http_options"]["port"]
    probe = wait_endpoint(f"http://127.0.0.1:{port}", timeout_s=min(timeout_s, 300.0))
    running = [r for r in replicas(details) if r.get("state") == "RUNNING"]
    return {
        "changed": changed,
        "replicas": len(running),
        "nodes": sorted({str(r.get("node_ip")) for r in running}),
        "endpoint": f"http://{config['http_options']['host']}:{port}",
        "probe": probe,
    }


def _wait_shutdown(address: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        details = serve_details(address)
        if not details.get("applications") and not details.get("controller_info", {}).get(
            "actor_id"
        ):
            return
        time.sleep(1.0)
    raise RuntimeError("Serve did not shut down")


def wait_running(
    address: str, wanted: int, timeout_s: float, poll_s: float = 2.0
) -> dict[str, Any]:
    """Wait until the app is RUNNING with exactly ``wanted`` RUNNING replicas."""
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        details = serve_details(address)
        app = (details.get("applications") or {}).get(APP_NAME) or {}
        states = [r.get("state") for r in replicas(details)]
        running = states.count("RUNNING")
        last = f"app {app.get('status')}, replicas {states}: {app.get('message') or ''}".strip()
        if app.get("status") == "DEPLOY_FAILED":
            raise RuntimeError(f"the retrieval app failed to deploy: {app.get('message')}")
        if app.get("status") == "RUNNING" and running == wanted and len(states) == wanted:
            return details
        time.sleep(poll_s)
    raise RuntimeError(f"the retrieval app was not ready after {timeout_s:.0f} s ({last[:800]})")


def wait_endpoint(base_url: str, timeout_s: float = 300.0) -> dict[str, Any]:
    """Wait until ``GET /healthz`` is 200 and a probe ``POST /retrieve`` returns results."""
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            status, _ = _http("GET", base_url + "/healthz", timeout=10)
            if status == 200:
                body = {"queries": [PROBE_QUERY], "topk": 1, "return_scores": True}
                status, answer = _http("POST", base_url + "/retrieve", body, timeout=30)
                if status == 200 and isinstance(answer, dict) and answer.get("result"):
                    return {"status": status, "hits": len(answer["result"][0])}
            last = f"HTTP {status}"
        except OSError as exc:
            last = str(exc)
        time.sleep(1.0)
    raise RuntimeError(f"{base_url} did not answer /healthz and /retrieve ({last})")


def _log(message: str) -> None:
    import sys

    print(f"[retrieval] {message}", file=sys.stderr, flush=True)
