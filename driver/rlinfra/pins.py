"""Software pin sets (versions as data, in one file)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

import yaml

_PINSETS = Path(__file__).with_name("data") / "pinsets.yaml"
LOCKS_DIR = Path(__file__).with_name("data") / "locks"


@dataclass(frozen=True)
class PinSet:
    name: str
    description: str
    python: str
    packages: tuple[str, ...]
    imports: tuple[tuple[str, str], ...]
    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    # uv --torch-backend (e.g. cu126): where torch and its kin come from.
    torch_backend: str | None = None
    # Target platform for `rlinfra lock` (uv --python-platform); None: the controller's own.
    platform: str | None = None
    # Requirements that replace whatever any package declares for the same name (uv --override),
    # for a dependency's pin known to be wrong: verl 0.6.0 declares numpy<2, pyarrow wants 2.
    # Honoured by `rlinfra lock` and by the python_env role when it installs plain packages.
    overrides: tuple[str, ...] = ()
    # Added when the profile runs the retrieval service on its nodes (see with_retrieval).
    retrieval: tuple[str, ...] = ()
    retrieval_imports: tuple[tuple[str, str], ...] = ()

    @property
    def serves_retrieval(self) -> bool:
        """The set's own packages run the retriever (faiss and an encoder)."""
        names = {module for module, _ in self.imports}
        return {"faiss", "sentence_transformers"} <= names

    def with_retrieval(self) -> PinSet:
        """This set for nodes that also run the retrieval service; itself when it already can.

        Raises ValueError when it cannot (no retrieval packages declared)."""
        if self.serves_retrieval:
            return self
        if not self.retrieval:
            raise ValueError(f"pin set {self.name} declares no retrieval packages")
        if self.lock_file.is_file():
            raise ValueError(f"pin set {self.name} is locked without its retrieval packages")
        return replace(
            self,
            packages=self.packages + self.retrieval,
            imports=self.imports + self.retrieval_imports,
        )

    @property
    def lock_file(self) -> Path:
        """The hash-pinned lock `rlinfra lock` writes for this set (may not exist)."""
        return LOCKS_DIR / f"{self.name}.txt"


@cache
def pin_sets() -> dict[str, PinSet]:
    raw = yaml.safe_load(_PINSETS.read_text())
    out = {}
    for name, body in raw.items():
        out[name] = PinSet(
            name=name,
            description=body.get("description", ""),
            python=str(body.get("python", "3.10")),
            packages=tuple(body["packages"]),
            imports=tuple((str(k), str(v)) for k, v in (body.get("imports") or {}).items()),
            index_url=body.get("index_url"),
            extra_index_urls=tuple(body.get("extra_index_urls") or ()),
            torch_backend=body.get("torch_backend"),
            platform=body.get("platform"),
            overrides=tuple(body.get("overrides") or ()),
            retrieval=tuple(body.get("retrieval") or ()),
            retrieval_imports=tuple(
                (str(k), str(v)) for k, v in (body.get("retrieval_imports") or {}).items()
            ),
        )
    return out
