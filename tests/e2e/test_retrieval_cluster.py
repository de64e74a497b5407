"""End to end: the replicated retrieval service and search inference on a real local cluster.

One cluster of 2 hosts for the whole module (the shipped profile local-search, with this test's
corpus in place of the generated sample): `up` builds the index, deploys 3 Ray Serve replicas
over both hosts and runs the profile's job (a random-weight model made on the head, then the
Search-R1 loop with transformers on CPU over the sample questions, answers and trajectories in
the bucket); known queries through the one endpoint (`status --endpoint 8000`) return the
expected passage first, parsed the way Verl's search tool parses them; the loop, run on the head
with the model's words scripted (a random model never writes <search>), makes a real /retrieve
call per question through the cluster's endpoint and records the passages it got; a replica's
process is killed while a client sends requests (the failure window is measured and reported,
and must stay bounded) and Serve brings the count back to 3; re-running `up` with 2 replicas
scales down, and an unchanged re-run changes nothing. `down` runs at the end, also on failure.
"""

from __future__ import annotations

import json
import shlex
import shutil
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers.cluster import Cluster, cli_env, leftovers
from rlinfra_node.retrieval import sample

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
PORT = 8000
KNOWN = {
    "Mona Lisa": "The Mona Lisa is a portrait painted by Leonardo da Vinci; it hangs in the Louvre.",
    "Apollo 11": "Apollo 11 was the spaceflight that first landed humans on the Moon, in July 1969.",
    "Mount Everest": "Mount Everest is Earth's highest mountain above sea level, in the Himalayas.",
    "Penicillin": "Penicillin, the first antibiotic, was discovered by Alexander Fleming in 1928.",
}
QUERIES = {
    "Who painted the Mona Lisa?": "Mona Lisa",
    "the first people to walk on the moon": "Apollo 11",
    "what is the highest mountain in the world": "Mount Everest",
    "who discovered the first antibiotic": "Penicillin",
}
# A replica killed mid-load may fail the requests it held and those routed to it before Serve
# notices; anything longer than this means the endpoint stopped serving.
MAX_FAILURE_WINDOW_S = 30.0
RECOVERY_S = 180.0


def post(url: str, body: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
    request = urllib.request.Request(
        url + "/retrieve", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        data: dict[str, Any] = json.load(response)
        return data


def verl_titles(result: list[list[dict[str, Any]]]) -> list[str]:
    """Doc 1's title per query, as Verl's search tool derives it (first line of contents)."""
    return [hits[0]["document"]["contents"].split("\n")[0] for hits in result]


@pytest.fixture(scope="module")
def service() -> Iterator[dict[str, Any]]:
    name = f"e2e-r{uuid.uuid4().hex[:5]}"
    # Local hosts see this machine's files except /opt and /tmp: rlinfra's home (whose buckets
    # the hosts mount), the corpus and the data folder live under /var/tmp.
    shared = Path(f"/var/tmp/rlinfra-e2e-retrieval-{name}")
    shared.mkdir(parents=True)
    home = shared / "home"
    rows = [{"id": f"k{i}", "contents": f"{t}\n{x}"} for i, (t, x) in enumerate(KNOWN.items())]
    rows += sample.passages(300, seed=3)
    (shared / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    profile = yaml.safe_load((ROOT / "profiles" / "local-search.yaml").read_text())
    profile["serving"]["retrieval"].update(
        corpus_source=str(shared / "corpus.jsonl"), data_dir=str(shared / "data")
    )

    def write_profile(replicas: int) -> Path:
        profile["serving"]["retrieval"]["replicas"] = replicas
        path = shared / f"{name}.yaml"
        path.write_text(yaml.safe_dump(profile))
        return path

    cluster = Cluster(name, home, cli_env(home))
    try:
        yield {
            "cluster": cluster,
            "write_profile": write_profile,
            "rows": len(rows),
            "shared": shared,
        }
    finally:
        if (cluster.folder / "record.json").is_file():
            cluster.run("down", name, "--yes", "--delete-buckets", check=False, timeout=600)
        assert leftovers(name) == [], leftovers(name)
        shutil.rmtree(shared, ignore_errors=True)


def serve_status(cluster: Cluster) -> dict[str, Any]:
    out = cluster.run(
        "exec", cluster.name, "--", "/opt/rlinfra/venv/bin/python -m rlinfra_node.retrieval status"
    ).stdout
    data: dict[str, Any] = json.loads(out[out.index("{") :])
    return data


def running(status: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in status["replicas"] if r["state"] == "RUNNING"]


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if check():
            return time.monotonic() - started
        time.sleep(2)
    raise AssertionError(f"{what}: not within {timeout:.0f} s")


def test_up_serves_three_replicas_over_two_hosts(service: dict[str, Any]) -> None:
    cluster: Cluster = service["cluster"]
    result = cluster.json(
        "up", "--profile", str(service["write_profile"](3)), "--cluster", cluster.name, "--yes"
    )
    assert len(result["nodes"]) == 2  # type: ignore[arg-type]
    status = serve_status(cluster)
    assert status["status"] == "RUNNING"
    replicas = running(status)
    assert len(replicas) == 3
    ips = [n["private_ip"] for n in cluster.json("status", cluster.name)["nodes"]]  # type: ignore[index, union-attr]
    assert {r["node_ip"] for r in replicas} == set(ips), "replicas must spread over both hosts"

    endpoint = cluster.json("status", cluster.name, "--endpoint", str(PORT))
    url = str(endpoint["url"])
    service["url"] = url
    with urllib.request.urlopen(url + "/", timeout=20) as response:
        described = json.load(response)
    assert described["passages"] == service["rows"]
    # The replicas encode queries with the fast forward (bfloat16 or float32 by the CPU).
    assert str(described["query_encoder"]).startswith("rlinfra_node.retrieval.bert, "), described
    answer = post(url, {"queries": list(QUERIES), "topk": 3, "return_scores": True})
    assert verl_titles(answer["result"]) == list(QUERIES.values())
    assert all(len(hits) == 3 and "score" in hits[0] for hits in answer["result"])


BUCKET = "rlinfra-local-checkpoints"
HEAD_PYTHON = "/opt/rlinfra/venv/bin/python"


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_the_search_inference_job_runs_the_real_model(service: dict[str, Any]) -> None:
    """`up` submitted the profile's job: the model step, the probe, and the loop with the real
    (random-weight) model on CPU over every sample question, written to the bucket."""
    cluster: Cluster = service["cluster"]
    log = cluster.run("logs", cluster.name, "--follow", timeout=1200).stdout
    assert "job_runner: make-model done" in log or "make-model: already done" in log, log
    assert "job_runner: probe-retrieval done" in log, log
    assert "job_runner: train done" in log, log
    out = cluster.home / "buckets" / BUCKET / "search_infer"
    questions = jsonl(ROOT / "driver" / "rlinfra_node" / "samples" / "search_questions.jsonl")
    answers = jsonl(out / "answers.jsonl")
    assert [a["question"] for a in answers] == [q["question"] for q in questions]
    assert all(a["error"] is None and a["turns"] >= 1 for a in answers), answers
    trajectories = jsonl(out / "trajectories.jsonl")
    # The model's own words, generated on the head (a random model: not a sensible answer).
    assert all(t["turns"] and t["turns"][0]["text"] for t in trajectories)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is True


def test_the_search_loop_calls_the_clusters_retriever(service: dict[str, Any]) -> None:
    """The loop on the head with the model's words scripted (a random model never writes
    <search>); the HTTP calls, the cluster's retriever, the passages and the files are real."""
    cluster: Cluster = service["cluster"]
    shared: Path = service["shared"]
    script = [
        "<think>who painted it</think><search> Who painted the Mona Lisa? </search>",
        "<answer> Leonardo da Vinci </answer>",
        "<search> who discovered the first antibiotic </search>",
        "<answer> Alexander Fleming </answer>",
    ]
    (shared / "script.json").write_text(json.dumps(script))
    argv = [
        HEAD_PYTHON, "-m", "rlinfra_node.search_infer",
        "--model", "/checkpoints/models/tiny-qwen2-search",
        "--scripted-turns", str(shared / "script.json"),
        "--question", "Who painted the Mona Lisa?",
        "--question", "Which antibiotic came first?",
        "--retrieval-url", f"http://127.0.0.1:{PORT}/retrieve", "--topk", "2",
        "--out", "/checkpoints/search_scripted",
    ]  # fmt: skip
    done = cluster.run("exec", cluster.name, "--", shlex.join(argv))
    assert "search_infer:" in done.stdout
    out = cluster.home / "buckets" / BUCKET / "search_scripted"
    answers = jsonl(out / "answers.jsonl")
    assert [a["answer"] for a in answers] == ["Leonardo da Vinci", "Alexander Fleming"]
    assert [a["searches"] for a in answers] == [1, 1]
    trajectories = jsonl(out / "trajectories.jsonl")
    searches = [turn["search"] for t in trajectories for turn in t["turns"] if "search" in turn]
    assert [s["query"] for s in searches] == [
        "Who painted the Mona Lisa?",
        "who discovered the first antibiotic",
    ]
    # The passages the cluster's retriever returned, best first, as Verl would title them.
    firsts = [s["passages"][0]["document"]["contents"].split("\n")[0] for s in searches]
    assert firsts == ["Mona Lisa", "Penicillin"]
    assert all(len(s["passages"]) == 2 for s in searches)


def test_killed_replica_is_replaced_and_the_failure_window_is_bounded(
    service: dict[str, Any], record_property: Callable[[str, object], None]
) -> None:
    cluster: Cluster = service["cluster"]
    url = service["url"]
    before = running(serve_status(cluster))
    victim = before[-1]
    ranks = {
        n["private_ip"]: n["rank"]
        for n in cluster.json("status", cluster.name)["nodes"]  # type: ignore[union-attr]
    }
    failures: list[float] = []
    successes = [0]
    stop = threading.Event()

    def client() -> None:
        while not stop.is_set():
            at = time.monotonic()
            try:
                answer = post(url, {"queries": ["Who painted the Mona Lisa?"], "topk": 1}, 10)
                assert verl_titles(answer["result"]) == ["Mona Lisa"]
                successes[0] += 1
            except (OSError, urllib.error.URLError, AssertionError, ValueError):
                failures.append(at)
            time.sleep(0.05)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(3)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(3)
        killed_at = time.monotonic()
        cluster.run(
            "exec", cluster.name, "--node", str(ranks[victim["node_ip"]]), "--",
            f"kill -9 {int(victim['pid'])}",
        )  # fmt: skip

        def replaced() -> bool:
            now = running(serve_status(cluster))
            return len(now) == 3 and victim["replica_id"] not in {r["replica_id"] for r in now}

        recovered_s = wait_for(replaced, RECOVERY_S, "Serve replacing the killed replica")
        time.sleep(5)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
    window = (failures[-1] - failures[0]) if failures else 0.0
    record_property("replica_failure_window_s", round(window, 2))
    record_property("replica_failed_requests", len(failures))
    record_property("replica_recovered_s", round(recovered_s, 1))
    print(
        f"\nreplica kill: {successes[0]} ok, {len(failures)} failed, failure window "
        f"{window:.2f} s, replaced after {recovered_s:.1f} s"
    )
    assert successes[0] > 0
    assert window <= MAX_FAILURE_WINDOW_S
    assert not failures or failures[0] >= killed_at - 1.0, "requests failed before the kill"


def test_scale_down_by_rerunning_up_then_an_unchanged_rerun_changes_nothing(
    service: dict[str, Any],
) -> None:
    cluster: Cluster = service["cluster"]
    profile = str(service["write_profile"](2))
    argv = ("up", "--profile", profile, "--cluster", cluster.name, "--yes", "--no-check")
    argv += ("--no-run",)
    scaled = cluster.json(*argv)
    assert isinstance(scaled["ansible_changed"], int) and scaled["ansible_changed"] > 0
    assert len(running(serve_status(cluster))) == 2
    answer = post(service["url"], {"queries": ["who discovered the first antibiotic"]})
    assert verl_titles(answer["result"]) == ["Penicillin"]
    again = cluster.json(*argv)
    assert again["terraform_changed"] is False
    # Unchanged inputs: each node is checked (the head also sees 2 Serve replicas running).
    assert again["configured"] == "verified", again["verify_problems"]
    assert again["ansible_changed"] == 0
