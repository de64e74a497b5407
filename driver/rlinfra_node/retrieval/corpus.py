"""Corpora: fetched once into the data folder, read as passages, guarded by a build lock.

A corpus is JSONL (optionally gzipped), one passage per line, in wiki-18's layout:
``{"id": "0", "contents": "\\"Title\\"\\ntext ..."}``. Rows with ``title`` and ``text`` instead of
``contents`` are accepted and joined the same way. ``ensure_corpus`` writes the data folder's
``corpus.jsonl`` (normalised rows, at most ``max_passages``) atomically, then ``corpus.json``
(count, digest, source): the marker that says the corpus is complete.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import socket
import sys
import time
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from rlinfra_node.retrieval.settings import Settings


class RetrievalError(Exception):
    """A retrieval data folder that cannot be made or read; the message says why."""


class CorpusError(RetrievalError):
    """A corpus that cannot be fetched or read; the message says which line or source."""


@dataclass(frozen=True)
class Corpus:
    ids: list[str]
    contents: list[str]
    sha256: str

    def __len__(self) -> int:
        return len(self.contents)

    def document(self, row: int) -> dict[str, str]:
        return {"id": self.ids[row], "contents": self.contents[row]}


def log(message: str) -> None:
    print(f"[retrieval] {message}", file=sys.stderr, flush=True)


def _open_source(source: str) -> IO[bytes]:
    if source.startswith(("http://", "https://")):
        request = urllib.request.Request(source, headers={"User-Agent": "rlinfra-retrieval"})
        stream: IO[bytes] = urllib.request.urlopen(request, timeout=60)
    else:
        path = Path(source)
        if not path.is_file():
            raise CorpusError(f"corpus source {source} does not exist")
        stream = path.open("rb")
    # Decompress by content, not by name: URLs do not always end in .gz. Both a file opened
    # in binary mode and an HTTP response can peek without consuming.
    head = stream.peek(2)[:2]  # type: ignore[attr-defined]
    if head == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=stream)  # type: ignore[return-value]
    return stream


def normalise(row: Any, where: str) -> dict[str, str]:
    """One corpus row as ``{"id", "contents"}``; raises CorpusError naming ``where``."""
    if not isinstance(row, dict):
        raise CorpusError(f"{where}: expected a JSON object")
    if isinstance(row.get("contents"), str):
        contents = row["contents"]
    elif isinstance(row.get("text"), str):
        title = row.get("title")
        contents = f"{title}\n{row['text']}" if isinstance(title, str) else row["text"]
    else:
        raise CorpusError(f"{where}: no 'contents' (or 'title' and 'text') string")
    ident = row.get("id", "")
    return {"id": str(ident), "contents": contents}


def iter_rows(stream: IO[bytes], label: str) -> Iterator[dict[str, str]]:
    for number, raw in enumerate(stream, start=1):
        line = raw.strip()
        if not line:
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise CorpusError(f"{label} line {number}: not JSON ({exc.msg})") from None
        yield normalise(row, f"{label} line {number}")


def write_corpus(rows: Iterable[dict[str, str]], settings: Settings, source: str) -> int:
    """Write rows to the data folder's corpus (atomically) and its marker; returns the count."""
    root = settings.root
    root.mkdir(parents=True, exist_ok=True)
    partial = root / f".{settings.corpus_path.name}.{socket.gethostname()}.{os.getpid()}.part"
    digest = hashlib.sha256()
    count = 0
    started = time.monotonic()
    try:
        with partial.open("wb") as out:
            for index, row in enumerate(rows):
                if settings.max_passages is not None and count >= settings.max_passages:
                    break
                if not row["id"]:
                    row = {"id": str(index), "contents": row["contents"]}
                line = json.dumps(row, ensure_ascii=False).encode() + b"\n"
                digest.update(line)
                out.write(line)
                count += 1
                if count % 100_000 == 0:
                    log(f"corpus: {count} passages written")
            out.flush()
            os.fsync(out.fileno())
        if count == 0:
            raise CorpusError(f"corpus source {source} has no passages")
        os.replace(partial, settings.corpus_path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
    meta = {
        "passages": count,
        "sha256": digest.hexdigest(),
        "source": source,
        "max_passages": settings.max_passages,
        "seconds": round(time.monotonic() - started, 3),
    }
    _write_json(settings.corpus_meta_path, meta)
    log(f"corpus: {count} passages from {source} in {meta['seconds']} s")
    return count


def corpus_meta(settings: Settings) -> dict[str, Any] | None:
    """The corpus marker, or None when the corpus is not complete."""
    if not (settings.corpus_meta_path.is_file() and settings.corpus_path.is_file()):
        return None
    data: dict[str, Any] = json.loads(settings.corpus_meta_path.read_text())
    return data


SAMPLE_PREFIX = "sample:"


def sample_source(source: str) -> tuple[int, int] | None:
    """``sample:N`` or ``sample:N:SEED``: the synthetic corpus that ships with rlinfra
    (``rlinfra_node.retrieval.sample``), made on the node; None for any other source."""
    if not source.startswith(SAMPLE_PREFIX):
        return None
    parts = source.removeprefix(SAMPLE_PREFIX).split(":")
    try:
        count, seed = int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except (ValueError, IndexError):
        raise CorpusError(f"corpus source {source}: write sample:N or sample:N:SEED") from None
    if len(parts) > 2 or count < 1 or seed < 0:
        raise CorpusError(f"corpus source {source}: write sample:N or sample:N:SEED (N >= 1)")
    return count, seed


def ensure_corpus(settings: Settings) -> dict[str, Any]:
    """Fetch the corpus into the data folder unless it is there; returns its marker."""
    meta = corpus_meta(settings)
    if meta is not None:
        return meta
    if not settings.corpus_source:
        raise CorpusError(
            f"no corpus in {settings.root} and no corpus_source to fetch one from "
            f"(expected {settings.corpus_path.name} and {settings.corpus_meta_path.name})"
        )
    sampled = sample_source(settings.corpus_source)
    if sampled is not None:
        from rlinfra_node.retrieval import sample

        count, seed = sampled
        log(f"corpus: making {count} sample passages (seed {seed})")
        write_corpus(sample.passages(count, seed), settings, settings.corpus_source)
        meta = corpus_meta(settings)
        assert meta is not None
        return meta
    log(f"corpus: fetching {settings.corpus_source}")
    try:
        with _open_source(settings.corpus_source) as stream:
            write_corpus(
                iter_rows(stream, settings.corpus_source), settings, settings.corpus_source
            )
    except OSError as exc:
        raise CorpusError(f"cannot read corpus source {settings.corpus_source}: {exc}") from None
    meta = corpus_meta(settings)
    assert meta is not None
    return meta


def load_corpus(settings: Settings) -> Corpus:
    meta = corpus_meta(settings)
    if meta is None:
        raise CorpusError(f"no complete corpus in {settings.root}")
    ids: list[str] = []
    contents: list[str] = []
    digest = hashlib.sha256()
    with settings.corpus_path.open("rb") as stream:
        for number, raw in enumerate(stream, start=1):
            digest.update(raw)
            try:
                row = json.loads(raw)
            except ValueError:
                raise CorpusError(f"{settings.corpus_path} line {number}: not JSON") from None
            ids.append(row["id"])
            contents.append(row["contents"])
    if digest.hexdigest() != meta["sha256"] or len(contents) != meta["passages"]:
        raise CorpusError(
            f"{settings.corpus_path} does not match {settings.corpus_meta_path.name} "
            "(changed or truncated); remove both to fetch it again"
        )
    return Corpus(ids, contents, meta["sha256"])


def _write_json(path: Path, data: dict[str, Any]) -> None:
    partial = path.with_name(f".{path.name}.{os.getpid()}.part")
    partial.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(partial, path)


# ---------------------------------------------------------------- build lock


class BuildLock:
    """One builder at a time per data folder, across processes and hosts sharing the folder.

    The lock is a file created with O_EXCL (which object-store mounts and NFS honour, unlike
    flock). Its holder touches it while working; a lock nobody touched for ``stale_s`` seconds
    is taken over, so a builder that was killed does not block the next one forever.
    """

    def __init__(self, path: Path, stale_s: float) -> None:
        self.path = path
        self.stale_s = stale_s
        self.held = False

    def try_acquire(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        owner = json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "at": time.time()})
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            try:
                age = time.time() - self.path.stat().st_mtime
            except FileNotFoundError:
                return self.try_acquire()
            if age > self.stale_s:
                log(f"lock: {self.path} untouched for {age:.0f} s, taking it over")
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()
                return self.try_acquire()
            return False
        with os.fdopen(fd, "w") as handle:
            handle.write(owner)
        self.held = True
        return True

    def touch(self) -> None:
        if self.held:
            with contextlib.suppress(FileNotFoundError):
                os.utime(self.path)

    def release(self) -> None:
        if self.held:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            self.held = False

    def holder(self) -> str:
        try:
            return self.path.read_text().strip() or "?"
        except OSError:
            return "?"
