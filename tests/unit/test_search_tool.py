"""rlinfra_node.search_tool: the tool-config rewrite and the retrieval connectivity probe.

The probe runs against a real HTTP server on a thread of this process (and a closed port); the
config is shaped like Verl's examples/sglang_multiturn/config/tool_config/search_tool_config.yaml.
"""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlinfra_node import search_tool as st

# As in Verl's example (a flow mapping for config, as written there).
VERL_CONFIG = """\
tools:
  - class_name: "verl.tools.search_tool.SearchTool"
    config: {
      "retrieval_service_url": "http://127.0.0.1:8000/retrieve",
      "num_workers": 120,
      "rate_limit": 120,
      "default_timeout": 30
    }
    tool_schema:
      type: "function"
      function:
        name: "search"
        description: "Searches the web for relevant information based on the given query."
        parameters:
          type: "object"
          properties:
            query_list:
              type: "array"
              item:
                type: "string"
              description: "A list of fully-formed semantic queries. The tool will return search results for each query."
          required: ["query_list"]
"""


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("http://10.0.0.5:8000", "http://10.0.0.5:8000/retrieve"),
        ("http://10.0.0.5:8000/", "http://10.0.0.5:8000/retrieve"),
        ("http://10.0.0.5:8000//", "http://10.0.0.5:8000/retrieve"),
        ("http://10.0.0.5:8000/retrieve", "http://10.0.0.5:8000/retrieve"),
        ("http://10.0.0.5:8000/retrieve/", "http://10.0.0.5:8000/retrieve"),
        (" https://search.example.org/api/ ", "https://search.example.org/api/retrieve"),
        ("http://[fd00::5]:8000", "http://[fd00::5]:8000/retrieve"),
    ],
)
def test_retrieve_url_normalises(given: str, expected: str) -> None:
    assert st.retrieve_url(given) == expected


@pytest.mark.parametrize(
    "bad", ["", "10.0.0.5:8000", "ftp://h/x", "http://", "http://h:99999", "http://h/?q=1"]
)
def test_retrieve_url_rejects_non_urls(bad: str) -> None:
    with pytest.raises(st.SearchToolError, match="--url") as err:
        st.retrieve_url(bad)
    assert err.value.exit_code == 2


def test_rewrite_points_verls_config_at_the_service(tmp_path: Path) -> None:
    src = tmp_path / "search_tool_config.yaml"
    src.write_text(VERL_CONFIG)
    dst = tmp_path / "out" / "tool.yaml"
    st.rewrite_file(src, dst, "http://10.1.2.3:8000/")

    original = yaml.safe_load(VERL_CONFIG)
    written = yaml.safe_load(dst.read_text())
    config = written["tools"][0]["config"]
    assert config["retrieval_service_url"] == "http://10.1.2.3:8000/retrieve"
    assert config["num_workers"] == 8
    # Everything else is what Verl's file says.
    assert config["rate_limit"] == 120 and config["default_timeout"] == 30
    assert written["tools"][0]["class_name"] == "verl.tools.search_tool.SearchTool"
    assert written["tools"][0]["tool_schema"] == original["tools"][0]["tool_schema"]
    assert src.read_text() == VERL_CONFIG
    assert not [p for p in dst.parent.iterdir() if ".tmp-" in p.name]


def test_rewrite_cli_with_worker_count_and_env_url(tmp_path: Path) -> None:
    src = tmp_path / "in.yaml"
    other = {"class_name": "verl.tools.gsm8k_tool.Gsm8kTool", "config": {"type": "native"}}
    doc = yaml.safe_load(VERL_CONFIG)
    doc["tools"].insert(0, other)
    src.write_text(yaml.safe_dump(doc))
    dst = tmp_path / "out.yaml"
    env = {"RETRIEVAL_SERVICE_URL": "http://retrieval.internal:8000/retrieve", "PATH": ""}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlinfra_node.search_tool",
            "rewrite",
            "--in",
            str(src),
            "--out",
            str(dst),
            "--num-workers",
            "16",
        ],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert "http://retrieval.internal:8000/retrieve" in done.stdout
    written = yaml.safe_load(dst.read_text())
    assert written["tools"][0] == other  # not a search tool: untouched
    assert (
        written["tools"][1]["config"]["retrieval_service_url"]
        == "http://retrieval.internal:8000/retrieve"
    )
    assert written["tools"][1]["config"]["num_workers"] == 16


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("tools: {}\n", "tools: expected a list"),
        ("other: 1\n", "tools: expected a list"),
        ("tools:\n  - class_name: verl.tools.gsm8k_tool.Gsm8kTool\n", "no search tool"),
        ("tools: [\n", "cannot read"),
    ],
)
def test_rewrite_bad_configs_are_exit_2_naming_the_file(
    tmp_path: Path, text: str, fragment: str
) -> None:
    src = tmp_path / "bad.yaml"
    src.write_text(text)
    dst = tmp_path / "out.yaml"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlinfra_node.search_tool",
            "rewrite",
            "--in",
            str(src),
            "--out",
            str(dst),
            "--url",
            "http://h:1",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(src) in lines[0] and fragment in lines[0], lines
    assert not dst.exists()


# --- probe ---


class Retrieval(http.server.BaseHTTPRequestHandler):
    """Answers POST /retrieve like the retrieval service after ``fail_first`` failures."""

    fail_first = 0
    answer: Any = None
    seen: list[dict[str, Any]]

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(length))
        type(self).seen.append({"path": self.path, "body": body})
        if self.path != "/retrieve":
            self.send_error(404)
            return
        if type(self).fail_first > 0:
            type(self).fail_first -= 1
            self.send_error(503, "loading index")
            return
        answer = type(self).answer
        if answer is None:
            answer = {"result": [[{"document": {"contents": "x"}, "score": 0.9}]]}
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, type[Retrieval]]]:
    handler = type("Handler", (Retrieval,), {"seen": [], "fail_first": 0, "answer": None})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_probe_succeeds_and_sends_verls_request(server: tuple[str, type[Retrieval]]) -> None:
    url, handler = server
    assert st.probe(url + "/", tries=2, interval=0.1, log=lambda _: None) == 1
    assert handler.seen == [
        {"path": "/retrieve", "body": {"queries": ["test"], "topk": 1, "return_scores": True}}
    ]


def test_probe_retries_until_the_service_is_ready(server: tuple[str, type[Retrieval]]) -> None:
    url, handler = server
    handler.fail_first = 2
    lines: list[str] = []
    assert st.probe(url, tries=5, interval=0.05, log=lines.append) == 3
    assert "HTTP 503" in lines[0] and "probe 1/5" in lines[0]


@pytest.mark.parametrize("answer", [{"results": []}, {"result": "none"}, ["not", "a", "dict"]])
def test_probe_rejects_an_answer_without_a_result_list(
    server: tuple[str, type[Retrieval]], answer: Any
) -> None:
    url, handler = server
    handler.answer = answer
    with pytest.raises(st.SearchToolError, match="no 'result' list"):
        st.probe(url, tries=2, interval=0.05, log=lambda _: None)


def test_probe_against_a_closed_port_fails_the_run(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlinfra_node.search_tool",
            "probe",
            "--url",
            url,
            "--tries",
            "2",
            "--interval",
            "0.1",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: retrieval service at ")
    assert f"{url}/retrieve" in lines[0]
    assert "after 2 tries" in lines[0] and "refused" in lines[0].lower()
    assert done.stdout.count("probe ") == 2


def test_probe_needs_a_url(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rlinfra_node.search_tool", "probe", "--tries", "1"],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": ""},
    )
    assert done.returncode == 2
    assert "RETRIEVAL_SERVICE_URL is not set" in done.stderr
