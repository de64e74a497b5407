"""The retrieval service on Ray Serve: Serve keeps the replicas; the requests go around it.

Two routers (``Deployment.router``):

``front`` (the default). Serve runs two applications and no HTTP proxy of its own
(``proxy_location: Disabled``):

- ``retrieval``: the ``Retriever`` deployment, ``num_replicas`` replicas spread over the nodes.
  Each loads the corpus, the index and the encoder, serves the API on a free port of its node's
  address (``server``: a light HTTP server, concurrent queries encoded in batches, a bounded
  queue that answers 503 when full), and registers that address with the front every
  ``front.REGISTER_PERIOD_S`` through a Serve handle. When Serve stops it (scale down, a new
  config), it leaves the front first, then finishes what it holds (``DRAIN_S``).
- ``retrieval-front``: the ``Front`` deployment, one replica on the head (``HEAD_RESOURCE``, no
  CPU), serving the endpoint (``host:port``, 8000 by default) and forwarding each request to the
  least busy replica that registered (``front``), around one that died.

Serve still does what it is good at: placing replicas over the nodes, health checks
(``check_health`` also checks the HTTP server and the batch worker), replacing a replica whose
process died (the new one registers itself), scaling and rolling updates from the config,
``serve status``. What it no longer does is carry the requests: its proxy hop (proxy actor,
router, an actor call per request) cost about 9 ms a request here, more than a search, and its
per-replica ``max_ongoing_requests`` queue collapsed one replica at 32 clients.

``serve-proxy`` (the previous path, kept for comparison and as a fallback): one application whose
replicas run the FastAPI app (``api.create_app``) behind Serve's HTTP proxy on the head, one
search at a time per replica, ``max_ongoing_requests`` per replica.

This module gives Serve the applications (``app_builder``, ``front_builder``, named by
``import_path`` in the config) and deploys a config through the dashboard's Serve REST API (what
``serve deploy`` does), only when the running one differs, then waits until the endpoint answers
(with the front, until it routes to every replica). Switching routers restarts Serve: a running
Serve cannot move or drop its proxy.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from rlinfra_node.retrieval.settings import Settings

APP_NAME = "retrieval"
DEPLOYMENT = "Retriever"
FRONT_APP = "retrieval-front"
FRONT_DEPLOYMENT = "Front"
IMPORT_PATH = "rlinfra_node.retrieval.serve_app:app_builder"
FRONT_IMPORT_PATH = "rlinfra_node.retrieval.serve_app:front_builder"
SERVE_API = "/api/serve/applications/"
PROBE_QUERY = "health check"
ROUTERS = ("front", "serve-proxy")
# A resource only the head node has (Ray adds it): pins the front to the head.
HEAD_RESOURCE = "node:__internal_head__"
# Seconds a stopping replica (or front) gives the requests it holds. Leaving the front takes up
# to 3 s more; together they stay within Serve's graceful_shutdown_timeout_s (5 s), after which
# Serve kills the replica.
DRAIN_S = 2.0


def app_builder(args: dict[str, Any]) -> Any:
    """Serve's application builder: ``args = {"settings": {...}, "router": ...}``, and
    ``"allow"`` (the front's allow list, which each replica applies too: only the front asks
    them, from the head, but the nodes' network may let others reach their ports)."""
    settings = Settings.from_dict(dict(args["settings"]))
    # Configs deployed before the front existed name no router: they ran Serve's proxy.
    router = args.get("router", "serve-proxy")
    if router == "serve-proxy":
        return _proxied_replica(settings)
    if router == "front":
        allow = args.get("allow")
        return _direct_replica(settings, None if allow is None else [str(c) for c in allow])
    raise ValueError(f"unknown router {router!r}; known: {', '.join(ROUTERS)}")


def _proxied_replica(settings: Settings) -> Any:
    from ray import serve

    from rlinfra_node.retrieval import api

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


def _direct_replica(settings: Settings, allow: list[str] | None = None) -> Any:
    from ray import serve

    @serve.deployment(name=DEPLOYMENT)
    class RetrievalReplica:
        """One replica serving HTTP itself on its node, registered with the front."""

        def __init__(self, settings_dict: dict[str, Any], allow: list[str] | None) -> None:
            import ray

            from rlinfra_node.retrieval import api
            from rlinfra_node.retrieval.server import ProcessServer

            self.retriever = api.Retriever(Settings.from_dict(settings_dict))
            node_ip = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
            self.server = ProcessServer(
                self.retriever, node_ip, 0, allow=None if allow is None else tuple(allow)
            )
            replica_id = serve.get_replica_context().replica_id.unique_id
            self.registration = Registration(replica_id, self.server.url)

        def check_health(self) -> None:
            if self.retriever.index.ntotal != self.retriever.passages:
                raise RuntimeError("the index and the corpus disagree")
            if not self.server.healthy:
                raise RuntimeError(f"the replica's HTTP server at {self.server.url} is down")

        async def __del__(self) -> None:
            await asyncio.to_thread(self.registration.stop)
            await self.server.close_async(DRAIN_S)

    return RetrievalReplica.bind(settings.to_dict(), allow)  # type: ignore[attr-defined]


class Registration:
    """Tells the front, every ``REGISTER_PERIOD_S``, that ``replica_id`` serves at ``url``;
    ``stop`` ends that and tells the front it left. Runs on a thread of its own."""

    def __init__(self, replica_id: str, url: str) -> None:
        from rlinfra_node.retrieval.front import REGISTER_PERIOD_S

        self.replica_id = replica_id
        self.url = url
        self.period_s = REGISTER_PERIOD_S
        self._handle: Any = None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="retrieval-register", daemon=True)
        self._thread.start()

    def _front(self) -> Any:
        from ray import serve

        if self._handle is None:
            self._handle = serve.get_app_handle(FRONT_APP)
        return self._handle

    def _run(self) -> None:
        failing = False
        while not self._stopped.is_set():
            try:
                self._front().register.remote(self.replica_id, self.url).result(timeout_s=10)
                if failing:
                    _log(f"replica {self.replica_id}: registered with the front at last")
                failing = False
            except Exception as exc:  # the front may not be up yet: keep trying
                self._handle = None
                if not failing:
                    _log(f"replica {self.replica_id}: cannot register with the front yet ({exc})")
                failing = True
            self._stopped.wait(self.period_s)

    def stop(self) -> None:
        """Stop registering and leave the front (at most about 3 s: Serve's shutdown budget)."""
        self._stopped.set()
        self._thread.join(timeout=1.0)
        try:
            self._front().deregister.remote(self.replica_id).result(timeout_s=2.0)
        except Exception as exc:  # the front forgets a silent replica anyway
            _log(f"replica {self.replica_id}: could not leave the front, stopping too? ({exc})")


def front_builder(args: dict[str, Any]) -> Any:
    """Serve's builder of the front: ``args = {"host": ..., "port": ..., "max_body": ...}``, and
    ``"allow"`` (CIDRs) when only those networks (and loopback) may ask."""
    from ray import serve

    @serve.deployment(name=FRONT_DEPLOYMENT)
    class FrontReplica:
        """The endpoint on the head; replicas register with it."""

        def __init__(
            self, host: str, port: int, max_body: int, allow: list[str] | None = None
        ) -> None:
            from rlinfra_node.retrieval.front import FrontServer

            self.front = FrontServer(
                host, port, max_body, allow=None if allow is None else tuple(allow)
            )

        async def register(self, replica_id: str, url: str) -> None:
            self.front.register(replica_id, url)

        async def deregister(self, replica_id: str) -> None:
            self.front.deregister(replica_id)

        def check_health(self) -> None:
            if not self.front.healthy:
                raise RuntimeError("the front's HTTP server is down")

        async def __del__(self) -> None:
            await self.front.close_async(DRAIN_S)

    allow = args.get("allow")
    return FrontReplica.bind(  # type: ignore[attr-defined]
        str(args["host"]),
        int(args["port"]),
        int(args["max_body"]),
        None if allow is None else [str(cidr) for cidr in allow],
    )


@dataclass(frozen=True)
class Deployment:
    """How the service is replicated and where its endpoint listens."""

    replicas: int = 3
    host: str = "127.0.0.1"
    port: int = 8000
    num_cpus: float = 1.0
    router: str = "front"
    # Only the serve-proxy router uses it: requests Serve lets one replica hold.
    max_ongoing_requests: int = 16
    max_replicas_per_node: int | None = None
    # Front router only: the networks that may ask, besides loopback (empty: whoever reaches
    # the endpoint's address).
    allow: tuple[str, ...] = ()
    health_check_period_s: float = 5.0
    health_check_timeout_s: float = 30.0
    graceful_shutdown_timeout_s: float = 5.0

    def __post_init__(self) -> None:
        if self.router not in ROUTERS:
            raise ValueError(f"unknown router {self.router!r}; known: {', '.join(ROUTERS)}")
        if self.allow and self.router != "front":
            raise ValueError(
                "retrieval deployment: allow needs the front router (Serve's proxy has no "
                "allow list)"
            )
        from rlinfra_node.retrieval.wire import networks

        try:
            networks(self.allow)
        except ValueError as exc:
            raise ValueError(f"retrieval deployment: allow: {exc}") from None


def serve_config(settings: Settings, deployment: Deployment) -> dict[str, Any]:
    """A Serve config (the schema ``serve deploy`` takes) for the retrieval service."""
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
    args: dict[str, Any] = {"settings": settings.to_dict(), "router": deployment.router}
    if deployment.allow:
        args["allow"] = list(deployment.allow)
    if deployment.router == "serve-proxy":
        return {
            "proxy_location": "HeadOnly",
            "http_options": {"host": deployment.host, "port": deployment.port},
            "applications": [
                {
                    "name": APP_NAME,
                    "route_prefix": "/",
                    "import_path": IMPORT_PATH,
                    "args": args,
                    "deployments": [options],
                }
            ],
        }
    from rlinfra_node.retrieval.api import max_body_bytes

    front = {
        "name": FRONT_DEPLOYMENT,
        "num_replicas": 1,
        "health_check_period_s": deployment.health_check_period_s,
        "health_check_timeout_s": deployment.health_check_timeout_s,
        "graceful_shutdown_timeout_s": deployment.graceful_shutdown_timeout_s,
        "ray_actor_options": {"num_cpus": 0, "resources": {HEAD_RESOURCE: 0.01}},
    }
    return {
        "proxy_location": "Disabled",
        "applications": [
            {
                "name": APP_NAME,
                "route_prefix": None,
                "import_path": IMPORT_PATH,
                "args": args,
                "deployments": [options],
            },
            {
                "name": FRONT_APP,
                "route_prefix": None,
                "import_path": FRONT_IMPORT_PATH,
                "args": {
                    "host": deployment.host,
                    "port": deployment.port,
                    "max_body": max_body_bytes(settings),
                    # Only when set, so a config without one stays as it was.
                    **({"allow": list(deployment.allow)} if deployment.allow else {}),
                },
                "deployments": [front],
            },
        ],
    }


def endpoint(config: dict[str, Any]) -> tuple[str, int]:
    """Where ``config`` serves the API: the front's address, or Serve's proxy's."""
    for app in config["applications"]:
        if app["name"] == FRONT_APP:
            return str(app["args"]["host"]), int(app["args"]["port"])
    return str(config["http_options"]["host"]), int(config["http_options"]["port"])


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


def _http(
    method: str, url: str, body: Any = None, timeout: float = 30.0, ray_api: bool = True
) -> tuple[int, Any, dict[str, str]]:
    """(status, JSON body, lower-cased headers). ``ray_api``: a dashboard call, which carries
    the Ray token (never sent to the retrieval endpoint)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    token = ray_token() if ray_api else None
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read()
            status = response.status
            headers = {k.lower(): v for k, v in response.headers.items()}
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        status = exc.code
        headers = {k.lower(): v for k, v in exc.headers.items()}
    try:
        return status, json.loads(raw) if raw else None, headers
    except ValueError:
        return status, raw.decode(errors="replace"), headers


def serve_details(address: str) -> dict[str, Any]:
    """What Serve runs now (``serve status`` in JSON); ``{}`` when Serve is not started."""
    status, body, _ = _http("GET", address.rstrip("/") + SERVE_API)
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
    """Whether Serve already runs ``config`` (the same router, apps, settings and options)."""
    if details.get("proxy_location") not in (None, config["proxy_location"]):
        return False
    if "http_options" in config and not _covers(
        config["http_options"], details.get("http_options") or {}
    ):
        return False
    running = details.get("applications") or {}
    if set(running) != {app["name"] for app in config["applications"]}:
        return False
    for wanted in config["applications"]:
        app = running[wanted["name"]]
        if not app or app.get("status") in {"DEPLOY_FAILED", "DELETING", None}:
            return False
        if not _covers(wanted, app.get("deployed_app_config") or {}):
            return False
    return True


def _serve_running(details: dict[str, Any]) -> bool:
    return bool(
        details.get("applications") or (details.get("controller_info") or {}).get("actor_id")
    )


def http_options_differ(details: dict[str, Any], config: dict[str, Any]) -> bool:
    """Serve cannot move its HTTP proxy while it runs: a new host or port needs a restart."""
    current = details.get("http_options") or {}
    if not details.get("applications") and not details.get("controller_info"):
        return False
    return bool(current) and not _covers(config.get("http_options") or {}, current)


def needs_restart(details: dict[str, Any], config: dict[str, Any]) -> bool:
    """Whether Serve must stop before ``config`` can run: a running Serve keeps the proxy it
    started with (``proxy_location``, and with a proxy, its host and port)."""
    if not _serve_running(details):
        return False
    if details.get("proxy_location") not in (None, config["proxy_location"]):
        return True
    return "http_options" in config and http_options_differ(details, config)


def replicas(details: dict[str, Any], app_name: str = APP_NAME) -> list[dict[str, Any]]:
    app = (details.get("applications") or {}).get(app_name) or {}
    name = FRONT_DEPLOYMENT if app_name == FRONT_APP else DEPLOYMENT
    deployment = (app.get("deployments") or {}).get(name) or {}
    return list(deployment.get("replicas") or [])


def router_of(details: dict[str, Any]) -> str | None:
    """The router the running retrieval app was deployed with (None: not deployed)."""
    app = (details.get("applications") or {}).get(APP_NAME)
    if not app:
        return None
    args = (app.get("deployed_app_config") or {}).get("args") or {}
    return str(args.get("router", "serve-proxy"))


def deploy(
    address: str, config: dict[str, Any], timeout_s: float = 900.0, poll_s: float = 2.0
) -> dict[str, Any]:
    """Deploy ``config`` unless Serve already runs it; wait until it serves. Returns a report."""
    details = serve_details(address)
    changed = False
    if not running_matches(details, config):
        if needs_restart(details, config):
            _log("the proxy's place, host or port changed: shutting Serve down to move it")
            status, body, _ = _http("DELETE", address.rstrip("/") + SERVE_API, timeout=120)
            if status not in (200, 204):
                raise RuntimeError(f"shutting Serve down failed ({status}): {body}")
            _wait_shutdown(address, timeout_s)
        status, body, _ = _http("PUT", address.rstrip("/") + SERVE_API, config, timeout=120)
        if status != 200:
            raise RuntimeError(f"the Serve API refused the config ({status}): {str(body)[:500]}")
        changed = True
    wanted = config["applications"][0]["deployments"][0]["num_replicas"]
    apps = [app["name"] for app in config["applications"]]
    details = wait_running(address, wanted, timeout_s, poll_s, apps)
    host, port = endpoint(config)
    front = FRONT_APP in apps
    probe = wait_endpoint(
        f"http://127.0.0.1:{port}",
        timeout_s=min(timeout_s, 300.0),
        replicas=wanted if front else None,
    )
    running = [r for r in replicas(details) if r.get("state") == "RUNNING"]
    return {
        "changed": changed,
        "router": "front" if front else "serve-proxy",
        "replicas": len(running),
        "nodes": sorted({str(r.get("node_ip")) for r in running}),
        "endpoint": f"http://{host}:{port}",
        "probe": probe,
    }


def _wait_shutdown(address: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _serve_running(serve_details(address)):
            return
        time.sleep(1.0)
    raise RuntimeError("Serve did not shut down")


def wait_running(
    address: str,
    wanted: int,
    timeout_s: float,
    poll_s: float = 2.0,
    apps: list[str] | tuple[str, ...] = (APP_NAME,),
) -> dict[str, Any]:
    """Wait until every app in ``apps`` is RUNNING and the retrieval app has exactly ``wanted``
    RUNNING replicas (none starting or stopping)."""
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        details = serve_details(address)
        running = details.get("applications") or {}
        for name in apps:
            if (running.get(name) or {}).get("status") == "DEPLOY_FAILED":
                message = running[name].get("message")
                raise RuntimeError(f"the Serve app {name!r} failed to deploy: {message}")
        states = [r.get("state") for r in replicas(details)]
        app = running.get(APP_NAME) or {}
        last = f"app {app.get('status')}, replicas {states}: {app.get('message') or ''}".strip()
        ready = all((running.get(name) or {}).get("status") == "RUNNING" for name in apps)
        if ready and states.count("RUNNING") == wanted and len(states) == wanted:
            return details
        time.sleep(poll_s)
    raise RuntimeError(f"the retrieval app was not ready after {timeout_s:.0f} s ({last[:800]})")


def wait_endpoint(
    base_url: str, timeout_s: float = 300.0, replicas: int | None = None
) -> dict[str, Any]:
    """Wait until ``GET /healthz`` is 200 (from the front: routing to exactly ``replicas``
    replicas) and a probe ``POST /retrieve`` returns results."""
    from rlinfra_node.retrieval.front import REPLICAS_HEADER

    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            status, _, headers = _http("GET", base_url + "/healthz", timeout=10, ray_api=False)
            routed = headers.get(REPLICAS_HEADER)
            if status == 200 and (replicas is None or routed == str(replicas)):
                body = {"queries": [PROBE_QUERY], "topk": 1, "return_scores": True}
                status, answer, _ = _http(
                    "POST", base_url + "/retrieve", body, timeout=30, ray_api=False
                )
                if status == 200 and isinstance(answer, dict) and answer.get("result"):
                    found = {"status": status, "hits": len(answer["result"][0])}
                    if replicas is not None:
                        found["routed_replicas"] = replicas
                    return found
            last = f"HTTP {status}" + (f", routing to {routed} replica(s)" if routed else "")
        except OSError as exc:
            last = str(exc)
        time.sleep(1.0)
    raise RuntimeError(f"{base_url} did not answer /healthz and /retrieve ({last})")


def _log(message: str) -> None:
    import sys

    print(f"[retrieval] {message}", file=sys.stderr, flush=True)
