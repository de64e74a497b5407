"""HCL as the tests read it: python-hcl2's parse, block labels, provider-free locals."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def parse_hcl(text: str) -> dict[str, Any]:
    import hcl2

    parsed: dict[str, Any] = hcl2.loads(text)
    return parsed


def parse_file(path: Path) -> dict[str, Any]:
    return parse_hcl(path.read_text())


def unquote(label: str) -> str:
    """python-hcl2 (7+) keeps block labels quoted: '"this"' -> 'this'."""
    return label[1:-1] if len(label) >= 2 and label[0] == label[-1] == '"' else label


def labelled(parsed: dict[str, Any], kind: str) -> Iterator[tuple[list[str], dict[str, Any]]]:
    """(labels, body) of each top-level block of one kind (resource, data, variable, ...)."""
    for entry in parsed.get(kind, []):
        yield from _labelled(entry, [])


def _labelled(
    node: dict[str, Any], labels: list[str]
) -> Iterator[tuple[list[str], dict[str, Any]]]:
    if node.get("__is_block__"):
        yield labels, node
        return
    for key, value in node.items():
        if isinstance(value, dict):
            yield from _labelled(value, [*labels, unquote(key)])


def is_block_list(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(item, dict) and item.get("__is_block__") for item in value)
    )


PROVIDER_FREE = re.compile(r"(?<![\w.])(data\.google_|google_[a-z0-9_]+\.)")


def provider_reads(provider: str) -> re.Pattern[str]:
    """PROVIDER_FREE's pattern for another provider's type prefix (e.g. "nebius")."""
    if provider == "google":
        return PROVIDER_FREE
    return re.compile(rf"(?<![\w.])(data\.{provider}_|{provider}_[a-z0-9_]+\.)")


def pure_locals(main_tf: str, provider: str = "google") -> list[str]:
    """The top-level `locals { }` blocks of a main.tf that read no resource or data source of
    the provider (terraform fmt puts a top-level block's closing brace alone at column 0)."""
    reads = provider_reads(provider)
    blocks, current = [], None
    for line in main_tf.splitlines():
        if current is None and line == "locals {":
            current = [line]
        elif current is not None:
            current.append(line)
            if line == "}":
                block = "\n".join(current)
                if not reads.search(block):
                    blocks.append(block)
                current = None
    return blocks
