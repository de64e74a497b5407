"""Point Verl's search tool at a retrieval service, and check that the service answers.

    python -m rlinfra_node.search_tool rewrite --in A --out B --url U [--num-workers 8]
    python -m rlinfra_node.search_tool probe --url U [--tries 30] [--interval 5] [--timeout 10]

``rewrite`` reads a Verl tool config (the shape of Verl's
``examples/sglang_multiturn/config/tool_config/search_tool_config.yaml``: a ``tools`` list whose
entries have ``class_name``, ``config`` and ``tool_schema``) and sets, in every search tool's
``config``, ``retrieval_service_url`` to ``U/retrieve`` (``U`` may end in ``/`` or already in
``/retrieve``) and ``num_workers`` (Verl's example has 120, sized for a large shared service; 8 by
default here). Everything else is kept. The output is written under a temporary name and renamed.

``probe`` sends what Verl's search tool sends, ``POST U/retrieve`` with
``{"queries": ["test"], "topk": 1, "return_scores": true}``, until the service answers 200 with a
JSON ``result`` list, at most ``--tries`` times ``--interval`` seconds apart. A service that never
does fails the run (exit 1) with a message naming the URL and the last error: a trainer whose
every search call fails would otherwise train on empty tool responses.

``--url`` defaults to ``$RETRIEVAL_SERVICE_URL``. Exit codes: 0 done, 1 the probe failed, 2 bad
input (nothing written).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

URL_ENV = "RETRIEVAL_SERVICE_URL"
ROUTE = "/retrieve"
DEFAULT_NUM_WORKERS = 8
SEARCH_TOOL_CLASS = "verl.tools.search_tool.SearchTool"
PROBE_BODY = {"queries": ["test"], "topk": 1, "return_scores": True}


class SearchToolError(Exception):
    """A one-line error; ``exit_code`` 2 for bad input, 1 for a service that does not answer."""

    def __init__(self, message: str, exit_code: int = 2, final: bool = False) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        # The service answered that it never will (403: this node may not ask): no retry.
        self.final = final


def retrieve_url(url: str) -> str:
    """``url`` as the service's ``/retrieve`` address: trailing slashes and a given route folded."""
    text = url.strip()
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        shown = text or "empty"
        raise SearchToolError(
            f"--url: {shown!r} is not an http(s) URL; give http://HOST:PORT (or set {URL_ENV})"
        )
    try:
        parts.port  # noqa: B018 - parsing the port is the check
    except ValueError as exc:
        raise SearchToolError(f"--url: {text!r}: {exc}") from exc
    if parts.query or parts.fragment:
        raise SearchToolError(f"--url: {text!r}: give the service's base URL, without ?query or #")
    path = parts.path.rstrip("/")
    path = path.removesuffix(ROUTE).rstrip("/")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path + ROUTE, "", ""))


def _is_search_tool(tool: Any) -> bool:
    if not isinstance(tool, dict):
        return False
    config = tool.get("config")
    return tool.get("class_name") == SEARCH_TOOL_CLASS or (
        isinstance(config, dict) and "retrieval_service_url" in config
    )


def rewrite_config(
    doc: Any, url: str, num_workers: int = DEFAULT_NUM_WORKERS, source: str = "tool config"
) -> dict[str, Any]:
    """A copy of the parsed tool config ``doc`` with every search tool pointed at ``url``."""
    if not isinstance(doc, dict) or not isinstance(doc.get("tools"), list):
        raise SearchToolError(f"{source}: tools: expected a list of tools (Verl's tool config)")
    if num_workers < 1:
        raise SearchToolError(f"--num-workers: must be at least 1, got {num_workers}")
    target = retrieve_url(url)
    out = json.loads(json.dumps(doc))  # a deep copy of plain YAML data
    found = 0
    for index, tool in enumerate(out["tools"]):
        if not _is_search_tool(tool):
            continue
        config = tool.get("config")
        if config is None:
            config = tool["config"] = {}
        if not isinstance(config, dict):
            raise SearchToolError(f"{source}: tools[{index}].config: expected a mapping")
        config["retrieval_service_url"] = target
        config["num_workers"] = num_workers
        found += 1
    if not found:
        raise SearchToolError(
            f"{source}: tools: no search tool (class_name {SEARCH_TOOL_CLASS} or a config with "
            "retrieval_service_url)"
        )
    return dict(out)


def rewrite_file(
    src: Path, dst: Path, url: str, num_workers: int = DEFAULT_NUM_WORKERS
) -> dict[str, Any]:
    """Read ``src``, rewrite it (see rewrite_config), write ``dst`` atomically."""
    import yaml

    try:
        doc = yaml.safe_load(src.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SearchToolError(f"{src}: no such file") from None
    except yaml.MarkedYAMLError as exc:
        where = f"line {exc.problem_mark.line + 1}: " if exc.problem_mark else ""
        raise SearchToolError(f"{src}: cannot read: {where}{exc.problem}") from exc
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise SearchToolError(f"{src}: cannot read: {' '.join(str(exc).split())}") from exc
    result = rewrite_config(doc, url, num_workers, source=str(src))
    text = (
        f"# Written by rlinfra_node.search_tool from {src.name}: "
        "retrieval_service_url and num_workers set.\n"
        + yaml.safe_dump(result, sort_keys=False, default_flow_style=False)
    )
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, dst)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return result


def probe_once(url: str, timeout: float) -> None:
    """One POST of PROBE_BODY; raises SearchToolError (exit 1) unless a ``result`` list comes back."""
    request = urllib.request.Request(
        url,
        data=json.dumps(PROBE_BODY).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status = response.status
            body = response.read()
    except urllib.error.HTTPError as exc:
        detail = _error_text(exc)
        message = f"HTTP {exc.code} {exc.reason}" + (f": {detail}" if detail else "")
        raise SearchToolError(message, 1, final=exc.code == 403) from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise SearchToolError(f"{type(exc).__name__}: {reason}", 1) from exc
    if status != 200:
        raise SearchToolError(f"HTTP {status}", 1)
    try:
        data = json.loads(body)
    except ValueError:
        raise SearchToolError(f"not JSON: {body[:80]!r}", 1) from None
    if not isinstance(data, dict) or not isinstance(data.get("result"), list):
        raise SearchToolError(f"no 'result' list in the answer: {body[:80]!r}", 1)


def _error_text(exc: urllib.error.HTTPError) -> str:
    """The service's own words from an error answer (``{"error": ...}``), or ""."""
    try:
        data = json.loads(exc.read(4096) or b"null")
    except (ValueError, OSError):
        return ""
    if isinstance(data, dict) and isinstance(data.get("error"), str):
        return data["error"][:300]
    return ""


def probe(
    url: str,
    tries: int = 30,
    interval: float = 5.0,
    timeout: float = 10.0,
    log: Callable[[str], None] = print,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Probe ``url``/retrieve until it answers; returns the try that succeeded."""
    if tries < 1 or interval < 0 or timeout <= 0:
        raise SearchToolError("--tries must be >= 1, --interval >= 0 and --timeout > 0")
    target = retrieve_url(url)
    last = ""
    for attempt in range(1, tries + 1):
        try:
            probe_once(target, timeout)
        except SearchToolError as exc:
            last = str(exc)
            log(f"search_tool: probe {attempt}/{tries} of POST {target}: {last}")
            if exc.final:
                raise SearchToolError(
                    f"retrieval service at {target} refused this node: {last}", 1
                ) from None
            if attempt < tries:
                sleep(interval)
            continue
        log(f"search_tool: {target} answered (try {attempt}/{tries})")
        return attempt
    raise SearchToolError(
        f"retrieval service at {target} did not answer POST {ROUTE} with a result list after "
        f"{tries} tries {interval:g} s apart (last: {last}); is it running and reachable from "
        "this node?",
        1,
    )


def _url(value: str | None) -> str:
    url = value or os.environ.get(URL_ENV, "")
    if not url.strip():
        raise SearchToolError(f"--url: not given and {URL_ENV} is not set")
    return url


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m rlinfra_node.search_tool",
        description="Rewrite Verl's search tool config; probe a retrieval service.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    rewrite = commands.add_parser("rewrite", help="point a tool config at a retrieval service")
    rewrite.add_argument("--in", dest="src", required=True, type=Path)
    rewrite.add_argument("--out", dest="dst", required=True, type=Path)
    rewrite.add_argument("--url", help=f"service base URL (default ${URL_ENV})")
    rewrite.add_argument("--num-workers", type=int, default=DEFAULT_NUM_WORKERS)
    check = commands.add_parser("probe", help="fail unless POST URL/retrieve answers")
    check.add_argument("--url", help=f"service base URL (default ${URL_ENV})")
    check.add_argument("--tries", type=int, default=30)
    check.add_argument("--interval", type=float, default=5.0, help="seconds between tries")
    check.add_argument("--timeout", type=float, default=10.0, help="seconds per request")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.command == "rewrite":
            result = rewrite_file(args.src, args.dst, _url(args.url), args.num_workers)
            urls = sorted(
                {
                    t["config"]["retrieval_service_url"]
                    for t in result["tools"]
                    if _is_search_tool(t)
                }
            )
            print(f"search_tool: wrote {args.dst} (retrieval_service_url {', '.join(urls)})")
        else:
            log = lambda line: print(line, flush=True)  # noqa: E731
            probe(_url(args.url), args.tries, args.interval, args.timeout, log=log)
    except SearchToolError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
