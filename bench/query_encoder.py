"""The retrieval service's query encoder on one device: sentence-transformers' own path against
``rlinfra_node.retrieval.bert``'s forward in float32 and bfloat16, for BERT models of the shapes
the profiles serve (all-MiniLM-L6-v2 on local hosts, e5-base-v2 on the clouds).

The weights are random, drawn with a fixed seed for models of those exact shapes (layers, hidden
size, heads, feed-forward size, vocabulary, positions), so the arithmetic is the real models' and
nothing is downloaded: it runs on a machine without a network, such as a GPU machine. The figures
are therefore times and the agreement between the paths (cosine of each query's vectors, and the
largest difference in float32), not retrieval quality; bench/retrieval.py measures the service
with the real MiniLM.

Each path is timed as a replica runs it (``index.Encoder``: ``encode`` for the library,
``encode_queries`` for the fast forward), tokenising included, for one query and for a batch of
32; the figure is the median of ``--repeats`` calls after warm-up calls (a quarter as many for the
batch), the paths taking turns.

    python bench/query_encoder.py                           # cpu, one thread
    python bench/query_encoder.py --device cuda --out bench/results/query_encoder_cuda
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "driver"))

from rlinfra_node.retrieval.bert import resolve_precision  # noqa: E402
from rlinfra_node.retrieval.index import Encoder  # noqa: E402
from rlinfra_node.retrieval.settings import Settings  # noqa: E402

# (layers, hidden, heads, feed-forward); all three use BERT's uncased vocabulary and 512 positions.
SHAPES: dict[str, tuple[int, int, int, int]] = {
    "tiny": (2, 64, 4, 128),
    "all-MiniLM-L6-v2": (6, 384, 12, 1536),
    "e5-base-v2": (12, 768, 12, 3072),
}
VOCAB_SIZE = 30522
POSITIONS = 512
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

QUERIES = [
    "who wrote the novel on which the film blade runner is based",
    "when did the first man land on the moon",
    "what is the capital city of australia",
    "how many players are on a rugby union team",
    "which river flows through the city of vienna",
    "who painted the ceiling of the sistine chapel",
    "what element has the atomic number 26",
    "in which year did the berlin wall fall",
]
BATCH = 32
PATHS = ("library", "float32", "bfloat16")


def words(texts: list[str]) -> list[str]:
    return sorted({word for text in texts for word in re.findall(r"[a-z0-9]+", text.lower())})


def random_sentence_bert(folder: Path, shape: str, texts: list[str], seed: int = 0) -> Path:
    """A sentence-transformers model (BERT, mean pooling, Normalize) with random weights of
    ``shape`` saved in ``folder``; its tokenizer knows every word of ``texts`` whole (so queries
    tokenise to about as many pieces as with the real vocabulary) and single letters and digits
    for anything else."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Normalize, Pooling, Transformer
    from transformers import BertConfig, BertModel, BertTokenizer

    layers, hidden, heads, intermediate = SHAPES[shape]
    folder.mkdir(parents=True, exist_ok=True)
    bert_dir = folder / "bert"
    pieces = [*"abcdefghijklmnopqrstuvwxyz0123456789"]
    vocab = SPECIAL + pieces + [f"##{piece}" for piece in pieces] + words(texts)
    bert_dir.mkdir(exist_ok=True)
    (bert_dir / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizer(vocab_file=str(bert_dir / "vocab.txt")).save_pretrained(str(bert_dir))
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=intermediate,
        max_position_embeddings=POSITIONS,
    )
    BertModel(config).save_pretrained(str(bert_dir))
    model = SentenceTransformer(
        modules=[Transformer(str(bert_dir)), Pooling(hidden, pooling_mode="mean"), Normalize()],
        device="cpu",
    )
    model.save(str(folder / "model"))
    return folder / "model"


def medians_ms(calls: dict[str, Any], repeats: int, warmup: int) -> dict[str, float]:
    """Each call's median time; the calls take turns, so a slow spell of the machine falls on
    all of them alike."""
    for call in calls.values():
        for _ in range(warmup):
            call()
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            start = time.perf_counter()
            call()  # returns numpy on the host: a CUDA device has finished when it returns
            times[name].append((time.perf_counter() - start) * 1000)
    return {name: round(statistics.median(values), 3) for name, values in times.items()}


def measure(model_dir: Path, device: str, threads: int | None, repeats: int) -> dict[str, Any]:
    import numpy as np

    batch = [f"{QUERIES[i % len(QUERIES)]} {i}" for i in range(BATCH)]
    encoders = {}
    for path in PATHS:
        settings = Settings(
            data_dir=str(model_dir.parent),
            model=str(model_dir),
            query_encoder=path,
            threads=threads,
        )
        encoder = Encoder(settings, device=device)
        if path != "library" and encoder.fast is None:
            raise SystemExit(f"{model_dir}: the fast forward does not cover this model")
        encoders[path] = encoder
    library = encoders["library"]
    want = library.encode(batch, "query: ", BATCH)
    encode = {
        path: encoder.encode if path == "library" else encoder.encode_queries
        for path, encoder in encoders.items()
    }
    one = medians_ms(
        {path: lambda e=e: e([QUERIES[0]], "query: ", BATCH) for path, e in encode.items()},
        repeats,
        3,
    )
    many = medians_ms(
        {path: lambda e=e: e(batch, "query: ", BATCH) for path, e in encode.items()},
        max(3, repeats // 4),
        2,
    )
    row: dict[str, Any] = {"paths": {}}
    for path, encoder in encoders.items():
        got = encode[path](batch, "query: ", BATCH)
        row["paths"][path] = {
            "query_path": encoder.query_path,
            "one_query_ms": one[path],
            "batch_ms": many[path],
            "batch_per_query_ms": round(many[path] / BATCH, 3),
            "min_cosine_to_library": round(float((got * want).sum(axis=1).min()), 6),
            "max_abs_diff_to_library": float(np.abs(got - want).max()),
        }
    base = row["paths"]["library"]
    row["speedup"] = {
        path: {
            "one_query": round(base["one_query_ms"] / row["paths"][path]["one_query_ms"], 2),
            "batch": round(base["batch_ms"] / row["paths"][path]["batch_ms"], 2),
        }
        for path in PATHS[1:]
    }
    return row


def machine(device: str, threads: int | None) -> dict[str, Any]:
    import sentence_transformers
    import torch
    import transformers

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "sentence_transformers": sentence_transformers.__version__,
        "device": device,
        "threads": threads if threads else torch.get_num_threads(),
        "auto_precision": resolve_precision("auto", device),
    }
    if device.startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    else:
        cpuinfo = Path("/proc/cpuinfo")
        names = (
            re.findall(r"model name\s*:\s*(.+)", cpuinfo.read_text()) if cpuinfo.exists() else []
        )
        info["cpu"] = names[0] if names else platform.processor()
    return info


def markdown(results: dict[str, Any]) -> str:
    where = results["machine"]
    lines = [
        f"# Query encoder on {where.get('gpu') or where.get('cpu')} ({where['device']}, "
        f"{where['threads']} threads)",
        "",
        f"{results['what']}",
        "",
        f"torch {where['torch']}, transformers {where['transformers']}, sentence-transformers "
        f"{where['sentence_transformers']}; `auto` picks {where['auto_precision']} here.",
        "",
        "| model shape | path | 1 query (ms) | batch of 32 (ms) | per query in batch (ms) "
        "| vs library: 1 query | vs library: batch | min cosine to library |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for shape, row in results["shapes"].items():
        for path, figures in row["paths"].items():
            speed = row["speedup"].get(path, {"one_query": 1.0, "batch": 1.0})
            lines.append(
                f"| {shape} | {figures['query_path']} | {figures['one_query_ms']} "
                f"| {figures['batch_ms']} | {figures['batch_per_query_ms']} "
                f"| {speed['one_query']}x | {speed['batch']}x "
                f"| {figures['min_cosine_to_library']} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if seen)")
    parser.add_argument("--shapes", default="all-MiniLM-L6-v2,e5-base-v2")
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument(
        "--threads", type=int, default=None, help="intra-op threads on a CPU (default 1)"
    )
    parser.add_argument("--out", default=str(ROOT / "bench/results/query_encoder"))
    args = parser.parse_args(argv)
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    threads = args.threads or (1 if device == "cpu" else None)
    shapes = [shape.strip() for shape in args.shapes.split(",") if shape.strip()]
    unknown = [shape for shape in shapes if shape not in SHAPES]
    if unknown:
        parser.error(f"--shapes: unknown {', '.join(unknown)} (known: {', '.join(SHAPES)})")
    results: dict[str, Any] = {
        "what": (
            "index.Encoder's query paths on random-weight BERT models of the named shapes: "
            "median times of one query and of a batch of 32 (tokenising included), and each "
            "path's agreement with sentence-transformers' float32 vectors"
        ),
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine(device, threads),
        "repeats": args.repeats,
        "shapes": {},
    }
    with tempfile.TemporaryDirectory(prefix="rlinfra-bench-encoder-") as tmp:
        for shape in shapes:
            folder = random_sentence_bert(Path(tmp) / shape, shape, QUERIES)
            results["shapes"][shape] = measure(folder, device, threads, args.repeats)
            print(json.dumps({shape: results["shapes"][shape]["speedup"]}), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(results))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
