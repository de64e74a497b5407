"""How far a cluster's training got, read on the head node (run by `rlinfra status`).

    python -I - CHECKPOINT_DIR SERVE_PORT [NOTICE_DIR] < progress.py

Prints one JSON line: ``checkpoint_step`` (Verl's ``latest_checkpointed_iteration.txt`` in the
bucket), ``served_step`` and ``served_model`` (the model server's ``GET /v1/models``, whose
``rlinfra_step`` is the merged step) and ``notices``: the spot nodes' preemption notices in
NOTICE_DIR (``rlinfra_node.spot_watch`` writes them; node, action, deadline, seen), those whose
deadline is less than ``NOTICE_KEPT_S`` past. A value that cannot be read is null. Standard
library only: it runs with ``-I`` from its source on standard input, before any job shipped the
package.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from pathlib import Path

LATEST_FILE = "latest_checkpointed_iteration.txt"
# Notices whose node went longer ago than this are an earlier run's, not news.
NOTICE_KEPT_S = 900.0


def checkpoint_step(checkpoint_dir: Path) -> int | None:
    try:
        return int((checkpoint_dir / LATEST_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def served(port: int, timeout: float = 3.0) -> tuple[int | None, str | None]:
    if port <= 0:
        return None, None
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=timeout) as r:
            data = json.loads(r.read().decode())["data"][0]
    except (OSError, ValueError, KeyError, IndexError):
        return None, None
    step = data.get("rlinfra_step")
    return (int(step) if isinstance(step, int) else None), str(data.get("id"))


def notices(notice_dir: Path, now: float) -> list[dict[str, object]]:
    """The readable notices in ``notice_dir`` (the spot watcher's ``<node>.json`` files), soonest
    deadline first; unreadable files and notices older than ``NOTICE_KEPT_S`` are left out."""
    found: list[tuple[float, dict[str, object]]] = []
    try:
        paths = sorted(notice_dir.glob("*.json"))
    except OSError:
        return []
    for path in paths:
        try:
            data = json.loads(path.read_text())
            deadline = float(data["deadline"])
            notice: dict[str, object] = {
                "node": str(data["node"]),
                "action": str(data["action"]),
                "deadline": deadline,
                "seen": float(data["seen"]),
            }
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if now - deadline <= NOTICE_KEPT_S:
            found.append((deadline, notice))
    return [notice for _, notice in sorted(found, key=lambda item: item[0])]


def main(argv: list[str]) -> int:
    checkpoint_dir = Path(argv[0]) if argv and argv[0] else None
    port = int(argv[1]) if len(argv) > 1 and argv[1] else 0
    notice_dir = Path(argv[2]) if len(argv) > 2 and argv[2] else None
    step, model = served(port)
    print(
        json.dumps(
            {
                "checkpoint_step": checkpoint_step(checkpoint_dir) if checkpoint_dir else None,
                "served_step": step,
                "served_model": model,
                "notices": notices(notice_dir, time.time()) if notice_dir else [],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
