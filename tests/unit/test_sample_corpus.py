"""`sample:N[:SEED]`: the synthetic corpus that ships with rlinfra, made where the service runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rlinfra.errors import ProfileError
from rlinfra.profile import profile_from_data
from rlinfra_node.retrieval import sample
from rlinfra_node.retrieval.corpus import CorpusError, ensure_corpus, sample_source
from rlinfra_node.retrieval.settings import Settings


def test_a_sample_source_makes_the_corpus_once(tmp_path: Path) -> None:
    settings = Settings(data_dir=str(tmp_path / "data"), corpus_source="sample:40:2")
    meta = ensure_corpus(settings)
    assert meta["passages"] == 40 and meta["source"] == "sample:40:2"
    rows = [json.loads(line) for line in settings.corpus_path.read_text().splitlines()]
    assert [r["contents"] for r in rows] == [r["contents"] for r in sample.passages(40, 2)]
    written = settings.corpus_path.stat().st_mtime_ns
    assert ensure_corpus(settings) == meta  # reused, not made again
    assert settings.corpus_path.stat().st_mtime_ns == written


@pytest.mark.parametrize(
    ("source", "parsed"), [("sample:2000", (2000, 0)), ("sample:5:7", (5, 7)), ("/x.jsonl", None)]
)
def test_sample_sources_parse(source: str, parsed: tuple[int, int] | None) -> None:
    assert sample_source(source) == parsed


@pytest.mark.parametrize("source", ["sample:", "sample:0", "sample:x", "sample:1:2:3"])
def test_a_bad_sample_source_is_refused_by_the_node_and_the_profile(source: str) -> None:
    with pytest.raises(CorpusError):
        sample_source(source)
    data = yaml.safe_load(
        """
        cloud: local
        storage: [{bucket: b-1, mount_path: /checkpoints}]
        software: {pin_set: cpu-retrieval, python: system}
        serving: {retrieval: {replicas: 1}}
        """
    )
    data["serving"]["retrieval"]["corpus_source"] = source
    with pytest.raises(ProfileError) as caught:
        profile_from_data(data, "p.yaml", "p")
    assert "serving.retrieval.corpus_source" in str(caught.value)
