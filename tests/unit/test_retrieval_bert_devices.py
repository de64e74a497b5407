"""The fast query forward (``rlinfra_node.retrieval.bert``) on each device torch has here: the CPU
always, a CUDA GPU where there is one (a GPU machine runs this file too; see docs/gpu.md).

The model is a small BERT with random weights made by bench/query_encoder.py, so nothing is
downloaded: the agreement with sentence-transformers' own modules is what is checked, in float32
and bfloat16, through the same ``index.Encoder`` a replica uses.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("sentence_transformers", reason="needs the retrieval extra")
torch = pytest.importorskip("torch", reason="needs the retrieval extra")

from rlinfra_node.retrieval.bert import FastEncoder, resolve_precision  # noqa: E402
from rlinfra_node.retrieval.index import Encoder  # noqa: E402
from rlinfra_node.retrieval.settings import Settings  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location(
        "rlinfra_bench_query_encoder", ROOT / "bench/query_encoder.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


bench = _bench()


def _has_gpu() -> bool:
    return shutil.which("nvidia-smi") is not None and torch.cuda.is_available()


# The skip reason names the GPU, so RLINFRA_FORBID_SKIPS lets it pass on a machine without one.
needs_gpu = pytest.mark.skipif(
    not _has_gpu(), reason="needs an NVIDIA GPU and a CUDA torch (runs on the GPU machine)"
)
DEVICES = ["cpu", pytest.param("cuda", marks=needs_gpu)]
# Different lengths and an out-of-vocabulary word: the batch is padded, some words split.
TEXTS = [*bench.QUERIES[:5], "zyxwv qqq", "moon"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder: Path = bench.random_sentence_bert(
        tmp_path_factory.mktemp("tiny-bert"), "tiny", bench.QUERIES
    )
    return folder


def _encoder(model: Path, device: str, query_encoder: str) -> Encoder:
    settings = Settings(data_dir=str(model.parent), model=str(model), query_encoder=query_encoder)
    return Encoder(settings, device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_the_fast_forward_agrees_with_the_library_on_each_device(tiny: Path, device: str) -> None:
    import numpy as np

    library = _encoder(tiny, device, "library")
    assert library.fast is None and str(library.model.device).startswith(device)
    want = library.encode(TEXTS, "query: ", 64)
    features = library.tokenize(["query: " + text for text in TEXTS])
    assert not bool(features["attention_mask"].all())  # padded: the mask is exercised
    tolerance = {"cpu": 1e-5, "cuda": 1e-4}[device]
    for precision in ("float32", "bfloat16"):
        fast = FastEncoder.build(library.model, precision)
        assert fast is not None, precision
        raw = fast(features)
        assert raw.device.type == device and raw.dtype == torch.float32
        encoder = _encoder(tiny, device, precision)
        assert encoder.query_path == f"rlinfra_node.retrieval.bert, {precision}"
        got = encoder.encode_queries(TEXTS, "query: ", 3)  # three batches of at most 3
        assert got.dtype == np.float32 and got.shape == want.shape
        assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
        if precision == "float32":
            assert np.abs(got - want).max() < tolerance
        else:
            assert (got * want).sum(axis=1).min() > 0.999
            assert np.abs(got - want).max() > 0  # bfloat16 really ran: not float32's vectors
        alone = np.concatenate([encoder.encode_queries([text], "query: ", 1) for text in TEXTS])
        assert np.abs(alone - got).max() < (tolerance if precision == "float32" else 1e-2)


@pytest.mark.parametrize("device", DEVICES)
def test_auto_picks_the_devices_native_precision(tiny: Path, device: str) -> None:
    encoder = _encoder(tiny, device, "auto")
    expected = resolve_precision("auto", device)
    if device == "cuda":  # every GPU from Ampere on computes bfloat16 natively
        major, _ = torch.cuda.get_device_capability()
        assert expected == ("bfloat16" if major >= 8 else "float32")
    assert encoder.query_path == f"rlinfra_node.retrieval.bert, {expected}"


@pytest.fixture
def torch_threads() -> Any:
    """The bench sets one intra-op thread for the process; later tests get theirs back."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_the_benchmark_writes_its_figures(tmp_path: Path, torch_threads: None) -> None:
    import json

    out = tmp_path / "encoder"
    assert (
        bench.main(["--device", "cpu", "--shapes", "tiny", "--repeats", "3", "--out", str(out)])
        == 0
    )
    results = json.loads(out.with_suffix(".json").read_text())
    assert results["machine"]["device"] == "cpu" and results["machine"]["threads"] == 1
    paths = results["shapes"]["tiny"]["paths"]
    assert list(paths) == ["library", "float32", "bfloat16"]
    assert paths["library"]["query_path"] == "sentence-transformers, float32"
    assert paths["bfloat16"]["query_path"] == "rlinfra_node.retrieval.bert, bfloat16"
    for figures in paths.values():
        assert figures["one_query_ms"] > 0 and figures["batch_ms"] > 0
        assert figures["min_cosine_to_library"] > 0.999
    assert paths["float32"]["max_abs_diff_to_library"] < 1e-5
    assert set(results["shapes"]["tiny"]["speedup"]) == {"float32", "bfloat16"}
    table = out.with_suffix(".md").read_text()
    assert table.count("| tiny |") == 3
    with pytest.raises(SystemExit) as caught:
        bench.main(["--shapes", "bert-huge", "--out", str(out)])
    assert caught.value.code == 2
