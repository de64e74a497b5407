"""What a retrieval server needs to know, as one plain value (standard library only).

The same ``Settings`` travel from the profile (through Ansible, as JSON) to the build step, to a
plain uvicorn server and to every Ray Serve replica, so all of them read one corpus and one index
with one model.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_MODEL = "intfloat/e5-base-v2"
# e5 models are trained with these prefixes; other models usually want none.
E5_QUERY_PREFIX = "query: "
E5_PASSAGE_PREFIX = "passage: "

CORPUS_FILE = "corpus.jsonl"
CORPUS_META = "corpus.json"
LOCK_FILE = "build.lock"
# How a server encodes queries (``index.Encoder.encode_queries``).
QUERY_ENCODERS = ("auto", "bfloat16", "float32", "library")


@dataclass(frozen=True)
class Settings:
    """A retrieval service's corpus, index, model and request limits."""

    # Folder with the corpus, the index and their markers (in the bucket, shared by replicas).
    data_dir: str
    # Where to get the corpus when data_dir has none: an http(s) URL or a path; JSONL or .jsonl.gz.
    corpus_source: str | None = None
    # Keep only the first N passages of the source (None: all).
    max_passages: int | None = None
    # A prebuilt FAISS index (URL or path) to take instead of building one; it must match the
    # corpus and the model.
    index_source: str | None = None
    # A sentence-transformers model: a hub name, a local folder, or ``package:NAME`` for a Python
    # package that ships a model folder (NAME.get_model_path(), or NAME/model).
    model: str = DEFAULT_MODEL
    query_prefix: str = E5_QUERY_PREFIX
    passage_prefix: str = E5_PASSAGE_PREFIX
    # Where hub models are cached (None: the library's default).
    model_cache: str | None = None
    # Passages encoded per batch while building.
    batch_size: int = 256
    # Request limits.
    default_topk: int = 3
    max_topk: int = 50
    max_queries: int = 128
    max_query_chars: int = 4096
    # How queries are encoded: ``auto`` (the model's forward pass in plain torch functions, in
    # bfloat16 where the CPU or GPU computes it natively, else float32), ``bfloat16`` or
    # ``float32`` (that forward in that precision), or ``library`` (sentence-transformers' own
    # modules, float32). Models the forward does not cover use ``library``. Indexes are built
    # with ``library`` whatever this says.
    query_encoder: str = "auto"
    # Intra-op threads for encoding and FAISS (None: the libraries' defaults).
    threads: int | None = None
    # Serving (the replicas' own HTTP path, rlinfra_node.retrieval.batching): concurrent requests
    # are encoded together, at most this many queries per batch ...
    max_batch_queries: int = 32
    # ... and at most this many queries wait per process; a request beyond it gets 503 at once.
    max_queued_queries: int = 512
    # Seconds after which a build lock whose holder stopped touching it is taken over.
    lock_stale_s: float = 600.0

    def __post_init__(self) -> None:
        problems = []
        if not self.data_dir:
            problems.append("data_dir is empty")
        if self.max_passages is not None and self.max_passages < 1:
            problems.append("max_passages must be at least 1")
        if self.batch_size < 1:
            problems.append("batch_size must be at least 1")
        if not 1 <= self.default_topk <= self.max_topk:
            problems.append(f"default_topk must be between 1 and max_topk ({self.max_topk})")
        if self.max_queries < 1 or self.max_query_chars < 1:
            problems.append("max_queries and max_query_chars must be at least 1")
        if self.threads is not None and self.threads < 1:
            problems.append("threads must be at least 1")
        if self.query_encoder not in QUERY_ENCODERS:
            problems.append(
                f"query_encoder {self.query_encoder!r}: use one of " + ", ".join(QUERY_ENCODERS)
            )
        if self.max_batch_queries < 1 or self.max_queued_queries < 1:
            problems.append("max_batch_queries and max_queued_queries must be at least 1")
        if problems:
            raise ValueError("retrieval settings: " + "; ".join(problems))

    @property
    def root(self) -> Path:
        return Path(self.data_dir)

    @property
    def corpus_path(self) -> Path:
        return self.root / CORPUS_FILE

    @property
    def corpus_meta_path(self) -> Path:
        return self.root / CORPUS_META

    @property
    def lock_path(self) -> Path:
        return self.root / LOCK_FILE

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Settings:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"retrieval settings: unknown key(s) {', '.join(unknown)}")
        return cls(**data)

    @classmethod
    def from_file(cls, path: str | Path) -> Settings:
        return cls.from_dict(json.loads(Path(path).read_text()))
