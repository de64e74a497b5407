"""Does this node still hold what the last successful configuration left? One cheap look.

The driver runs this (standard library only, ``python -I - SPEC``, the script on standard
input) on every node of a cluster whose rendered Ansible inputs are the ones last applied. When
every node answers "ok", re-running the playbook would change nothing that this checks, and
`rlinfra up` skips it; any problem sends it down the full playbook, which repairs it.

What is checked, each named in the spec (JSON, the only argument):

- ``marker`` holds ``digest``: the playbook wrote that digest at the end of its last run here (a
  host made again, or one whose run stopped midway, has another or none);
- every path in ``files`` exists (the node contract, the venv's interpreter);
- every path in ``mounts`` is a mount point (buckets in MOUNT mode);
- a raylet of this node (``node_ip``) runs, joined to ``gcs_address`` (read by the Ray helper,
  ``ray_helper status``, which sees only this node's processes);
- on the head (``head`` set): the dashboard's state API lists exactly ``head.node_ips`` alive,
  and, with ``head.serve`` set, the Serve application runs its replicas (and its front, the
  endpoint, runs on the head when ``head.serve.front`` names it).

Prints ``{"ok": bool, "problems": [{"kind": ..., "text": ...}, ...]}``; exits 0 whatever it finds (1 only on a bad spec).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Any

STATE_NODES = (
    "/api/v0/nodes?limit=10000&filter_keys=state&filter_predicates=%3D&filter_values=ALIVE"
)
SERVE_APPS = "/api/serve/applications/"


def _get(url: str, token_file: str, timeout: float) -> Any:
    headers = {}
    if token_file and os.path.isfile(token_file):
        with open(token_file, encoding="utf-8") as handle:
            headers["Authorization"] = f"Bearer {handle.read().strip()}"
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.load(response)


def check_marker(spec: dict[str, Any]) -> list[str]:
    try:
        with open(spec["marker"], encoding="utf-8") as handle:
            found = handle.read().strip()
    except OSError:
        return ["no record of a finished configuration run"]
    if found != spec["digest"]:
        return ["its last configuration run applied other inputs"]
    return []


def mount_points(mountinfo: str = "/proc/self/mountinfo") -> set[str]:
    """Every mount point this process sees. os.path.ismount misses a bind mount whose source
    lies on the same filesystem as its parent (the same st_dev), which is how local buckets are
    mounted; the kernel's mount table does not."""
    points: set[str] = set()
    try:
        with open(mountinfo, encoding="utf-8") as handle:
            for line in handle:
                fields = line.split()
                if len(fields) > 4:
                    # Octal escapes for space, tab, newline and backslash.
                    points.add(
                        re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
                    )
    except OSError:
        pass
    return points


def check_paths(spec: dict[str, Any], mountinfo: str = "/proc/self/mountinfo") -> list[str]:
    problems = [f"{path} is missing" for path in spec.get("files", []) if not os.path.exists(path)]
    mounts = spec.get("mounts", [])
    if mounts:
        points = mount_points(mountinfo)
        problems += [
            f"{path} is not mounted" for path in mounts if os.path.normpath(path) not in points
        ]
    return problems


def check_raylet(spec: dict[str, Any]) -> list[str]:
    helper = spec.get("ray_helper")
    if not helper:
        return []
    try:
        # -S: the helper's fallback process list, without importing Ray (a second of CPU).
        out = subprocess.run(
            [sys.executable, "-S", helper, "status"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        raylets = json.loads(out)["raylets"]
    except (OSError, subprocess.SubprocessError, ValueError, KeyError) as exc:
        return [f"could not read its Ray processes ({exc.__class__.__name__})"]
    for raylet in raylets:
        if (
            raylet.get("node_ip") == spec["node_ip"]
            and raylet.get("gcs_address") == spec["gcs_address"]
        ):
            return []
    return [f"no Ray raylet of {spec['node_ip']} joined to {spec['gcs_address']}"]


def check_head(head: dict[str, Any], timeout: float) -> list[str]:
    base = head["dashboard"].rstrip("/")
    token_file = head.get("token_file", "")
    try:
        answer = _get(base + STATE_NODES, token_file, timeout)
        alive = sorted(str(n.get("node_ip")) for n in answer["data"]["result"]["result"])
    except (OSError, urllib.error.URLError, ValueError, KeyError, TypeError) as exc:
        return [f"the Ray head's state API did not answer ({exc.__class__.__name__})"]
    wanted = sorted(head["node_ips"])
    if alive != wanted:
        missing = [ip for ip in wanted if ip not in alive]
        extra = [ip for ip in alive if ip not in wanted]
        what = []
        if missing:
            what.append("not alive: " + ", ".join(missing))
        if extra:
            what.append("unexpected: " + ", ".join(extra))
        return ["the Ray cluster is not the inventory's nodes (" + "; ".join(what) + ")"]
    serve = head.get("serve")
    if not serve:
        return []
    try:
        details = _get(base + SERVE_APPS, token_file, timeout)
    except (OSError, urllib.error.URLError, ValueError) as exc:
        return [f"the Serve API did not answer ({exc.__class__.__name__})"]
    apps = details.get("applications") or {}
    problems = []
    # The replicas, then the front that the endpoint is (when the profile routes through it).
    wanted = [(serve["app"], int(serve["replicas"]))]
    if serve.get("front"):
        wanted.append((serve["front"], 1))
    for name, replicas in wanted:
        app = apps.get(name) or {}
        if app.get("status") != "RUNNING":
            problems.append(
                f"the Serve application {name!r} is {app.get('status') or 'not deployed'}"
            )
            continue
        running = sum(
            1
            for deployment in (app.get("deployments") or {}).values()
            for replica in deployment.get("replicas") or []
            if replica.get("state") == "RUNNING"
        )
        if running != replicas:
            problems.append(f"the Serve application {name!r} runs {running} of {replicas} replicas")
    return problems


def verify(spec: dict[str, Any]) -> dict[str, Any]:
    """Every check, each problem with its kind: "config" (the marker, the contract's files),
    "mount" (a bucket), "ray" (the raylet, or the head's view of the cluster) or "service" (a
    Serve application)."""
    problems = [{"kind": "config", "text": text} for text in check_marker(spec)]
    problems += [
        {"kind": "mount" if text.endswith("is not mounted") else "config", "text": text}
        for text in check_paths(spec)
    ]
    problems += [{"kind": "ray", "text": text} for text in check_raylet(spec)]
    if spec.get("head"):
        problems += [
            {"kind": "service" if text.startswith("the Serve ") else "ray", "text": text}
            for text in check_head(spec["head"], float(spec.get("timeout_s", 10)))
        ]
    return {"ok": not problems, "problems": problems}


def main(argv: list[str]) -> int:
    try:
        spec = json.loads(argv[1])
    except (IndexError, ValueError) as exc:
        print(f"verify_node: bad spec: {exc!r}", file=sys.stderr)
        return 1
    missing = [k for k in ("marker", "digest", "node_ip", "gcs_address") if k not in spec]
    if missing:
        print(f"verify_node: the spec lacks {', '.join(missing)}", file=sys.stderr)
        return 1
    print(json.dumps(verify(spec)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
