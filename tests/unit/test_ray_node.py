"""The node-local Ray helper's join: a worker waits for the head's registration in the GCS by
polling finely (Ray's own `ray start` sleeps 2 s between asks), and never waits past its deadline.
The e2e cluster tests run it for real against a Ray head."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
RAY_HELPER = REPO / "ansible" / "roles" / "ray_cluster" / "files" / "ray_node.py"


@pytest.fixture(scope="module")
def helper() -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "ray_node"}
    exec(compile(RAY_HELPER.read_text(), str(RAY_HELPER), "exec"), namespace)
    return namespace


@pytest.fixture
def listening_port() -> Iterator[int]:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield server.getsockname()[1]


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def answers(*replies: bool | Exception) -> tuple[Callable[[], bool], list[float]]:
    """A head query that gives the replies in turn (the last one from then on), and the times
    it was asked."""
    asked: list[float] = []

    def head_alive() -> bool:
        asked.append(time.monotonic())
        reply = replies[min(len(asked), len(replies)) - 1]
        if isinstance(reply, Exception):
            raise reply
        return reply

    return head_alive, asked


def test_join_waits_until_the_head_registers_polling_finely(
    helper: dict[str, Any], listening_port: int
) -> None:
    query, asked = answers(False, False, True)
    start = time.monotonic()
    missing = helper["wait_for_head"]("127.0.0.1", listening_port, start + 30, query, poll_s=0.05)
    assert missing is None
    assert len(asked) == 3
    # Far under the 2 s that Ray's own retry would sleep after the first miss.
    assert asked[-1] - asked[0] < 1.0


def test_join_stops_waiting_for_a_head_that_never_registers(
    helper: dict[str, Any], listening_port: int
) -> None:
    query, asked = answers(False)
    missing = helper["wait_for_head"](
        "127.0.0.1", listening_port, time.monotonic() + 0.3, query, poll_s=0.05
    )
    assert missing == f"the head node did not register with the GCS at 127.0.0.1:{listening_port}"
    assert len(asked) >= 2


def test_join_stops_waiting_for_a_gcs_that_does_not_answer(helper: dict[str, Any]) -> None:
    port = closed_port()
    query, asked = answers(True)
    missing = helper["wait_for_head"]("127.0.0.1", port, time.monotonic() + 0.3, query, 0.05)
    assert missing is not None
    assert missing.startswith(f"the GCS at 127.0.0.1:{port} did not answer (")
    assert asked == []  # the head is not asked before its GCS answers


def test_join_leaves_a_failing_head_query_to_ray_start(
    helper: dict[str, Any], listening_port: int
) -> None:
    query, asked = answers(AttributeError("no get_all_node_info"))
    missing = helper["wait_for_head"]("127.0.0.1", listening_port, time.monotonic() + 30, query)
    assert missing == (
        f"could not ask the GCS at 127.0.0.1:{listening_port} for its head node "
        "(AttributeError('no get_all_node_info'))"
    )
    assert len(asked) == 1


def test_the_pinned_ray_has_the_gcs_calls_join_makes(helper: dict[str, Any]) -> None:
    # The query uses Ray's GCS client and messages, as `ray start` does itself: a Ray upgrade
    # that moves them shows here (on a node, join would fall back to `ray start`'s own waits).
    raylet = pytest.importorskip("ray._raylet")
    from ray.core.generated.gcs_pb2 import GcsNodeInfo
    from ray.core.generated.gcs_service_pb2 import GetAllNodeInfoRequest

    # GcsClient hands its calls to the inner client (a constructed one blocks until a GCS answers).
    assert callable(getattr(raylet.InnerGcsClient, "get_all_node_info", None))
    assert hasattr(raylet.GcsClient, "__getattr__")
    selector = GetAllNodeInfoRequest.NodeSelector()
    selector.is_head_node = True
    assert selector.is_head_node
    assert GcsNodeInfo.GcsNodeState.ALIVE == 0
    assert callable(helper["_gcs_head_alive"]("127.0.0.1:1"))
