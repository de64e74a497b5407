"""Dense encoding and the FAISS index: built once per corpus and model, then only loaded.

The index is a flat inner-product index over L2-normalised embeddings (cosine similarity, exact
search), the layout of the reference's ``e5_Flat`` index. It lives in the data folder under
``index/<model slug>/`` next to a marker (``index.json``: model, prefixes, dimension, count and
the corpus digest it was built from), so one corpus can carry indexes for several models, and a
loader can tell an index that does not belong to its corpus.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import os
import re
import socket
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlinfra_node.retrieval.bert import FastEncoder, resolve_precision
from rlinfra_node.retrieval.corpus import (
    BuildLock,
    Corpus,
    CorpusError,
    RetrievalError,
    corpus_meta,
    ensure_corpus,
    load_corpus,
    log,
)
from rlinfra_node.retrieval.settings import Settings

PROGRESS_EVERY_S = 5.0


class IndexBuildError(RetrievalError):
    """An index that cannot be built, fetched or loaded."""


def model_slug(settings: Settings) -> str:
    """A folder name for the index of this model and passage prefix."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", settings.model.split("/")[-1]).strip("-") or "model"
    digest = hashlib.sha256(f"{settings.model}\0{settings.passage_prefix}".encode()).hexdigest()
    return f"{name[:48]}-{digest[:8]}"


@dataclass(frozen=True)
class IndexPaths:
    folder: Path
    index: Path
    meta: Path


def index_paths(settings: Settings) -> IndexPaths:
    folder = settings.root / "index" / model_slug(settings)
    return IndexPaths(folder, folder / "index.faiss", folder / "index.json")


def resolve_model(spec: str) -> str:
    """A model name or folder for sentence-transformers; ``package:NAME`` finds a shipped model."""
    if not spec.startswith("package:"):
        return spec
    name = spec.removeprefix("package:")
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        raise IndexBuildError(f"model {spec}: cannot import {name} ({exc})") from None
    getter = getattr(module, "get_model_path", None)
    path = Path(getter()) if callable(getter) else Path(module.__file__ or "").parent / "model"
    if not (path / "config.json").is_file() and not (path / "modules.json").is_file():
        raise IndexBuildError(f"model {spec}: {path} holds no model")
    return str(path)


class Encoder:
    """A sentence-transformers model that gives L2-normalised float32 embeddings."""

    def __init__(self, settings: Settings, device: str | None = None) -> None:
        """``device``: where the model runs (None: the library's choice, a GPU where torch
        sees one)."""
        if settings.threads:
            import torch

            torch.set_num_threads(settings.threads)
        from sentence_transformers import SentenceTransformer

        self.name = settings.model
        kwargs: dict[str, Any] = {"device": device}
        if settings.model_cache:
            kwargs["cache_folder"] = settings.model_cache
        self.model = SentenceTransformer(resolve_model(settings.model), **kwargs)
        getter = (
            getattr(self.model, "get_embedding_dimension", None)
            or self.model.get_sentence_embedding_dimension
        )
        self.dim = int(getter())
        # The model's tokenizer: ``preprocess`` since sentence-transformers 6 (where ``tokenize``
        # logs a deprecation), ``tokenize`` before.
        self.tokenize = getattr(self.model, "preprocess", None) or self.model.tokenize
        # Queries (what a server encodes) go through the model's forward pass in plain torch
        # functions where it covers the model (``bert``), in bfloat16 where the hardware has it
        # (``Settings.query_encoder``); an index is always built with the library's float32 path.
        self.fast: FastEncoder | None = None
        self.query_precision = "float32"
        if settings.query_encoder != "library":
            precision = resolve_precision(settings.query_encoder, str(self.model.device))
            self.fast = FastEncoder.build(self.model, precision)
            if self.fast is not None:
                self.query_precision = precision

    @property
    def query_path(self) -> str:
        """How queries are encoded, for the service's description and logs."""
        if self.fast is None:
            return "sentence-transformers, float32"
        return f"rlinfra_node.retrieval.bert, {self.query_precision}"

    def encode_queries(self, texts: list[str], prefix: str, batch_size: int) -> Any:
        """L2-normalised float32 query vectors, through the fast forward where there is one."""
        if self.fast is None:
            return self.encode(texts, prefix, batch_size)
        import numpy as np
        import torch

        parts = []
        for start in range(0, len(texts), batch_size):
            features = self.tokenize([prefix + text for text in texts[start : start + batch_size]])
            with torch.inference_mode():
                embedded = torch.nn.functional.normalize(self.fast(features), p=2, dim=1)
            parts.append(embedded.cpu().numpy())
        vectors = parts[0] if len(parts) == 1 else np.concatenate(parts)
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def encode(self, texts: list[str], prefix: str, batch_size: int) -> Any:
        import numpy as np

        if len(texts) <= batch_size:
            # One batch (each search the service answers, each batch of an index build): the
            # model's own tokenizer and modules, called directly. sentence-transformers'
            # encode() adds over a millisecond of bookkeeping per call, about a tenth of a lone
            # query's time on a CPU thread.
            import torch

            features = self.tokenize([prefix + text for text in texts])
            features = {
                key: value.to(self.model.device) if isinstance(value, torch.Tensor) else value
                for key, value in features.items()
            }
            with torch.inference_mode():
                embedded = self.model.forward(features)["sentence_embedding"]
                embedded = torch.nn.functional.normalize(embedded.float(), p=2, dim=1)
            return np.ascontiguousarray(embedded.cpu().numpy(), dtype=np.float32)
        vectors = self.model.encode(
            [prefix + text for text in texts],
            batch_size=batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.ascontiguousarray(vectors, dtype=np.float32)


def index_meta(settings: Settings, corpus_sha256: str | None = None) -> dict[str, Any] | None:
    """The marker of a complete index for this model (and corpus, when given), else None."""
    paths = index_paths(settings)
    if not (paths.meta.is_file() and paths.index.is_file()):
        return None
    meta: dict[str, Any] = json.loads(paths.meta.read_text())
    if corpus_sha256 is not None and meta.get("corpus_sha256") != corpus_sha256:
        return None
    return meta


def build_index(
    settings: Settings, corpus: Corpus, encoder: Encoder, lock: BuildLock | None = None
) -> dict[str, Any]:
    """Encode every passage in batches (with progress) and write the index and its marker."""
    import faiss

    paths = index_paths(settings)
    paths.folder.mkdir(parents=True, exist_ok=True)
    index = faiss.IndexFlatIP(encoder.dim)
    total = len(corpus)
    started = last = time.monotonic()
    log(f"index: encoding {total} passages with {settings.model} (batch {settings.batch_size})")
    for start in range(0, total, settings.batch_size):
        batch = corpus.contents[start : start + settings.batch_size]
        index.add(encoder.encode(batch, settings.passage_prefix, settings.batch_size))
        now = time.monotonic()
        if lock is not None:
            lock.touch()
        if now - last >= PROGRESS_EVERY_S or index.ntotal == total:
            rate = index.ntotal / max(now - started, 1e-9)
            eta = (total - index.ntotal) / rate if rate else 0.0
            log(f"index: {index.ntotal}/{total} passages ({rate:.0f}/s, eta {eta:.0f} s)")
            last = now
    encode_s = time.monotonic() - started
    partial = paths.folder / f".{paths.index.name}.{socket.gethostname()}.{os.getpid()}.part"
    try:
        faiss.write_index(index, str(partial))
        os.replace(partial, paths.index)
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
    meta = _meta(settings, corpus, encoder.dim, round(encode_s, 3), "built")
    _write_json(paths.meta, meta)
    log(f"index: {total} passages in {encode_s:.1f} s -> {paths.index}")
    return meta


def fetch_index(settings: Settings, corpus: Corpus, dim: int) -> dict[str, Any]:
    """Take a prebuilt index from ``index_source`` (URL or path); it must match the corpus."""
    import faiss

    assert settings.index_source
    paths = index_paths(settings)
    paths.folder.mkdir(parents=True, exist_ok=True)
    partial = paths.folder / f".{paths.index.name}.{os.getpid()}.part"
    source = settings.index_source
    log(f"index: fetching {source}")
    started = time.monotonic()
    try:
        if source.startswith(("http://", "https://")):
            with urllib.request.urlopen(source, timeout=60) as response, partial.open("wb") as out:
                while chunk := response.read(1 << 22):
                    out.write(chunk)
        else:
            import shutil

            if not Path(source).is_file():
                raise IndexBuildError(f"index source {source} does not exist")
            shutil.copyfile(source, partial)
        index = faiss.read_index(str(partial))
        if index.ntotal != len(corpus) or index.d != dim:
            raise IndexBuildError(
                f"index source {source} has {index.ntotal} vectors of dimension {index.d}; "
                f"the corpus has {len(corpus)} passages and the model gives dimension {dim}"
            )
        os.replace(partial, paths.index)
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
    meta = _meta(settings, corpus, dim, round(time.monotonic() - started, 3), f"fetched {source}")
    _write_json(paths.meta, meta)
    return meta


def _meta(settings: Settings, corpus: Corpus, dim: int, seconds: float, how: str) -> dict[str, Any]:
    return {
        "model": settings.model,
        "query_prefix": settings.query_prefix,
        "passage_prefix": settings.passage_prefix,
        "dimension": dim,
        "passages": len(corpus),
        "corpus_sha256": corpus.sha256,
        "metric": "inner_product",
        "normalised": True,
        "seconds": seconds,
        "how": how,
        "host": socket.gethostname(),
    }


def _write_json(path: Path, data: dict[str, Any]) -> None:
    partial = path.with_name(f".{path.name}.{os.getpid()}.part")
    partial.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(partial, path)


def ensure(
    settings: Settings,
    encoder: Encoder | None = None,
    force: bool = False,
    wait_s: float = 6 * 3600.0,
    poll_s: float = 2.0,
) -> dict[str, Any]:
    """Make the corpus and the index complete in the data folder, once.

    Whoever takes the build lock fetches the corpus and builds (or fetches) the index; everyone
    else waits for the markers. Returns ``{"corpus": marker, "index": marker, "built": bool}``.
    """
    lock = BuildLock(settings.lock_path, settings.lock_stale_s)
    deadline = time.monotonic() + wait_s
    waited = False
    while True:
        cmeta = corpus_meta(settings)
        imeta = index_meta(settings, cmeta["sha256"]) if cmeta else None
        if cmeta and imeta and not force:
            return {"corpus": cmeta, "index": imeta, "built": False}
        if lock.try_acquire():
            try:
                cmeta = ensure_corpus(settings)
                imeta = None if force else index_meta(settings, cmeta["sha256"])
                if imeta is None:
                    corpus = load_corpus(settings)
                    encoder = encoder or Encoder(settings)
                    if settings.index_source:
                        imeta = fetch_index(settings, corpus, encoder.dim)
                    else:
                        imeta = build_index(settings, corpus, encoder, lock)
                return {"corpus": cmeta, "index": imeta, "built": True}
            finally:
                lock.release()
        if time.monotonic() > deadline:
            raise IndexBuildError(
                f"gave up after {wait_s:.0f} s waiting for the build lock {settings.lock_path} "
                f"(held by {lock.holder()})"
            )
        if not waited:
            log(f"waiting for another builder ({lock.holder()}) to finish {settings.root}")
            waited = True
        time.sleep(poll_s)


class ExactSearch:
    """Exact inner-product search of a flat index, with torch's matrix multiply for batches.

    FAISS's flat search costs about the same per query whatever the batch on these CPUs (about
    2 ms per query over 10k x 384 for 1, 8 or 64 queries); torch's sgemm and top-k score 32
    queries in about a quarter of FAISS's time. Batching the encoder pays only if the search
    batches too, so a batch of two or more queries is scored with torch over the index's own
    vectors (a view, no copy), in blocks of ``BLOCK_ROWS`` rows to bound memory; a single query
    goes to FAISS, which is faster for one. Both are exact: the same passages, scores equal to
    float rounding (a tie between two passages may come out in either order).
    """

    BLOCK_ROWS = 1 << 16

    def __init__(self, index: Any) -> None:
        import faiss
        import numpy as np
        import torch

        self.index = index
        self._flat = None
        if isinstance(index, faiss.IndexFlat) and index.metric_type == faiss.METRIC_INNER_PRODUCT:
            view = faiss.rev_swig_ptr(index.get_xb(), index.ntotal * index.d)
            self._flat = torch.from_numpy(np.asarray(view).reshape(index.ntotal, index.d))

    def search(self, vectors: Any, k: int) -> tuple[Any, Any]:
        """(scores, rows), each ``len(vectors) x k``, best first."""
        if self._flat is None or len(vectors) < 2:
            return self.index.search(vectors, k)
        import torch

        queries = torch.from_numpy(vectors)
        best_scores: Any = None
        best_rows: Any = None
        with torch.inference_mode():
            for start in range(0, self._flat.shape[0], self.BLOCK_ROWS):
                block = self._flat[start : start + self.BLOCK_ROWS]
                scores, rows = torch.topk(queries @ block.T, min(k, block.shape[0]), dim=1)
                rows += start
                if best_scores is not None:
                    scores = torch.cat([best_scores, scores], dim=1)
                    rows = torch.cat([best_rows, rows], dim=1)
                    scores, picked = torch.topk(scores, min(k, scores.shape[1]), dim=1)
                    rows = torch.gather(rows, 1, picked)
                best_scores, best_rows = scores, rows
        return best_scores.numpy(), best_rows.numpy()


@dataclass
class Loaded:
    corpus: Corpus
    index: Any
    meta: dict[str, Any]


def load(settings: Settings, encoder: Encoder) -> Loaded:
    """Load the corpus and its index and check that they belong together and to the model."""
    import faiss

    corpus = load_corpus(settings)
    meta = index_meta(settings, corpus.sha256)
    if meta is None:
        raise IndexBuildError(
            f"no index for model {settings.model} and this corpus in {index_paths(settings).folder}"
        )
    index = faiss.read_index(str(index_paths(settings).index))
    if index.ntotal != len(corpus):
        raise IndexBuildError(f"the index has {index.ntotal} vectors, the corpus {len(corpus)}")
    if index.d != encoder.dim:
        raise IndexBuildError(f"the index has dimension {index.d}, the model gives {encoder.dim}")
    return Loaded(corpus, index, meta)


__all__ = [
    "CorpusError",
    "Encoder",
    "ExactSearch",
    "IndexBuildError",
    "Loaded",
    "RetrievalError",
    "build_index",
    "ensure",
    "index_meta",
    "index_paths",
    "load",
    "resolve_model",
]
