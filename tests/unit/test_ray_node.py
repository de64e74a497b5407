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


def ray_lookup(
    *replies: bool | Exception,
) -> tuple[
    Callable[[str, str], Any], Callable[[str, str], Callable[[], bool]], list[tuple], list[float]
]:
    """Ray's get_node stand-in, a node query giving the replies in turn, the calls made to
    either, and the times the query was asked."""
    calls: list[tuple] = []
    query, asked = answers(*replies)

    def get_node(gcs_address: str, node_id: str) -> dict:
        calls.append((gcs_address, node_id, len(asked)))
        return {"node_id": node_id}

    def node_alive(gcs_address: str, node_id: str) -> Callable[[], bool]:
        calls.append(("query", gcs_address, node_id))
        return query

    return get_node, node_alive, calls, asked


def test_start_asks_ray_for_the_node_once_it_registered(helper: dict[str, Any]) -> None:
    get_node, node_alive, calls, asked = ray_lookup(False, False, True)
    patient = helper["patient_get_node"](get_node, node_alive, wait_s=30, poll_s=0.05)
    assert patient("10.0.0.1:6379", "ab12") == {"node_id": "ab12"}
    # One query made for this node, asked until it said yes, then Ray's own call, once.
    assert calls == [("query", "10.0.0.1:6379", "ab12"), ("10.0.0.1:6379", "ab12", 3)]
    # Far under the second Ray's accessor sleeps after a miss.
    assert asked[-1] - asked[0] < 0.5


def test_start_leaves_a_failing_node_query_to_ray(helper: dict[str, Any]) -> None:
    get_node, node_alive, calls, asked = ray_lookup(AttributeError("no get_all_node_info"))
    patient = helper["patient_get_node"](get_node, node_alive, wait_s=30, poll_s=0.05)
    assert patient("10.0.0.1:6379", "ab12") == {"node_id": "ab12"}
    assert len(asked) == 1
    assert calls[-1] == ("10.0.0.1:6379", "ab12", 1)


def test_start_stops_polling_for_a_node_that_never_registers(helper: dict[str, Any]) -> None:
    get_node, node_alive, calls, asked = ray_lookup(False)
    patient = helper["patient_get_node"](get_node, node_alive, wait_s=0.3, poll_s=0.05)
    began = time.monotonic()
    assert patient("10.0.0.1:6379", "ab12") == {"node_id": "ab12"}
    assert 0.3 <= time.monotonic() - began < 5
    assert len(asked) >= 3
    assert calls[-1][:2] == ("10.0.0.1:6379", "ab12")  # Ray's call then says what is wrong


def test_the_pinned_ray_looks_up_its_node_where_start_waits(helper: dict[str, Any]) -> None:
    # start wraps ray._private.services.get_node; Ray's Node looks it up there on each call,
    # after starting the raylet. A Ray that moves the lookup shows here (on a node, `ray start`
    # would then do its own one-second waiting).
    node = pytest.importorskip("ray._private.node")
    import inspect

    import ray._private.services as services
    from ray.core.generated.gcs_service_pb2 import GetAllNodeInfoRequest

    assert "ray._private.services.get_node(" in inspect.getsource(node.Node.__init__)
    assert list(inspect.signature(services.get_node).parameters) == ["gcs_address", "node_id"]
    assert GetAllNodeInfoRequest.NodeSelector(node_id=bytes.fromhex("ab12")).node_id == b"\xab\x12"
    assert callable(helper["_gcs_node_alive"]("127.0.0.1:1", "ab12"))
