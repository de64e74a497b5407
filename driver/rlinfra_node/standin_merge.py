"""A CPU stand-in for ``python -m verl.model_merger`` (used with ``--program standin``).

Takes the merger's arguments (``merge --backend fsdp [--tie-word-embedding] --local_dir ACTOR
--target_dir TARGET [--hf_upload_path REPO]``), reads the stand-in trainer's actor checkpoint
and writes a model folder (``model.pt`` and ``config.json``) that the stand-in server loads.
It has no Hub to push to: ``--hf_upload_path`` is refused rather than pretended.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="standin_merge")
    sub = parser.add_subparsers(dest="command", required=True)
    merge = sub.add_parser("merge")
    merge.add_argument("--backend", choices=["fsdp"], required=True)
    merge.add_argument("--tie-word-embedding", action="store_true")
    merge.add_argument("--local_dir", type=Path, required=True)
    merge.add_argument("--target_dir", type=Path, required=True)
    merge.add_argument("--hf_upload_path", default=None)
    args = parser.parse_args(argv)
    if args.hf_upload_path:
        print("standin_merge: the stand-in has no Hub to push to; not uploading", file=sys.stderr)
        return 1
    source = args.local_dir / "model.pt"
    config = args.local_dir / "huggingface" / "config.json"
    if not source.is_file() or not config.is_file():
        print(f"standin_merge: {args.local_dir}: no stand-in actor checkpoint", file=sys.stderr)
        return 1
    args.target_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, args.target_dir / "model.pt")
    meta = json.loads(config.read_text())
    meta["merged_from"] = str(args.local_dir)
    (args.target_dir / "config.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"standin_merge: {args.local_dir} -> {args.target_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
