"""Command line of the retrieval service.

    python -m rlinfra_node.retrieval build  --settings S.json [--force]
    python -m rlinfra_node.retrieval serve  --settings S.json [--host H] [--port P]
    python -m rlinfra_node.retrieval deploy --settings S.json --replicas N [--router front]
                                            [--address URL] ...
    python -m rlinfra_node.retrieval status [--address URL]
    python -m rlinfra_node.retrieval sample --out corpus.jsonl[.gz] --passages N

Every settings field can also be given as a flag (``--data-dir``, ``--model``, ...), which wins
over the file. ``build`` and ``deploy`` print one JSON object on stdout; progress goes to stderr.
Exit codes: 0 done, 1 failed, 2 bad settings.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
import typing
from pathlib import Path
from typing import Any

from rlinfra_node.retrieval.settings import Settings

# Ray's dashboard on this node at the node contract's port (rlinfra.layout.RAY_DASHBOARD_PORT,
# which this package cannot import; tests/unit/test_layout.py checks it). The retrieval_service
# role passes --address, from ray_cluster_dashboard_port.
DASHBOARD = "http://127.0.0.1:8265"


def _add_settings_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--settings", help="JSON file with the retrieval settings")
    hints = typing.get_type_hints(Settings)
    for item in dataclasses.fields(Settings):
        hint = hints[item.name]
        kind: Any = str
        for candidate in (int, float):
            if hint is candidate or candidate in typing.get_args(hint):
                kind = candidate
        parser.add_argument("--" + item.name.replace("_", "-"), dest=item.name, type=kind)


def _settings(args: argparse.Namespace) -> Settings:
    data: dict[str, Any] = {}
    if args.settings:
        data.update(json.loads(Path(args.settings).read_text()))
    for item in dataclasses.fields(Settings):
        value = getattr(args, item.name, None)
        if value is not None:
            data[item.name] = value
    if "data_dir" not in data:
        raise ValueError("retrieval settings: give --settings or --data-dir")
    return Settings.from_dict(data)


def cmd_build(args: argparse.Namespace) -> int:
    from rlinfra_node.retrieval.index import ensure

    result = ensure(_settings(args), force=args.force)
    print(json.dumps(result, sort_keys=True))
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from rlinfra_node.retrieval import api
    from rlinfra_node.retrieval.server import ProcessServer

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    server = ProcessServer(api.Retriever(_settings(args)), args.host, args.port)
    # A supervisor (systemd, Kubernetes, `kill`) stops it with SIGTERM: drain as on Ctrl-C.
    signal.signal(signal.SIGTERM, stop)
    print(f"[retrieval] serving on {server.url}", file=sys.stderr, flush=True)
    try:
        server.wait()
    except KeyboardInterrupt:
        print("[retrieval] stopping: draining for up to 2 s", file=sys.stderr, flush=True)
        server.close(drain_s=2.0)
    return 0


def cmd_deploy(args: argparse.Namespace) -> int:
    from rlinfra_node.retrieval import serve_app

    deployment = serve_app.Deployment(
        replicas=args.replicas,
        host=args.host,
        port=args.port,
        num_cpus=args.num_cpus,
        router=args.router,
        max_ongoing_requests=args.max_ongoing_requests,
        max_replicas_per_node=args.max_replicas_per_node,
        allow=tuple(args.allow or ()),
    )
    config = serve_app.serve_config(_settings(args), deployment)
    if args.print_config:
        print(json.dumps(config, indent=2, sort_keys=True))
        return 0
    report = serve_app.deploy(args.address, config, timeout_s=args.timeout)
    print(json.dumps(report, sort_keys=True))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from rlinfra_node.retrieval import serve_app

    details = serve_app.serve_details(args.address)
    apps = details.get("applications") or {}
    app = apps.get(serve_app.APP_NAME) or {}
    keys = ("replica_id", "state", "node_ip", "pid", "actor_id")
    router = serve_app.router_of(details)
    out: dict[str, Any] = {
        "status": app.get("status"),
        "router": router,
        "replicas": [{key: r.get(key) for key in keys} for r in serve_app.replicas(details)],
    }
    if router == "serve-proxy":
        http = details.get("http_options") or {}
        out["http_options"] = http
        out["endpoint"] = f"http://{http.get('host')}:{http.get('port')}"
    front = apps.get(serve_app.FRONT_APP)
    if front:
        args_ = (front.get("deployed_app_config") or {}).get("args") or {}
        out["endpoint"] = f"http://{args_.get('host')}:{args_.get('port')}"
        out["front"] = {
            "status": front.get("status"),
            "replicas": [
                {key: r.get(key) for key in keys}
                for r in serve_app.replicas(details, serve_app.FRONT_APP)
            ],
        }
    print(json.dumps(out, sort_keys=True))
    return 0


def cmd_sample(args: argparse.Namespace) -> int:
    from rlinfra_node.retrieval import sample

    sample.write(Path(args.out), args.passages, args.seed)
    print(json.dumps({"out": args.out, "passages": args.passages}))
    return 0


def serve_routers() -> tuple[str, ...]:
    from rlinfra_node.retrieval.serve_app import ROUTERS

    return ROUTERS


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="python -m rlinfra_node.retrieval", description=__doc__.splitlines()[0]
    )
    sub = top.add_subparsers(dest="command", required=True)

    build = sub.add_parser("build", help="fetch the corpus and build the index (once)")
    _add_settings_flags(build)
    build.add_argument("--force", action="store_true", help="rebuild the index even if present")
    build.set_defaults(func=cmd_build)

    serve = sub.add_parser("serve", help="one server process (batched searches), no Ray")
    _add_settings_flags(serve)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.set_defaults(func=cmd_serve)

    deploy = sub.add_parser("deploy", help="replicate with Ray Serve (no-op when unchanged)")
    _add_settings_flags(deploy)
    deploy.add_argument("--replicas", type=int, default=3)
    deploy.add_argument("--host", default="127.0.0.1")
    deploy.add_argument("--port", type=int, default=8000)
    deploy.add_argument("--num-cpus", type=float, default=1.0)
    deploy.add_argument(
        "--router",
        choices=serve_routers(),
        default="front",
        help="front: replicas serve HTTP themselves behind a light front on the head; "
        "serve-proxy: Serve's HTTP proxy (the previous path)",
    )
    deploy.add_argument(
        "--max-ongoing-requests", type=int, default=16, help="serve-proxy router only"
    )
    deploy.add_argument("--max-replicas-per-node", type=int, default=None)
    deploy.add_argument(
        "--allow",
        action="append",
        metavar="CIDR",
        help="only these networks (and loopback) may ask the front; repeat for more",
    )
    deploy.add_argument("--address", default=DASHBOARD, help="Ray dashboard URL")
    deploy.add_argument("--timeout", type=float, default=900.0)
    deploy.add_argument("--print-config", action="store_true", help="print the Serve config only")
    deploy.set_defaults(func=cmd_deploy)

    status = sub.add_parser("status", help="the Serve app's state and replicas, as JSON")
    status.add_argument("--address", default=DASHBOARD)
    status.set_defaults(func=cmd_status)

    sample_cmd = sub.add_parser("sample", help="write a synthetic corpus")
    sample_cmd.add_argument("--out", required=True)
    sample_cmd.add_argument("--passages", type=int, default=1000)
    sample_cmd.add_argument("--seed", type=int, default=0)
    sample_cmd.set_defaults(func=cmd_sample)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from rlinfra_node.retrieval.corpus import RetrievalError

    try:
        code: int = args.func(args)
        return code
    except ValueError as exc:
        if str(exc).startswith(("retrieval settings", "retrieval deployment")):
            print(f"Error: {exc}", file=sys.stderr)
            return 2
        raise
    except (RetrievalError, RuntimeError, OSError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
