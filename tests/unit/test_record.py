"""The cluster record: typed, versioned, readable from older versions; `run` starts from it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from rlinfra.deploy import read_record, update_record, write_record
from rlinfra.errors import OperationError
from rlinfra.ops.prepare import Request, prepare
from rlinfra.profile import Overrides, load_profile
from rlinfra.record import Host, Record, Stage


def test_a_record_written_before_versions_reads_typed(tmp_path: Path) -> None:
    old = {
        "cluster": "c",
        "cloud": "local",
        "stage": "ready",
        "hosts": [
            {
                "name": "c-0",
                "rank": 0,
                "ssh_host": "10.0.0.10",
                "private_ip": "10.0.0.10",
                "interface": "eth0",
                "ssh_user": "root",
            }
        ],
        "ray": {"dashboard_port": 8280},
        "a_field_of_another_version": 1,
    }
    (tmp_path / "record.json").write_text(json.dumps(old))
    record = read_record(tmp_path)
    assert record is not None
    assert record.schema_version == 1 and record.stage is Stage.READY
    assert record.hosts == [Host("c-0", 0, "10.0.0.10", "10.0.0.10", "eth0", "root")]
    assert record.dashboard_port == 8280
    assert Record(cluster="x").dashboard_port == 8265


def test_updates_are_validated_and_timestamped(tmp_path: Path) -> None:
    first = write_record(tmp_path, Record(cluster="c"))
    assert first.created_at and first.updated_at
    updated = update_record(tmp_path, stage="infrastructure", jobs=[{"submission_id": "j"}])
    assert updated.stage is Stage.INFRASTRUCTURE and updated.created_at == first.created_at
    on_disk = json.loads((tmp_path / "record.json").read_text())
    assert on_disk["stage"] == "infrastructure" and on_disk["schema_version"] == 1
    with pytest.raises(ValueError):
        update_record(tmp_path, stage="halfway")


def test_an_unreadable_record_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "record.json").write_text(json.dumps({"cluster": "c", "stage": 3}))
    with pytest.raises(OperationError) as caught:
        read_record(tmp_path)
    assert "not a cluster record rlinfra can read" in caught.value.message


def test_run_starts_from_the_profile_up_resolved_not_the_file_today(tmp_path: Path) -> None:
    source = tmp_path / "mine.yaml"
    data = yaml.safe_load((Path(__file__).resolve().parents[2] / "profiles/local.yaml").read_text())
    source.write_text(yaml.safe_dump(data))
    profile, _ = load_profile(str(source))
    resolved = profile.model_copy(
        update={"resources": profile.resources.model_copy(update={"num_nodes": 3})}
    ).model_dump(mode="json")
    # The file changes after `up`.
    data["resources"]["num_nodes"] = 1
    data["env"]["TOTAL_EPOCHS"] = "9"
    source.write_text(yaml.safe_dump(data))
    request = Request(
        profile=str(source),
        cluster="c",
        overrides=Overrides(env={"TOTAL_EPOCHS": "2"}),
        resolved=resolved,
    )
    plan, _ = prepare(request, dict(os.environ))
    assert plan.num_nodes == 3
    assert plan.profile.env["TOTAL_EPOCHS"] == "2"  # this run's --env, over up's profile
    assert [(o.field, o.old, o.new) for o in plan.overrides] == [("env.TOTAL_EPOCHS", "1", "2")]


def test_the_records_parts_are_typed_and_keep_fields_they_do_not_know(tmp_path: Path) -> None:
    folder = tmp_path / "c"
    folder.mkdir()
    (folder / "record.json").write_text(
        json.dumps(
            {
                "schema_version": 1,
                "cluster": "c",
                "ray": {"head_port": 6380, "dashboard_port": 8266, "newer_port": 1},
                "services": [{"name": "model", "engine": "vllm", "port": 9090}],
                "jobs": [{"submission_id": "rlinfra-c-ppo-1", "workload": "ppo"}],
                "check": {"backend": "gloo", "world_size": 2, "results": [{"size_bytes": 1}]},
                "recoveries": [
                    {"job": "rlinfra-c-ppo-1", "nodes": ["c-1"], "seconds": {"heal": 3}}
                ],
            }
        )
    )
    record = read_record(folder)
    assert record is not None
    assert record.dashboard_port == 8266 and record.ray.head_port == 6380
    assert record.services[0].port == 9090 and record.jobs[0].submission_id == "rlinfra-c-ppo-1"
    assert record.check is not None and record.check.world_size == 2
    assert record.recoveries[0].nodes == ["c-1"] and record.recoveries[0].seconds == {"heal": 3}
    # A field a newer rlinfra wrote survives this one's rewrite of the record.
    written = write_record(folder, record)
    assert json.loads((folder / "record.json").read_text())["ray"]["newer_port"] == 1
    assert written.ray.client_server_port == 10001  # the node contract's default
    # A part of the wrong shape is refused as an unreadable record, naming the file.
    (folder / "record.json").write_text(json.dumps({"services": [{"name": "model"}]}))
    with pytest.raises(OperationError, match="not a cluster record rlinfra can read"):
        read_record(folder)
