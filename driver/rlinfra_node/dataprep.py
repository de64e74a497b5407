"""Convert a training dataset into Verl's parquet rows: ``DIR/train.parquet`` and ``DIR/test.parquet``.

    python -m rlinfra_node.dataprep --dataset {gsm8k,math,rstar-coder,search-r1} --out DIR
        [--source SRC] [--data-files PATTERN] [--size small|medium|full] [--seed 42] [--force]

Every row has the fields Verl's ``RLHFDataset`` and reward manager read::

    data_source   str   picks the reward function (verl.utils.reward_score.default_compute_score)
    prompt        list  chat messages [{role, content}]
    ability       str
    reward_model  dict  {style: "rule", ground_truth: ...}
    extra_info    dict  {split, index, ...}; index is the row's position in its source split

Per dataset (``data_source`` is always one that Verl 0.6's ``default_compute_score`` routes):

gsm8k (``openai/gsm8k``, config ``main``)
    The question plus ``Let's think step by step and output the final answer after "####".``;
    ground truth is the number after ``####`` with thousands separators removed, which is what
    Verl's GSM8K rule compares against the last ``#### <number>`` of the response.
math (``DigitalLearningGmbH/MATH-lighteval``)
    The problem plus ``Let's think step by step and output the final answer within \\boxed{}.``;
    ground truth is the content of the solution's last ``\\boxed{...}`` (Verl's math_reward rule
    compares it, after normalisation, with the response's last boxed answer).
rstar-coder (``microsoft/rStar-Coder``)
    ``data_source`` is ``codecontests`` and ``ground_truth`` is a JSON string
    ``{"inputs": [...], "outputs": [...]}`` (plus ``fn_name`` for call-based problems), the
    shape both of Verl's code scorers read. The reward is the fraction of test cases the
    program in the response's last fenced ``python`` block passes (first 10 tests). It runs
    generated code: with ``reward_model.sandbox_fusion.url`` set, Verl sends it to a Sandbox
    Fusion service; without it, Verl's ``prime_code`` scorer runs it in a subprocess on the
    training node itself (untrusted code on that node: give a sandbox URL in production).
    The rows therefore need test cases: rStar-Coder's ``synthetic_rl_testcase`` or
    ``seed_testcase`` subsets have them (``question``, ``inputs``, ``outputs``); its
    ``synthetic_sft`` subset has only a reference solution and is refused with that reason
    (labelling such rows ``openai/gsm8k`` makes the GSM8K rule score them, almost always 0).
    A single split: 90% train / 10% test, shuffled with ``--seed``.
search-r1 (``PeterJinGo/nq_hotpotqa_train``, Search-R1 rows: question, golden_answers, data_source)
    As Verl's Search-R1 preprocessing: ``data_source`` ``searchR1_<source>``, a system message
    and the tool-calling instruction before the question, ``ground_truth`` ``{"target": [...]}``
    (the exact-match rule reads ``target``), and ``extra_info.tools_kwargs`` that hands the
    question and answers to the search tool. ``--size small`` keeps 1000 train / 200 test rows,
    ``medium`` 10000 / 2000 (a seeded sample), ``full`` all.

``--source`` is a local file (``.jsonl``, ``.json``, ``.parquet``, each optionally ``.gz``), a local
folder holding ``train.<ext>`` and ``test.<ext>``, or a hub dataset id loaded with
``datasets.load_dataset`` (needs the ``datasets`` package and access to the hub). A single file
without a ``split`` column is split 90/10 with ``--seed``.

The output is complete only when ``DIR/_SUCCESS`` exists: the parquet files are written under
temporary names and renamed into place, then the marker (which holds a digest of the inputs) is
written last. A second run with the same inputs finds the marker and does nothing; ``--force``
converts again.

Exit codes: 0 done or already there, 1 the conversion failed, 2 bad input (nothing written).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import io
import json
import os
import random
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

FORMAT_VERSION = 1
MARKER = "_SUCCESS"
SPLITS = ("train", "test")
SIZES: dict[str, tuple[int, int] | None] = {
    "small": (1000, 200),
    "medium": (10_000, 2_000),
    "full": None,
}
TEST_FRACTION = 0.1

GSM8K_INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
MATH_INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."
CODE_INSTRUCTION = (
    "Write a complete Python 3 program that reads the input from standard input and writes the "
    "answer to standard output. Give the whole program in one ```python code block."
)
CODE_CALL_INSTRUCTION = (
    "Write the function `{fn_name}` in Python 3. Give the whole solution in one ```python code "
    "block."
)
SEARCH_SYSTEM = "You are a helpful and harmless assistant."
SEARCH_INSTRUCTION = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first "
    "every time you get new information. After reasoning, if you find you lack some knowledge, "
    "you can call a search engine by <tool_call> query </tool_call> and it will return the top "
    "searched results between <tool_response> and </tool_response>. You can search as many "
    "times as your want. If you find no further external knowledge needed, you can directly "
    "provide the answer inside <answer> and </answer>, without detailed illustrations. For "
    "example, <answer> Beijing </answer>. Question: "
)
# The Search-R1 sources Verl 0.6's default_compute_score routes to its exact-match rule.
SEARCH_SOURCES = ("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle")
CODE_DATA_SOURCE = "codecontests"
MAX_TESTS = 10


class DataprepError(Exception):
    """A one-line error; ``exit_code`` 2 for bad input, 1 for a failed conversion."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class SkipRow(Exception):
    """This source row cannot become a training row (the reason is counted and printed)."""


# --------------------------------------------------------------------------------------------
# Row converters: pure, one source row -> one Verl row.


def gsm8k_answer(solution: str) -> str:
    """The number after ``####`` in a GSM8K answer, without thousands separators."""
    found = re.search(r"#### (\-?[0-9\.\,]+)", solution)
    if found is None:
        raise SkipRow('no "#### <number>" final answer')
    return found.group(1).replace(",", "")


def last_boxed(text: str) -> str:
    """The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``, ``\\boxed x``) in ``text``."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        raise SkipRow("no \\boxed{} answer")
    rest = text[start:]
    command = "\\boxed" if rest.startswith("\\boxed") else "\\fbox"
    rest = rest[len(command) :]
    if rest.startswith(" "):
        return rest[1:].split("$", 1)[0].strip()
    if not rest.startswith("{"):
        raise SkipRow("no \\boxed{} answer")
    depth = 0
    for pos, char in enumerate(rest):
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return rest[1:pos]
    raise SkipRow("unbalanced braces in \\boxed{}")


def _text(row: dict[str, Any], name: str) -> str:
    value = row.get(name)
    if not isinstance(value, str) or not value.strip():
        raise SkipRow(f"empty {name}")
    return value


def convert_gsm8k(row: dict[str, Any], split: str, index: int) -> dict[str, Any]:
    question = _text(row, "question")
    answer = _text(row, "answer")
    return {
        "data_source": "openai/gsm8k",
        "prompt": [{"role": "user", "content": f"{question} {GSM8K_INSTRUCTION}"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": gsm8k_answer(answer)},
        "extra_info": {"split": split, "index": index, "answer": answer, "question": question},
    }


def convert_math(row: dict[str, Any], split: str, index: int) -> dict[str, Any]:
    problem = _text(row, "problem")
    answer = last_boxed(_text(row, "solution"))
    return {
        "data_source": "DigitalLearningGmbH/MATH-lighteval",
        "prompt": [{"role": "user", "content": f"{problem} {MATH_INSTRUCTION}"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {"split": split, "index": index},
    }


def _test_list(row: dict[str, Any], name: str) -> list[Any]:
    value: Any = row.get(name)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            value = [value]
    if hasattr(value, "tolist"):  # numpy arrays from a hub dataset
        value = value.tolist()
    if not isinstance(value, list | tuple) or not value:
        raise SkipRow(f"no test cases in {name}")
    return list(value)


def code_ground_truth(row: dict[str, Any], max_tests: int = MAX_TESTS) -> str:
    """Test cases as the JSON text Verl's code scorers (prime_code, sandbox_fusion) parse."""
    inputs = _test_list(row, "inputs")
    outputs = _test_list(row, "outputs")
    if len(inputs) != len(outputs):
        raise SkipRow(f"{len(inputs)} test inputs but {len(outputs)} outputs")
    cases: dict[str, Any] = {"inputs": inputs[:max_tests], "outputs": outputs[:max_tests]}
    fn_name = row.get("func_name") or row.get("fn_name")
    if isinstance(fn_name, str) and fn_name.strip():
        cases["fn_name"] = fn_name.strip()
    return json.dumps(cases, ensure_ascii=False)


def convert_rstar_coder(
    row: dict[str, Any], split: str, index: int, max_tests: int = MAX_TESTS
) -> dict[str, Any]:
    question = _text(row, "question")
    ground_truth = code_ground_truth(row, max_tests)
    fn_name = json.loads(ground_truth).get("fn_name")
    instruction = CODE_CALL_INSTRUCTION.format(fn_name=fn_name) if fn_name else CODE_INSTRUCTION
    content = f"{question.rstrip()}\n\n{instruction}"
    starter = row.get("starter_code")
    if isinstance(starter, str) and starter.strip():
        content += f"\n\nStart from:\n```python\n{starter.strip()}\n```"
    extra: dict[str, Any] = {"split": split, "index": index}
    if row.get("question_id") is not None:
        extra["question_id"] = str(row["question_id"])
    return {
        "data_source": CODE_DATA_SOURCE,
        "prompt": [{"role": "user", "content": content}],
        "ability": "code",
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": extra,
    }


def _answers(value: Any) -> list[str]:
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple) or not value:
        raise SkipRow("no golden answers")
    return [str(item) for item in value]


def convert_search_r1(row: dict[str, Any], split: str, index: int) -> dict[str, Any]:
    question = _text(row, "question")
    reward = row.get("reward_model")
    if isinstance(reward, dict) and isinstance(reward.get("ground_truth"), dict):
        target = _answers(reward["ground_truth"].get("target"))
    else:
        target = _answers(row.get("golden_answers"))
    source = str(row.get("data_source") or "").removeprefix("searchR1_")
    if source not in SEARCH_SOURCES:
        raise DataprepError(
            f"row {index}: data_source {source!r} is not one Verl's Search-R1 reward routes "
            f"(allowed: {', '.join(SEARCH_SOURCES)})"
        )
    data_source = f"searchR1_{source}"
    ground_truth = {"target": target}
    return {
        "data_source": data_source,
        "prompt": [
            {"role": "system", "content": SEARCH_SYSTEM},
            {"role": "user", "content": SEARCH_INSTRUCTION + question},
        ],
        "ability": str(row.get("ability") or "fact-reasoning"),
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": {
            "index": index,
            "need_tools_kwargs": True,
            "question": question,
            "split": split,
            "tools_kwargs": {
                "search": {
                    "create_kwargs": {
                        "ground_truth": ground_truth,
                        "question": question,
                        "data_source": data_source,
                    }
                }
            },
        },
    }


@dataclass(frozen=True)
class DatasetSpec:
    convert: Callable[[dict[str, Any], str, int], dict[str, Any]]
    # Source fields every row must have (checked on the first row, before anything is written).
    required: tuple[str, ...]
    # Every field the converter reads (parquet sources read only these columns).
    columns: tuple[str, ...]
    hub_id: str
    hub_config: str | None = None
    hub_data_files: str | None = None
    hint: dict[str, str] = field(default_factory=dict)


DATASETS: dict[str, DatasetSpec] = {
    "gsm8k": DatasetSpec(
        convert_gsm8k,
        ("question", "answer"),
        ("question", "answer", "split"),
        "openai/gsm8k",
        "main",
    ),
    "math": DatasetSpec(
        convert_math,
        ("problem", "solution"),
        ("problem", "solution", "split"),
        "DigitalLearningGmbH/MATH-lighteval",
    ),
    "rstar-coder": DatasetSpec(
        convert_rstar_coder,
        ("question", "inputs", "outputs"),
        ("question", "inputs", "outputs", "func_name", "starter_code", "question_id", "split"),
        "microsoft/rStar-Coder",
        hub_data_files="synthetic_rl_testcase/data-00000-of-*.parquet",
        hint={
            "inputs": "the code reward runs test cases; rStar-Coder's synthetic_sft rows have "
            "none: use its synthetic_rl_testcase or seed_testcase subset",
        },
    ),
    "search-r1": DatasetSpec(
        convert_search_r1,
        ("question", "data_source"),
        ("question", "golden_answers", "data_source", "reward_model", "ability", "split"),
        "PeterJinGo/nq_hotpotqa_train",
    ),
}


# --------------------------------------------------------------------------------------------
# Reading sources.

Rows = list[dict[str, Any]]
_EXTENSIONS = (".jsonl", ".json", ".parquet")


def _kind(path: Path) -> str:
    name = path.name.lower().removesuffix(".gz")
    for ext in _EXTENSIONS:
        if name.endswith(ext):
            return ext
    raise DataprepError(f"{path}: not a .jsonl, .json or .parquet file (optionally .gz)")


def _open_bytes(path: Path) -> IO[bytes]:
    if path.name.lower().endswith(".gz"):
        return cast(IO[bytes], gzip.open(path, "rb"))
    return open(path, "rb")


def read_file(path: Path, columns: Sequence[str] = ()) -> Iterator[dict[str, Any]]:
    """The rows of one local file, as dicts. Parquet reads only ``columns`` (those present)."""
    kind = _kind(path)
    try:
        if kind == ".parquet":
            import pyarrow.parquet as pq

            with _open_bytes(path) as raw:
                handle: Any = io.BytesIO(raw.read()) if path.name.endswith(".gz") else raw
                parquet = pq.ParquetFile(handle)
                present = set(parquet.schema_arrow.names)
                wanted = [c for c in columns if c in present] if columns else None
                for batch in parquet.iter_batches(batch_size=2048, columns=wanted):
                    yield from batch.to_pylist()
        elif kind == ".jsonl":
            with _open_bytes(path) as raw:
                for number, line in enumerate(io.TextIOWrapper(raw, encoding="utf-8"), 1):
                    if line.strip():
                        yield _object(json.loads(line), path, number)
        else:
            with _open_bytes(path) as raw:
                data = json.load(io.TextIOWrapper(raw, encoding="utf-8"))
            if isinstance(data, dict) and isinstance(data.get("data"), list):
                data = data["data"]
            if not isinstance(data, list):
                raise DataprepError(f"{path}: a .json source must hold a list of row objects")
            for number, item in enumerate(data, 1):
                yield _object(item, path, number)
    except (json.JSONDecodeError, UnicodeDecodeError, OSError, EOFError) as exc:
        raise DataprepError(f"{path}: cannot read: {_one_line(exc)}") from exc
    except Exception as exc:  # pyarrow's errors (ArrowInvalid, ...) have no common stdlib base
        if type(exc).__module__.startswith("pyarrow"):
            raise DataprepError(f"{path}: cannot read parquet: {_one_line(exc)}") from exc
        raise


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _object(item: Any, path: Path, number: int) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise DataprepError(f"{path}: row {number} is not an object")
    return item


def _split_files(folder: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for split in SPLITS:
        matches = sorted(
            p
            for p in folder.iterdir()
            if p.is_file()
            and p.name.lower().split(".", 1)[0] == split
            and p.name.lower().removesuffix(".gz").endswith(_EXTENSIONS)
        )
        if len(matches) > 1:
            raise DataprepError(
                f"{folder}: several {split} files: {', '.join(p.name for p in matches)}"
            )
        if matches:
            found[split] = matches[0]
    if "train" not in found:
        raise DataprepError(f"{folder}: no train.jsonl/.json/.parquet[.gz] file in the folder")
    return found


def is_local(source: str) -> bool:
    """A path (exists, or looks like one) rather than a hub id ``owner/name``."""
    if os.path.exists(source):
        return True
    return source.startswith(("/", ".", "~")) or source.lower().removesuffix(".gz").endswith(
        _EXTENSIONS
    )


def load_local(source: str, columns: Sequence[str]) -> dict[str, Rows]:
    """Rows per split of a local file or folder. A file with a ``split`` column is split by it."""
    path = Path(source).expanduser()
    if not path.exists():
        raise DataprepError(f"{source}: no such file or folder")
    if path.is_dir():
        return {split: list(read_file(p, columns)) for split, p in _split_files(path).items()}
    rows = list(read_file(path, columns))
    if rows and all(r.get("split") in SPLITS for r in rows):
        return {split: [r for r in rows if r["split"] == split] for split in SPLITS}
    return {"train": rows}


def load_hub(
    source: str, config: str | None, data_files: str | None
) -> dict[str, Rows]:  # pragma: no cover - needs the dataset hub, not reachable in tests
    """Rows per split of a hub dataset (``datasets.load_dataset``)."""
    try:
        import datasets
    except ImportError as exc:
        raise DataprepError(
            f"{source}: reading a hub dataset needs the 'datasets' package", exit_code=1
        ) from exc
    print(f"dataprep: loading {source} from the hub", flush=True)
    try:
        loaded = datasets.load_dataset(source, name=config, data_files=data_files)
    except Exception as exc:
        raise DataprepError(f"{source}: cannot load from the hub: {exc}", exit_code=1) from exc
    return {str(split): [dict(r) for r in loaded[split]] for split in loaded}


# --------------------------------------------------------------------------------------------
# Splitting and sampling: deterministic for a given seed.


def split_rows(
    splits: dict[str, list[Any]], seed: int, test_fraction: float = TEST_FRACTION
) -> dict[str, list[tuple[int, Any]]]:
    """(source index, row) pairs for train and test.

    Given splits are kept; a lone split is shuffled with ``seed`` and cut ``test_fraction`` off
    for test. Rows keep their source order within each split.
    """
    if "train" in splits and "test" in splits and splits["test"]:
        return {s: list(enumerate(splits[s])) for s in SPLITS}
    rows = splits.get("train") or next(iter(splits.values()), [])
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    n_test = round(len(rows) * test_fraction) if len(rows) > 1 else 0
    n_test = max(n_test, 1) if len(rows) > 1 else 0
    test = sorted(order[:n_test])
    train = sorted(order[n_test:])
    return {"train": [(i, rows[i]) for i in train], "test": [(i, rows[i]) for i in test]}


def sample(rows: list[Any], limit: int | None, seed: int) -> list[Any]:
    """At most ``limit`` rows, a seeded sample kept in source order."""
    if limit is None or len(rows) <= limit:
        return rows
    keep = sorted(random.Random(seed).sample(range(len(rows)), limit))
    return [rows[i] for i in keep]


# --------------------------------------------------------------------------------------------
# Writing: temp files renamed into place, marker last.


def _atomic_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def write_parquet(path: Path, rows: Rows) -> None:
    """``rows`` as one parquet file at ``path``, via a temporary name in the same folder."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(rows)
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    _atomic_bytes(path, buffer.getvalue())


def digest(args: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(args, sort_keys=True).encode()).hexdigest()


def _source_identity(source: str) -> Any:
    """What identifies a source's content cheaply: size and mtime of local files, else the id."""
    if not is_local(source):
        return source
    path = Path(source).expanduser().resolve()
    files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
    return [[str(p), p.stat().st_size, p.stat().st_mtime_ns] for p in files if p.exists()]


def done(out: Path, wanted: str) -> bool:
    """True when ``out`` holds both splits and a marker written for the same inputs."""
    marker = out / MARKER
    if not all((out / f"{s}.parquet").is_file() for s in SPLITS) or not marker.is_file():
        return False
    try:
        recorded = json.loads(marker.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(recorded, dict) and recorded.get("digest") == wanted


@dataclass
class Result:
    out: Path
    skipped_existing: bool
    rows_in: dict[str, int] = field(default_factory=dict)
    rows_out: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)


def _check_required(spec: DatasetSpec, splits: dict[str, Rows], source: str, dataset: str) -> None:
    for rows in splits.values():
        if not rows:
            continue
        for name in spec.required:
            if name not in rows[0]:
                hint = spec.hint.get(name, f"a {dataset} source has {', '.join(spec.required)}")
                raise DataprepError(f"{source}: rows have no '{name}' field ({hint})")
    if not any(splits.values()):
        raise DataprepError(f"{source}: no rows")


def prepare(
    dataset: str,
    source: str,
    out: Path,
    size: str = "full",
    seed: int = 42,
    force: bool = False,
    data_files: str | None = None,
    max_tests: int = MAX_TESTS,
    log: Callable[[str], None] = print,
) -> Result:
    """Convert ``source`` into ``out``/{train,test}.parquet unless the same conversion is there."""
    spec = DATASETS[dataset]
    limits = SIZES[size]
    identity = {
        "version": FORMAT_VERSION,
        "dataset": dataset,
        "source": _source_identity(source),
        "data_files": data_files,
        "size": size,
        "seed": seed,
        "max_tests": max_tests if dataset == "rstar-coder" else None,
    }
    wanted = digest(identity)
    if not force and done(out, wanted):
        log(f"dataprep: {out} already holds {dataset} ({size}, seed {seed}); nothing to do")
        return Result(out, skipped_existing=True)

    if is_local(source):
        splits = load_local(source, spec.columns)
    else:
        own = source == spec.hub_id
        config = spec.hub_config if own else None
        splits = load_hub(source, config, data_files or (spec.hub_data_files if own else None))
    _check_required(spec, splits, source, dataset)
    parts = split_rows(splits, seed)
    result = Result(out, skipped_existing=False)
    converted: dict[str, Rows] = {}
    for split in SPLITS:
        pairs = parts[split]
        result.rows_in[split] = len(pairs)
        rows: Rows = []
        reasons: dict[str, int] = {}
        for index, row in pairs:
            try:
                if dataset == "rstar-coder":
                    rows.append(convert_rstar_coder(row, split, index, max_tests))
                else:
                    rows.append(spec.convert(row, split, index))
            except SkipRow as why:
                reasons[str(why)] = reasons.get(str(why), 0) + 1
            except DataprepError as exc:
                raise DataprepError(f"{source}: {split} {exc}") from exc
        limit = None if limits is None else limits[SPLITS.index(split)]
        converted[split] = sample(rows, limit, seed)
        result.rows_out[split] = len(converted[split])
        result.skipped[split] = sum(reasons.values())
        detail = "; ".join(f"{n} {why}" for why, n in sorted(reasons.items()))
        log(
            f"dataprep: {dataset} {split}: {len(pairs)} rows in, {len(rows)} converted, "
            f"{len(converted[split])} written" + (f" (skipped: {detail})" if detail else "")
        )
    if not converted["train"]:
        raise DataprepError(f"{source}: no train row could be converted", exit_code=1)

    out.mkdir(parents=True, exist_ok=True)
    # The old marker goes first: from here until the new one is written the folder is incomplete.
    with contextlib.suppress(FileNotFoundError):
        (out / MARKER).unlink()
    for split in SPLITS:
        write_parquet(out / f"{split}.parquet", converted[split])
    marker = {"digest": wanted, "inputs": identity, "rows": result.rows_out}
    _atomic_bytes(out / MARKER, (json.dumps(marker, indent=2, sort_keys=True) + "\n").encode())
    log(f"dataprep: wrote {out}/train.parquet, {out}/test.parquet and {out}/{MARKER}")
    return result


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m rlinfra_node.dataprep",
        description="Convert a dataset into Verl's parquet rows (train.parquet, test.parquet).",
    )
    parser.add_argument("--dataset", required=True, choices=sorted(DATASETS))
    parser.add_argument(
        "--source", help="local file/folder or hub dataset id (default: the dataset's hub id)"
    )
    parser.add_argument("--out", required=True, type=Path, help="folder for the parquet files")
    parser.add_argument("--size", choices=list(SIZES), default="full")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--data-files", help="hub data_files pattern (hub sources only)")
    parser.add_argument(
        "--max-tests", type=int, default=MAX_TESTS, help="rstar-coder: test cases kept per problem"
    )
    parser.add_argument("--force", action="store_true", help="convert even when already done")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    source = args.source or DATASETS[args.dataset].hub_id
    if args.max_tests < 1:
        print("Error: --max-tests: must be at least 1", file=sys.stderr)
        return 2
    try:
        prepare(
            args.dataset,
            source,
            args.out,
            size=args.size,
            seed=args.seed,
            force=args.force,
            data_files=args.data_files,
            max_tests=args.max_tests,
            log=lambda line: print(line, flush=True),
        )
    except DataprepError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
