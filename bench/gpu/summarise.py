"""Print the figures of a bench/gpu/run_device.sh run: python bench/gpu/summarise.py OUT_DIR"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _load(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def main() -> int:
    out = Path(sys.argv[1])
    steps = _load(out / "steps.json") or {}
    for name, rc in sorted(steps.get("steps", {}).items()):
        print(f"step {name:<24} exit {rc}")
    for name in ("check-gpu0.json", "entry.json"):
        doc = _load(out / name)
        if doc is None:
            print(f"{name}: missing or not JSON")
            continue
        print(f"{name}: ok={doc.get('ok')} {doc.get('backend')} world={doc.get('world_size')}")
        for r in doc.get("results", []):
            busbw = r["busbw_gbps"] if r["busbw_gbps"] is not None else "n/a"
            print(
                f"  {r['size_bytes'] / 2**20:>6.0f} MiB  {r['time_s'] * 1e6:>8.1f} us  "
                f"algbw {r['algbw_gbps']:>10.2f} GB/s  busbw {busbw}"
            )
        for g in doc.get("gpus", []):
            print(
                f"  cuda:{g['device']} {g['name']}: {g.get('matmul_bf16_tflops')} TFLOP/s bf16 "
                f"(rel err {g.get('matmul_rel_err'):.2e}), {g.get('copy_gbps')} GB/s copy"
            )
        for p in doc.get("problems", []):
            print(f"  problem: {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
