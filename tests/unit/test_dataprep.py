"""rlinfra_node.dataprep on small files made here, read back with pyarrow.

The hub path (``datasets.load_dataset``) is not exercised: no dataset hub is reachable here.
Rewards are checked against the installed Verl release's own scoring code where that code runs
without torch (its routing table, the GSM8K, MATH and Search-R1 rules); the code scorers need a
sandbox service or Verl's GPU-stack deps, so code rows are checked by running a correct program
on their test cases the way those scorers do (stdin in, stdout compared).
"""

from __future__ import annotations

import ast
import gzip
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlinfra_node import dataprep

ROW_FIELDS = {"data_source", "prompt", "ability", "reward_model", "extra_info"}


def write_jsonl(path: Path, rows: list[dict[str, Any]], gz: bool = False) -> Path:
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as handle:
            handle.write(text)
    else:
        path.write_text(text)
    return path


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def read(out: Path, split: str) -> list[dict[str, Any]]:
    table = pq.read_table(out / f"{split}.parquet")
    assert set(table.column_names) >= ROW_FIELDS, table.column_names
    return table.to_pylist()


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlinfra_node.dataprep", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def gsm8k_rows(n: int, offset: int = 0) -> list[dict[str, Any]]:
    return [
        {
            "question": f"Tom has {i} apples and buys 1,000 more. How many?",
            "answer": f"He has {i} + 1000 = {i + 1000}.\n#### {i + 1000:,}",
        }
        for i in range(offset, offset + n)
    ]


def coder_rows(n: int) -> list[dict[str, Any]]:
    # The shape of rStar-Coder's synthetic_rl_testcase subset: question, inputs, outputs.
    return [
        {
            "question_id": f"q{i}",
            "question": f"Read two integers and print their sum plus {i}.",
            "inputs": [f"{a} {a + 1}\n" for a in range(12)],
            "outputs": [f"{2 * a + 1 + i}\n" for a in range(12)],
        }
        for i in range(n)
    ]


# --- Verl's own scoring code, loaded from the installed release without importing verl ---


def verl_reward_dir() -> Path:
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("verl is not installed in this venv (pip install --no-deps verl)")
    return Path(next(iter(spec.submodule_search_locations))) / "utils" / "reward_score"


def verl_scorer(name: str) -> ModuleType:
    path = verl_reward_dir() / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_verl_reward_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def verl_routes() -> dict[str, set[str]]:
    """data_source -> scorer modules, read from default_compute_score's if/elif chain."""
    tree = ast.parse((verl_reward_dir() / "__init__.py").read_text())
    func = next(
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef) and n.name == "default_compute_score"
    )
    routes: dict[str, set[str]] = {}
    for node in ast.walk(func):
        if not isinstance(node, ast.If):
            continue
        sources = [
            c.value
            for c in ast.walk(node.test)
            if isinstance(c, ast.Constant) and isinstance(c.value, str)
        ]
        modules = {
            alias.name
            for stmt in node.body
            for imp in ast.walk(stmt)
            if isinstance(imp, ast.ImportFrom)
            for alias in imp.names
        }
        for source in sources:
            routes.setdefault(source, set()).update(modules)
    return routes


# --- GSM8K ---


def test_gsm8k_rows_from_a_folder_of_jsonl(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    train = [*gsm8k_rows(5), {"question": "No final answer here?", "answer": "It is 3."}]
    write_jsonl(src / "train.jsonl", train)
    write_jsonl(src / "test.jsonl", gsm8k_rows(3, offset=100))
    out = tmp_path / "out"

    result = dataprep.prepare("gsm8k", str(src), out, log=lambda _: None)

    assert result.rows_in == {"train": 6, "test": 3}
    assert result.rows_out == {"train": 5, "test": 3}
    assert result.skipped == {"train": 1, "test": 0}
    rows = read(out, "train")
    assert len(rows) == 5
    first = rows[0]
    assert first["data_source"] == "openai/gsm8k"
    assert first["ability"] == "math"
    assert first["prompt"] == [
        {
            "role": "user",
            "content": train[0]["question"]
            + ' Let\'s think step by step and output the final answer after "####".',
        }
    ]
    assert first["reward_model"] == {"style": "rule", "ground_truth": "1000"}
    assert first["extra_info"] == {
        "split": "train",
        "index": 0,
        "answer": train[0]["answer"],
        "question": train[0]["question"],
    }
    test = read(out, "test")
    assert [r["extra_info"]["index"] for r in test] == [0, 1, 2]
    assert {r["extra_info"]["split"] for r in test} == {"test"}
    assert test[2]["reward_model"]["ground_truth"] == "1102"


def test_gsm8k_ground_truth_is_what_verls_gsm8k_rule_accepts(tmp_path: Path) -> None:
    src = write_jsonl(tmp_path / "gsm8k.jsonl", gsm8k_rows(20))
    dataprep.prepare("gsm8k", str(src), tmp_path / "out", log=lambda _: None)
    scorer = verl_scorer("gsm8k")
    assert "openai/gsm8k" in verl_routes() and verl_routes()["openai/gsm8k"] == {"gsm8k"}
    for row in read(tmp_path / "out", "train"):
        truth = row["reward_model"]["ground_truth"]
        right = f"Adding them up gives {truth}.\n#### {int(truth):,}"
        assert scorer.compute_score(right, truth) == 1.0, truth
        assert scorer.compute_score(f"#### {int(truth) + 1}", truth) == 0.0


# --- MATH ---


def test_math_last_boxed_answer_and_split_column(tmp_path: Path) -> None:
    rows = [
        {
            "problem": "What is half of one?",
            "solution": "First \\boxed{2} was wrong; it is $\\boxed{\\frac{1}{2}}$.",
            "split": "train",
        },
        {"problem": "Name the set.", "solution": "So $\\boxed{\\{1, 2\\}}$.", "split": "train"},
        {"problem": "No box.", "solution": "The answer is 4.", "split": "train"},
        {"problem": "Old style.", "solution": "Thus $\\boxed 7$.", "split": "test"},
    ]
    src = write_parquet(tmp_path / "math.parquet", rows)
    out = tmp_path / "out"
    result = dataprep.prepare("math", str(src), out, log=lambda _: None)

    assert result.rows_out == {"train": 2, "test": 1}
    train = read(out, "train")
    assert [r["reward_model"]["ground_truth"] for r in train] == ["\\frac{1}{2}", "\\{1, 2\\}"]
    assert train[0]["data_source"] == "DigitalLearningGmbH/MATH-lighteval"
    assert train[0]["prompt"][0]["content"].endswith(
        "Let's think step by step and output the final answer within \\boxed{}."
    )
    assert train[0]["extra_info"] == {"split": "train", "index": 0}
    assert read(out, "test")[0]["reward_model"]["ground_truth"] == "7"

    scorer = verl_scorer("math_reward")
    assert verl_routes()["DigitalLearningGmbH/MATH-lighteval"] == {"math_reward"}
    assert (
        scorer.compute_score("so \\boxed{\\frac{1}{2}}", train[0]["reward_model"]["ground_truth"])
        == 1.0
    )
    assert (
        scorer.compute_score("so \\boxed{\\frac{1}{3}}", train[0]["reward_model"]["ground_truth"])
        == 0.0
    )


# --- rStar-Coder ---


def test_code_rows_route_to_a_code_scorer_with_test_cases(tmp_path: Path) -> None:
    src = write_parquet(tmp_path / "rl_testcase.parquet", coder_rows(30))
    out = tmp_path / "out"
    result = dataprep.prepare("rstar-coder", str(src), out, max_tests=10, log=lambda _: None)

    assert result.rows_out == {"train": 27, "test": 3}
    rows = read(out, "train") + read(out, "test")
    assert {r["data_source"] for r in rows} == {"codecontests"}
    assert {r["ability"] for r in rows} == {"code"}
    assert {r["reward_model"]["style"] for r in rows} == {"rule"}
    # Verl routes codecontests to its code scorers (sandbox fusion, else prime_code), not GSM8K.
    routes = verl_routes()
    assert routes["codecontests"] == {"sandbox_fusion", "prime_code"}
    assert "gsm8k" not in routes["codecontests"]

    row = rows[0]
    assert row["prompt"][0]["role"] == "user"
    assert row["prompt"][0]["content"].startswith(
        coder_rows(30)[row["extra_info"]["index"]]["question"]
    )
    assert "```python" in row["prompt"][0]["content"]
    cases = json.loads(row["reward_model"]["ground_truth"])
    assert set(cases) == {"inputs", "outputs"}
    assert len(cases["inputs"]) == len(cases["outputs"]) == 10  # capped by max_tests
    # A correct program passes every case the way the scorers run it: stdin in, stdout compared.
    offset = row["extra_info"]["index"]
    program = f"a, b = map(int, input().split())\nprint(a + b + {offset})\n"
    for given, expected in zip(cases["inputs"], cases["outputs"], strict=True):
        ran = subprocess.run(
            [sys.executable, "-c", program], input=given, capture_output=True, text=True, check=True
        )
        assert ran.stdout.strip() == expected.strip()
    assert row["extra_info"]["question_id"] == f"q{offset}"


def test_code_split_is_90_10_and_deterministic_per_seed(tmp_path: Path) -> None:
    src = write_jsonl(tmp_path / "tc.jsonl", coder_rows(50))

    def test_ids(seed: int, name: str) -> list[int]:
        out = tmp_path / name
        dataprep.prepare("rstar-coder", str(src), out, seed=seed, log=lambda _: None)
        train = [r["extra_info"]["index"] for r in read(out, "train")]
        test = [r["extra_info"]["index"] for r in read(out, "test")]
        assert len(train) == 45 and len(test) == 5
        assert sorted(train + test) == list(range(50))
        assert {r["extra_info"]["split"] for r in read(out, "test")} == {"test"}
        return test

    first = test_ids(42, "a")
    assert test_ids(42, "b") == first
    assert test_ids(7, "c") != first


def test_call_based_problems_keep_fn_name_and_starter_code(tmp_path: Path) -> None:
    row = {
        "question": "Return the sum of a list.",
        "inputs": json.dumps([[[1, 2]], [[3]]]),
        "outputs": json.dumps([3, 3]),
        "func_name": "total",
        "starter_code": "class Solution:\n    def total(self, xs): ...",
    }
    src = write_jsonl(tmp_path / "seed.jsonl", [row, dict(row, question="Again.")])
    dataprep.prepare("rstar-coder", str(src), tmp_path / "out", log=lambda _: None)
    out = read(tmp_path / "out", "train") + read(tmp_path / "out", "test")
    cases = json.loads(out[0]["reward_model"]["ground_truth"])
    assert cases == {"inputs": [[[1, 2]], [[3]]], "outputs": [3, 3], "fn_name": "total"}
    assert "`total`" in out[0]["prompt"][0]["content"]
    assert "class Solution:" in out[0]["prompt"][0]["content"]


def test_sft_rows_without_test_cases_are_refused(tmp_path: Path) -> None:
    # rStar-Coder's synthetic_sft shape: a reference solution, no tests to score against.
    rows = [
        {"question": "q", "seed_question": "s", "seed_source": "x", "response": "r", "code": "c"}
    ]
    src = write_parquet(tmp_path / "synthetic_sft.parquet", rows)
    out = tmp_path / "out"
    done = run_cli("--dataset", "rstar-coder", "--source", str(src), "--out", str(out))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert str(src) in lines[0] and "'inputs'" in lines[0] and "synthetic_rl_testcase" in lines[0]
    assert not out.exists()


# --- Search-R1 ---


def search_rows(n: int, split: str) -> list[dict[str, Any]]:
    return [
        {
            "id": f"{split}_{i}",
            "question": f"who wrote book number {i}?",
            "golden_answers": [f"Author {i}", f"A. {i}"],
            "data_source": "nq" if i % 2 else "hotpotqa",
        }
        for i in range(n)
    ]


def test_search_r1_rows_mirror_verls_preprocessing(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    write_parquet(src / "train.parquet", search_rows(6, "train"))
    write_jsonl(src / "test.jsonl.gz", search_rows(2, "test"), gz=True)
    out = tmp_path / "out"
    dataprep.prepare("search-r1", str(src), out, log=lambda _: None)

    train = read(out, "train")
    assert len(train) == 6 and len(read(out, "test")) == 2
    row = train[1]
    assert row["data_source"] == "searchR1_nq"
    assert train[0]["data_source"] == "searchR1_hotpotqa"
    assert row["prompt"][0] == {
        "role": "system",
        "content": "You are a helpful and harmless assistant.",
    }
    user = row["prompt"][1]
    assert user["role"] == "user"
    assert user["content"].startswith("Answer the given question.")
    assert user["content"].endswith(
        "<answer> Beijing </answer>. Question: who wrote book number 1?"
    )
    truth = {"target": ["Author 1", "A. 1"]}
    assert row["reward_model"] == {"style": "rule", "ground_truth": truth}
    assert row["extra_info"] == {
        "index": 1,
        "need_tools_kwargs": True,
        "question": "who wrote book number 1?",
        "split": "train",
        "tools_kwargs": {
            "search": {
                "create_kwargs": {
                    "ground_truth": truth,
                    "question": "who wrote book number 1?",
                    "data_source": "searchR1_nq",
                }
            }
        },
    }
    routes = verl_routes()
    assert routes["searchR1_nq"] == routes["searchR1_hotpotqa"] == {"search_r1_like_qa_em"}
    scorer = verl_scorer("search_r1_like_qa_em")
    assert scorer.compute_score("<think>..</think><answer> author 1 </answer>", truth) == 1
    assert scorer.compute_score("<answer>Someone else</answer>", truth) == 0


def test_search_r1_sizes_sample_deterministically(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    write_parquet(src / "train.parquet", search_rows(1300, "train"))
    write_parquet(src / "test.parquet", search_rows(250, "test"))

    small = dataprep.prepare(
        "search-r1", str(src), tmp_path / "small", size="small", log=lambda _: None
    )
    assert small.rows_out == {"train": 1000, "test": 200}
    full = dataprep.prepare(
        "search-r1", str(src), tmp_path / "full", size="full", log=lambda _: None
    )
    assert full.rows_out == {"train": 1300, "test": 250}
    again = dataprep.prepare(
        "search-r1", str(src), tmp_path / "again", size="small", log=lambda _: None
    )
    assert again.rows_out == small.rows_out
    a = [r["extra_info"]["index"] for r in read(tmp_path / "small", "train")]
    b = [r["extra_info"]["index"] for r in read(tmp_path / "again", "train")]
    assert a == b and a == sorted(a) and len(set(a)) == 1000


def test_search_r1_unrouted_data_source_is_an_error(tmp_path: Path) -> None:
    rows = [dict(search_rows(1, "train")[0], data_source="webqa")] * 3
    src = write_jsonl(tmp_path / "s.jsonl", rows)
    done = run_cli("--dataset", "search-r1", "--source", str(src), "--out", str(tmp_path / "o"))
    assert done.returncode == 2
    assert "webqa" in done.stderr and "hotpotqa" in done.stderr and str(src) in done.stderr


# --- Skip when present, atomic writes, CLI ---


def test_second_run_skips_and_changed_inputs_reconvert(tmp_path: Path) -> None:
    src = write_jsonl(tmp_path / "g.jsonl", gsm8k_rows(40))
    out = tmp_path / "out"
    first = run_cli("--dataset", "gsm8k", "--source", str(src), "--out", str(out))
    assert first.returncode == 0, first.stderr
    assert "40 rows in" not in first.stdout  # a lone file is split 90/10
    assert "gsm8k train: 36 rows in, 36 converted, 36 written" in first.stdout
    assert "gsm8k test: 4 rows in, 4 converted, 4 written" in first.stdout
    marker = json.loads((out / "_SUCCESS").read_text())
    assert marker["rows"] == {"train": 36, "test": 4}
    stamp = (out / "train.parquet").stat().st_mtime_ns

    second = run_cli("--dataset", "gsm8k", "--source", str(src), "--out", str(out))
    assert second.returncode == 0
    assert "nothing to do" in second.stdout
    assert (out / "train.parquet").stat().st_mtime_ns == stamp

    reseeded = dataprep.prepare("gsm8k", str(src), out, seed=1, log=lambda _: None)
    assert not reseeded.skipped_existing
    assert json.loads((out / "_SUCCESS").read_text())["digest"] != marker["digest"]
    forced = dataprep.prepare("gsm8k", str(src), out, seed=1, force=True, log=lambda _: None)
    assert not forced.skipped_existing


def test_a_crash_mid_write_never_leaves_a_complete_looking_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = write_jsonl(tmp_path / "g.jsonl", gsm8k_rows(20))
    out = tmp_path / "out"
    dataprep.prepare("gsm8k", str(src), out, log=lambda _: None)
    assert (out / "_SUCCESS").exists()

    real = dataprep.write_parquet

    def crash_on_test(path: Path, rows: list[dict[str, Any]]) -> None:
        if path.name == "test.parquet":
            raise OSError("disk gone")
        real(path, rows)

    monkeypatch.setattr(dataprep, "write_parquet", crash_on_test)
    with pytest.raises(OSError, match="disk gone"):
        dataprep.prepare("gsm8k", str(src), out, seed=3, log=lambda _: None)
    assert not (out / "_SUCCESS").exists()
    assert not [p.name for p in out.iterdir() if ".tmp-" in p.name]
    monkeypatch.setattr(dataprep, "write_parquet", real)
    redo = dataprep.prepare("gsm8k", str(src), out, seed=3, log=lambda _: None)
    assert not redo.skipped_existing and (out / "_SUCCESS").exists()


def test_parquet_is_written_under_a_temporary_name_then_renamed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "train.parquet"
    target.write_text("old content")
    seen: list[str] = []
    real_replace = os.replace

    def spy(src: str, dst: str) -> None:
        seen.append(Path(src).name)
        assert target.read_text() == "old content"  # untouched until the rename
        real_replace(src, dst)

    monkeypatch.setattr(dataprep.os, "replace", spy)
    dataprep.write_parquet(target, [{"a": 1}])
    monkeypatch.undo()
    assert seen == [f".train.parquet.tmp-{os.getpid()}"]
    assert pq.read_table(target).to_pylist() == [{"a": 1}]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--source", "/nonexistent/g.jsonl"], "/nonexistent/g.jsonl: no such file or folder"),
        (["--source", "{tmp}/bad.jsonl"], "bad.jsonl: cannot read"),
        (["--source", "{tmp}/plain.txt"], "plain.txt: not a .jsonl, .json or .parquet file"),
        (["--source", "{tmp}/noq.jsonl"], "rows have no 'question' field"),
    ],
)
def test_bad_sources_are_one_line_exit_2(tmp_path: Path, args: list[str], fragment: str) -> None:
    (tmp_path / "bad.jsonl").write_text('{"question": "x", "answer": "#### 1"}\n{not json\n')
    (tmp_path / "plain.txt").write_text("hello\n")
    write_jsonl(tmp_path / "noq.jsonl", [{"answer": "#### 1"}])
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    done = run_cli("--dataset", "gsm8k", *argv, "--out", str(tmp_path / "out"))
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and fragment in lines[0], lines
    assert not (tmp_path / "out").exists()


def test_module_imports_only_the_standard_library_at_top_level() -> None:
    code = (
        "import sys; import rlinfra_node.dataprep; "
        "print(sorted(m for m in ('pyarrow', 'datasets', 'yaml') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
