"""Render the node_contract role's defaults from the node contract (driver/rlinfra/layout.py).

    python tools/node_contract.py           # write ansible/roles/node_contract/defaults/main.yml
    python tools/node_contract.py --check   # exit 1 when the committed file differs

Every other role reads the contract's paths, ports and names as ``node_contract_*`` variables
(their roles depend on node_contract); tests/unit/test_layout.py fails while the committed file
differs from what the module renders.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "driver"))

from rlinfra import layout  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="only tell whether the file is current"
    )
    args = parser.parse_args(argv)
    target = REPO / layout.ANSIBLE_DEFAULTS
    text = layout.ansible_defaults()
    current = target.read_text() if target.is_file() else None
    if args.check:
        if current != text:
            print(f"{layout.ANSIBLE_DEFAULTS} differs from rlinfra.layout: run {sys.argv[0]}")
            return 1
        return 0
    if current != text:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        print(f"wrote {target.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
